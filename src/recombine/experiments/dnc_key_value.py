"""Reproduction ``dnc-key-value``: masked content addressing on key-value retrieval (thesis 2.3, Fig. 2.2b).

The task (:class:`~recombine.tasks.memory_tasks.KeyValueConfig`) stores ``L`` words ``w1 | w2``, then asks
for every ``w2`` given its ``w1`` (phase *q1*), then for every ``w1`` given its ``w2`` (phase *q2*). A
content lookup has to compare a different half of the cells in each phase. The thesis's masked lookup
(eq. 2.1) lets the controller choose the compared channels per step, and Fig. 2.2b shows a DNC-M's read mask
switching between the phases ("When the query switches from w_1 to w_2, the mask switches accordingly").

The reproduction trains DNC and DNC-M (:func:`~recombine.experiments.dnc_memory.run_variant_comparison`:
loss curves, steps to threshold, traces, kept runs, ``--jobs``) and adds, for every masked variant:

* ``read_mask_<variant>.png``: the read mask of the first seed on its first evaluation sequence, time on y
  from the bottom and the phases *in*, *q1*, *q2* marked, as in Fig. 2.2b;
* the **mask switch** per seed: ``1 - cos(m_q1, m_q2)``, where ``m_q`` is the read mask averaged over the
  answer steps of phase ``q`` on the seed's evaluation sequences. 0: the same channels are compared in both
  phases; towards 1: disjoint channels. The number is ours; the thesis shows one example.

A.2's sizes are the defaults: LSTM controller 32, 16 cells of 32, one read head, ``W = 8``, ``L`` in [2, 16].
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recombine.experiments.dnc_memory import (
    DNC_REPRODUCTION_DEFAULTS,
    DNC_REPRODUCTION_QUICK,
    VARIANTS,
    DNCComparisonConfig,
    DNCReproductionResult,
    evaluation_sequence,
    run_variant_comparison,
    trace_sequence,
)
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.models.dnc import DNC
from recombine.probes.dnc_traces import MemoryTraceArrays
from recombine.tasks.memory_tasks import KeyValueConfig, MemorySequence

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: evaluation sequences per seed whose answer steps the mask switch averages over
SWITCH_SEQUENCES = 8


@dataclass
class DNCKeyValueConfig(DNCComparisonConfig):
    """``dnc-key-value``: DNC vs DNC-M on key-value retrieval at A.2's sizes: ``min_length..max_length``
    words of two halves of ``width`` bits."""

    variants: list[str] = field(default_factory=lambda: ["dnc", "dnc_m"])
    width: int = 8  # W, bits per half (A.2)
    min_length: int = 2  # L (A.2)
    max_length: int = 16
    n_cells: int = 16  # A.2
    cell_width: int = 32  # A.2
    d_controller: int = 32  # A.2
    steps: int = 3000
    eval_every: int = 250

    def task(self) -> KeyValueConfig:
        return KeyValueConfig(width=self.width, length_range=(self.min_length, self.max_length))

    def report_header(self) -> tuple[str, str, str]:
        return (
            "# Masked content lookup on key-value retrieval: DNC vs DNC-M (thesis 2.3, Fig. 2.2b)",
            f"Key-value retrieval: {self.min_length}-{self.max_length} words of two {self.width}-bit halves "
            "w1 | w2; then every w1 is given and its w2 asked for (q1), then every w2 and its w1 (q2).",
            "Thesis: DNC-M's read mask selects the half it searches with and switches when the query "
            "switches from w1 to w2 (Fig. 2.2b, one example shown).",
        )


@dataclass(frozen=True)
class KeyValuePhases:
    """The steps of one key-value sequence: ``in`` is ``[0, q1_marker)``, ``q1`` ``(q1_marker, q2_marker)``,
    ``q2`` ``(q2_marker, end)``; the markers are the steps whose delimiter channel is on."""

    q1_marker: int
    q2_marker: int
    end: int


def key_value_phases(task: KeyValueConfig, sequence: MemorySequence) -> KeyValuePhases:
    """Where the phases of ``sequence`` start, read from its delimiter channels (``2W`` and ``2W + 1``)."""
    (q1_marker,) = np.flatnonzero(sequence.inputs[:, 2 * task.width])
    (q2_marker,) = np.flatnonzero(sequence.inputs[:, 2 * task.width + 1])
    return KeyValuePhases(int(q1_marker), int(q2_marker), len(sequence))


def phase_mask_means(
    read_mask: np.ndarray, sequence: MemorySequence, phases: KeyValuePhases
) -> tuple[np.ndarray, np.ndarray]:
    """The read mask ``[T, W]`` of one head averaged over the answer steps of q1 and of q2."""
    steps = np.arange(len(sequence))
    answer = sequence.loss_mask
    in_q1 = answer & (steps > phases.q1_marker) & (steps < phases.q2_marker)
    in_q2 = answer & (steps > phases.q2_marker)
    return read_mask[in_q1].mean(0), read_mask[in_q2].mean(0)


def mask_switch(q1_mask: np.ndarray, q2_mask: np.ndarray) -> float:
    """``1 - cos(q1_mask, q2_mask)``: 0 when both phases compare the same channels, 1 for disjoint ones."""
    norm = float(np.linalg.norm(q1_mask) * np.linalg.norm(q2_mask))
    return 1.0 - float(q1_mask @ q2_mask) / norm if norm > 0 else 0.0


def seed_mask_switch(
    model: DNC, task: KeyValueConfig, seed: int, n_sequences: int = SWITCH_SEQUENCES
) -> float:
    """:func:`mask_switch` of read head 0, the phase means taken over the answer steps of the seed's first
    ``n_sequences`` evaluation sequences (each sequence weighted by its length ``L``, its answer steps per
    phase)."""
    q1_means, q2_means, lengths = [], [], []
    for index in range(n_sequences):
        sequence = evaluation_sequence(task, seed, index)
        arrays = trace_sequence(model, sequence)
        if arrays.read_masks is None:
            raise ValueError("a model without masked content addressing has no read mask")
        phases = key_value_phases(task, sequence)
        q1, q2 = phase_mask_means(arrays.read_masks[:, 0], sequence, phases)
        q1_means.append(q1)
        q2_means.append(q2)
        lengths.append(phases.q2_marker - phases.q1_marker - 1)
    return mask_switch(
        np.average(q1_means, axis=0, weights=lengths), np.average(q2_means, axis=0, weights=lengths)
    )


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_phase_read_mask(arrays: MemoryTraceArrays, phases: KeyValuePhases, title: str = "") -> Figure:
    """Fig. 2.2b: the read mask of head 0 (channels on x, time on y from the bottom), the phases marked."""
    if arrays.read_masks is None:
        raise ValueError("a model without masked content addressing has no read mask")
    plt = _pyplot()
    mask = arrays.read_masks[:, 0]
    fig, ax = plt.subplots(figsize=(4.2, 0.09 * len(mask) + 1.4))
    image = ax.imshow(
        mask, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis", vmin=0, vmax=1
    )
    for marker in (phases.q1_marker, phases.q2_marker):
        ax.axhline(marker, color="white", linewidth=0.8)
    centres = {"in": phases.q1_marker / 2, "q1": (phases.q1_marker + phases.q2_marker) / 2}
    centres["q2"] = (phases.q2_marker + phases.end) / 2
    ax.set_yticks(list(centres.values()), list(centres))
    ax.set_xlabel("channel of a memory cell")
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    if title:
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return fig


def save_phase_read_mask(
    arrays: MemoryTraceArrays, phases: KeyValuePhases, path: str | Path, title: str = ""
) -> Path:
    """Write :func:`draw_phase_read_mask` to ``path`` (the format follows the suffix)."""
    path = Path(path)
    figure = draw_phase_read_mask(arrays, phases, title)
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path


def run_dnc_key_value(out_dir: str | Path, config: DNCKeyValueConfig | None = None) -> DNCReproductionResult:
    """Train every variant on every seed (:func:`run_variant_comparison`), then add the mask switch per
    seed and the Fig. 2.2b read-mask figure of every masked variant to ``report.md`` and ``results.json``."""
    config = config or DNCKeyValueConfig()
    result = run_variant_comparison(out_dir, config, "key-value retrieval", with_links=False)
    out, task = Path(out_dir), config.task()
    switches: dict[str, list[float]] = {}
    lines = ["", "## Read mask (Fig. 2.2b)", ""]
    for variant, runs in result.comparison.results.items():
        masked, _, _ = VARIANTS[variant]
        if not masked:
            continue
        seeds = zip(runs, config.seeds, strict=True)
        switches[variant] = [seed_mask_switch(run.model, task, seed) for run, seed in seeds]
        sequence = evaluation_sequence(task, config.seeds[0])
        name = f"read_mask_{variant}.png"
        save_phase_read_mask(
            trace_sequence(runs[0].model, sequence),
            key_value_phases(task, sequence),
            out / name,
            title=f"{variant}, seed {config.seeds[0]}: read mask",
        )
        values = ", ".join(f"{s:.2f}" for s in switches[variant])
        lines += [
            f"Mask switch of {variant} (1 - cosine of the mean read masks of the q1 and q2 answer steps, "
            f"{SWITCH_SEQUENCES} evaluation sequences per seed; 0: the same channels, 1: disjoint ones): "
            f"{values} (mean {np.mean(switches[variant]):.2f}).",
            "",
            f"![{name}]({name})",
            "",
        ]
    if switches:
        with result.report.open("a") as report:
            report.write("\n".join(lines))
        results = json.loads(result.results.read_text())
        results["mask_switch"] = switches
        result.results.write_text(json.dumps(results, indent=2))
    return result


DNC_KEY_VALUE = ScriptedReproduction(
    "dnc-key-value",
    "DNC vs DNC-M on key-value retrieval: the read mask switches with the query (thesis Fig. 2.2b)",
    "Csordás thesis 2.3, Fig. 2.2b",
    DNCKeyValueConfig,
    run_dnc_key_value,
    defaults=DNC_REPRODUCTION_DEFAULTS,
    quick=DNC_REPRODUCTION_QUICK,
)
