"""Figures of what the DNC's memory does over time (thesis Figs. 2.3a and 2.4).

From a :class:`~recombine.models.layers.dnc_memory.DNCMemoryTrace` of one sequence:

* Fig. 2.3a: input, target and network output bit maps over time;
* the write weighting ``w_t^w`` and a head's read weighting ``w_t^{r,i}`` (eq. A.12) over time;
* Fig. 2.4a-b: the forward link distribution ``f_t^i`` (eq. 2.5 / A.10) of a head, one address
  distribution over the cells per time step (after sharpening when S is on);
* Fig. 2.4c-d: the read modes ``pi_t^i`` (backward, content, forward; eq. A.12) of a head;
* Fig. 2.2b (models with masked content addressing, M): the read mask ``m_t^{r,i}`` of a head (eq. 2.1,
  one weight per channel of a memory cell), i.e. which parts of a cell its content lookup compares.

Every panel is a heatmap with time on the x axis. :func:`save_link_comparison` puts the forward
distributions and read modes of several models on the same input side by side (DNC-D vs DNC-DS is
Fig. 2.4). Library code: nothing is shown, figures are written to files (matplotlib, Agg).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recombine.errors import UserError
from recombine.models.layers.dnc_memory import DNCMemoryTrace

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: the order of the read modes in ``pi_t^i`` (eq. A.12) and in the trace
READ_MODE_NAMES = ("backward", "content", "forward")


@dataclass
class MemoryTraceArrays:
    """One sequence's trace as numpy arrays, time first (``T`` steps, ``N`` cells, ``R`` heads)."""

    write_weighting: np.ndarray  # [T, N]
    read_weightings: np.ndarray  # [T, R, N]
    forward: np.ndarray  # [T, R, N]
    backward: np.ndarray  # [T, R, N]
    read_modes: np.ndarray  # [T, R, 3] (backward, content, forward)
    usage: np.ndarray  # [T, N]
    read_masks: np.ndarray | None = None  # [T, R, W], only with masked content addressing (M)
    inputs: np.ndarray | None = None  # [T, X] bits as the task gives them
    targets: np.ndarray | None = None  # [T, Y]
    outputs: np.ndarray | None = None  # [T, Y] output probabilities

    @property
    def n_steps(self) -> int:
        return self.write_weighting.shape[0]

    @property
    def n_heads(self) -> int:
        return self.read_weightings.shape[1]


