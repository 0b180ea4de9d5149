"""Concept-space views of a full-batch learning-dynamics trace (SIM seed, Figs. 2 and 5; CATALOG §1.14).

Numbers:

- :func:`concept_learning_times`: when the output at a probe first reaches (or, ``settled``, reaches
  for good) a fraction of its target on each concept axis ("concept signal determines the order of
  concept learning").
- :func:`largest_rebound`: how far a curve climbs back above its running minimum; 0 for a
  non-increasing curve, > 0 for a non-monotonic probe loss ("transient memorization").
- :func:`output_speed`: ``||d f(p) / dt||`` between records, whose decay shows the terminal slow-down.

Figures (matplotlib, Agg backend), one axes each, and :func:`save_dynamics_figure` with all four:
the probe-output trajectories in a concept plane (the "swing-by": first toward the training clusters,
then to the probe), the probe losses on log-log axes, the learning order against ``mu_p``, and the
output speed at the test probe on log-log axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recombine.errors import UserError
from recombine.train.full_batch_dynamics import DynamicsTrace

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def first_record_staying(holds: np.ndarray) -> int | None:
    """The first index from which the boolean series ``holds`` is true up to its last entry; ``None`` if
    its last entry is false."""
    false = np.flatnonzero(~np.asarray(holds, dtype=bool))
    first = 0 if not len(false) else int(false[-1]) + 1
    return first if first < len(holds) else None


def concept_learning_times(
    trace: DynamicsTrace, probe: int, n_concepts: int, fraction: float = 0.5, settled: bool = False
) -> np.ndarray:
    """``[n_concepts]``: the first recorded time at which ``f(probe)_p >= fraction * target_p``.

    With ``settled=True``, the first recorded time from which it *stays* there up to the last record:
    a noisy readout (samples of a generative model read by a classifier) can cross the threshold early
    and fall back, and the first crossing then says little about when the concept was learnt.
    Only concepts with a positive target at the probe are timed (``nan`` for the others and for
    concepts never reached, or with ``settled`` not there at the last record)."""
    if not 0.0 < fraction <= 1.0:
        raise UserError(f"fraction must be in (0, 1], got {fraction}")
    times = np.full(n_concepts, np.nan)
    for p in range(n_concepts):
        target = trace.probe_targets[probe, p]
        if target <= 0:
            continue
        above = trace.probe_outputs[:, probe, p] >= fraction * target
        if settled:
            first = first_record_staying(above)
            if first is not None:
                times[p] = trace.times[first]
        elif above.any():
            times[p] = trace.times[np.argmax(above)]
    return times


def largest_rebound(values: np.ndarray) -> float:
    """``max_t (v_t - min_{s <= t} v_s)``: 0 exactly when ``values`` never increases."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.max(values - np.minimum.accumulate(values)))


def output_speed(trace: DynamicsTrace, probe: int) -> tuple[np.ndarray, np.ndarray]:
    """Midpoint times and ``||f_{k+1}(p) - f_k(p)|| / (t_{k+1} - t_k)`` between consecutive records."""
    outputs = trace.probe_outputs[:, probe]
    speed = np.linalg.norm(np.diff(outputs, axis=0), axis=1) / np.diff(trace.times)
    return 0.5 * (trace.times[1:] + trace.times[:-1]), speed


def plot_trajectories(
    ax: Axes,
    trace: DynamicsTrace,
    concept_axes: tuple[int, int] = (0, 1),
    probes: Sequence[int] | None = None,
    highlight: int | None = None,
) -> None:
    """Probe outputs over training in the plane of two concepts, coloured by log time.

    ``probes`` defaults to every probe; ``highlight`` (the test probe) is drawn with a thick red path."""
    import matplotlib.pyplot as plt

    a, b = concept_axes
    colours = plt.get_cmap("viridis")(np.linspace(0, 1, len(trace.times)))
    for j in range(len(trace.probe_names)) if probes is None else probes:
        path = trace.probe_outputs[:, j][:, [a, b]]
        line = ("tab:red", 1.8) if j == highlight else ("0.6", 0.8)
        ax.plot(path[:, 0], path[:, 1], color=line[0], lw=line[1], zorder=1)
        ax.scatter(path[:, 0], path[:, 1], c=colours, s=8, zorder=2)
        target = trace.probe_targets[j][[a, b]]
        ax.scatter(*target, marker="*", s=120, color="tab:red", edgecolor="k", zorder=3)
        ax.annotate(trace.probe_names[j], target, textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(f"output, concept {a}")
    ax.set_ylabel(f"output, concept {b}")
    ax.set_title("probe outputs (dark = early, star = target, red = test probe)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(alpha=0.3)


def plot_probe_losses(ax: Axes, trace: DynamicsTrace, highlight: int | None = None) -> None:
    """Training loss and every probe's loss against gradient-flow time, log-log."""
    t = np.maximum(trace.times, trace.times[1] / 2)  # t = 0 placed half a record before the first step
    ax.plot(t, trace.train_loss, color="k", lw=2, label="train")
    for j, name in enumerate(trace.probe_names):
        ax.plot(t, trace.probe_loss[:, j], lw=2.5 if j == highlight else 1, label=f"probe {name}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time (steps x lr)")
    ax.set_ylabel("loss  (1/2)||f(x) - x||^2")
    ax.set_title("train and probe losses")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def plot_learning_order(
    ax: Axes, times: np.ndarray, mu: Sequence[float], fraction: float, settled: bool = False
) -> None:
    """Time to reach ``fraction`` of the target on each concept (``settled``: for good), against the
    concept's signal ``mu_p``."""
    ax.plot(mu, times, "o-")
    for p, (m, t) in enumerate(zip(mu, times, strict=True)):
        ax.annotate(f"concept {p}", (m, t), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("signal mu_p")
    ax.set_ylabel(f"time to {fraction:.0%} of target" + (" for good" if settled else ""))
    ax.set_title("learning order")
    ax.grid(alpha=0.3)


def plot_terminal_slowdown(ax: Axes, trace: DynamicsTrace, probe: int) -> None:
    """``||d f(probe) / dt||`` against time, log-log."""
    t, speed = output_speed(trace, probe)
    keep = speed > 0
    ax.plot(t[keep], speed[keep])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time (steps x lr)")
    ax.set_ylabel(f"output speed at probe {trace.probe_names[probe]}")
    ax.set_title("terminal slow-down")
    ax.grid(alpha=0.3)


def save_dynamics_figure(
    trace: DynamicsTrace,
    mu: Sequence[float],
    path: str | Path,
    test_probe: int,
    concept_axes: tuple[int, int] = (0, 1),
    fraction: float = 0.5,
    title: str = "",
    settled: bool = False,
) -> Path:
    """The four panels in one PNG: trajectories, losses, learning order, slow-down.

    The trajectory panel shows the test probe and the probes inside the plane of ``concept_axes``; the
    learning order uses :func:`concept_learning_times` with ``fraction`` and ``settled``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 2, figsize=(11, 9))
    others = np.delete(trace.probe_targets, list(concept_axes), axis=1)
    in_plane = [j for j in range(len(others)) if not others[j].any() and j != test_probe]
    plot_trajectories(axes[0, 0], trace, concept_axes, [*in_plane, test_probe], highlight=test_probe)
    plot_probe_losses(axes[0, 1], trace, highlight=test_probe)
    times = concept_learning_times(trace, test_probe, len(mu), fraction, settled)
    plot_learning_order(axes[1, 0], times, mu, fraction, settled)
    plot_terminal_slowdown(axes[1, 1], trace, test_probe)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