def trace_arrays(
    trace: DNCMemoryTrace,
    index: int = 0,
    length: int | None = None,
    inputs: np.ndarray | None = None,
    targets: np.ndarray | None = None,
    outputs: np.ndarray | None = None,
) -> MemoryTraceArrays:
    """Sequence ``index`` of a batched trace (``[B, T, ...]``), cut to its first ``length`` steps.

    ``inputs``/``targets``/``outputs`` (``[T', ...]`` for this sequence, ``T' >= length``) are kept for
    the bit-map panels and cut the same way.
    """
    n_batch, n_steps = trace.write_weighting.shape[:2]
    if not 0 <= index < n_batch:
        raise UserError(f"trace index must be in [0, {n_batch - 1}]; got {index}")
    length = n_steps if length is None else length
    if not 1 <= length <= n_steps:
        raise UserError(f"trace length must be in [1, {n_steps}]; got {length}")

    def take(values: object) -> np.ndarray:
        return values[index, :length].detach().cpu().numpy()  # type: ignore[attr-defined]

    def cut(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else np.asarray(values)[:length]

    return MemoryTraceArrays(
        write_weighting=take(trace.write_weighting),
        read_weightings=take(trace.read_weightings),
        forward=take(trace.forward),
        backward=take(trace.backward),
        read_modes=take(trace.read_modes),
        usage=take(trace.usage),
        read_masks=None if trace.read_masks is None else take(trace.read_masks),
        inputs=cut(inputs),
        targets=cut(targets),
        outputs=cut(outputs),
    )


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def panel_arrays(arrays: MemoryTraceArrays, head: int = 0) -> dict[str, np.ndarray]:
    """The heatmaps of :func:`draw_memory_trace` by panel title, each ``[rows, T]`` (time on x)."""
    if not 0 <= head < arrays.n_heads:
        raise UserError(f"read head must be in [0, {arrays.n_heads - 1}]; got {head}")
    panels: dict[str, np.ndarray] = {}
    for name in ("inputs", "targets", "outputs"):
        values = getattr(arrays, name)
        if values is not None:
            panels[name] = values.T
    panels["write weighting"] = arrays.write_weighting.T
    panels[f"read weighting (head {head})"] = arrays.read_weightings[:, head].T
    panels[f"forward links (head {head})"] = arrays.forward[:, head].T
    panels[f"read modes (head {head})"] = arrays.read_modes[:, head].T
    if arrays.read_masks is not None:  # Fig. 2.2b, with time on x as in every other panel
        panels[f"read mask (head {head})"] = arrays.read_masks[:, head].T
    return panels


def _row_label(panel: str) -> str:
    if panel.startswith("read mask"):
        return "channel"
    return "cell" if "links" in panel or "weighting" in panel else "bit"


def draw_memory_trace(arrays: MemoryTraceArrays, head: int = 0, title: str = "") -> Figure:
    """A column of heatmaps sharing the time axis: bit maps (Fig. 2.3a), write and read weightings,
    forward link distribution (Fig. 2.4a-b), read modes (Fig. 2.4c-d) and, for a masked DNC, the read mask
    (Fig. 2.2b) of read head ``head``."""
    plt = _pyplot()
    panels = panel_arrays(arrays, head)
    heights = [max(2.0, min(values.shape[0], 16) * 0.18) for values in panels.values()]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(6.0, 0.09 * arrays.n_steps + 2.0), sum(heights) + 0.8),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, (name, values) in zip(axes[:, 0], panels.items(), strict=True):
        image = ax.imshow(values, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(name, fontsize=8, loc="left")
        if name.startswith("read modes"):
            ax.set_yticks(range(3), [m[0] for m in READ_MODE_NAMES], fontsize=7)
        else:
            ax.set_ylabel(_row_label(name), fontsize=7)
        fig.colorbar(image, ax=ax, fraction=0.015, pad=0.01)
    axes[-1, 0].set_xlabel("time step")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_memory_trace(arrays: MemoryTraceArrays, path: str | Path, head: int = 0, title: str = "") -> Path:
    """Write :func:`draw_memory_trace` to ``path`` (the format follows the suffix, e.g. ``.png``)."""
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = draw_memory_trace(arrays, head, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_link_comparison(traces: dict[str, MemoryTraceArrays], head: int = 0) -> Figure:
    """Fig. 2.4: one column per model (same input), forward link distribution on top, read modes below.

    As in the thesis, each row of the upper panel is one step's address distribution over the cells
    (time runs down); the read-mode panel has the columns backward, content, forward.
    """
    if not traces:
        raise UserError("link comparison needs at least one trace")
    plt = _pyplot()
    fig, axes = plt.subplots(
        2,
        len(traces),
        figsize=(3.2 * len(traces), 7.0),
        squeeze=False,
        gridspec_kw={"height_ratios": [3, 3]},
    )
    for column, (name, arrays) in enumerate(traces.items()):
        if not 0 <= head < arrays.n_heads:
            raise UserError(f"read head must be in [0, {arrays.n_heads - 1}]; got {head}")
        upper, lower = axes[0, column], axes[1, column]
        upper.imshow(arrays.forward[:, head], aspect="auto", interpolation="nearest", vmin=0.0, vmax=1.0)
        upper.set_title(f"{name}: forward links (head {head})", fontsize=8)
        upper.set_xlabel("cell", fontsize=7)
        upper.set_ylabel("time step", fontsize=7)
        lower.imshow(arrays.read_modes[:, head], aspect="auto", interpolation="nearest", vmin=0.0, vmax=1.0)
        lower.set_title(f"{name}: read modes (head {head})", fontsize=8)
        lower.set_xticks(range(3), list(READ_MODE_NAMES), fontsize=7)
        lower.set_ylabel("time step", fontsize=7)
    fig.tight_layout()
    return fig


def save_link_comparison(traces: dict[str, MemoryTraceArrays], path: str | Path, head: int = 0) -> Path:
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = draw_link_comparison(traces, head)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
