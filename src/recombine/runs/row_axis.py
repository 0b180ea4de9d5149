"""Grid reproductions whose rows sweep one model setting: accuracy against that setting.

Thesis Tab. 5.2 is an ablation over one number, the NDR's layer count: its rows ``L4`` ... ``L14`` are
one model with only ``n_layers`` changed, and the claim is a threshold along that axis (about 12
steps for a 10-operation problem). A :class:`~recombine.experiments.reproduction.Reproduction` with
``row_axis=KEY`` (every variant's model overrides set ``KEY`` to a number) gets, beside its table,
``rows.png``: per column, the ``report_split`` accuracy of each seed (dots) and its mean ± std (line,
error bars) against ``KEY``, with the paper's mean ± std dashed where it gives one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recombine.experiments.reproduction import Reproduction


def axis_values(reproduction: Reproduction) -> dict[str, float]:
    """Row label -> its value of the reproduction's ``row_axis`` model key."""
    if reproduction.row_axis is None:
        raise ValueError(f"{reproduction.name} has no row axis")
    return {v.label: float(v.model_overrides[reproduction.row_axis]) for v in reproduction.variants}


def along_axis(
    results: dict[str, Any], reproduction: Reproduction, column: str, which: str
) -> list[tuple[float, dict[str, Any]]]:
    """(axis value, summary) of one column in ascending axis order, for the rows that have one:
    ``which`` "ood" reads our seed summaries (``mean``, ``std``, ``values``), "paper" the paper's
    numbers."""
    values = axis_values(reproduction)
    points = [(values[label], results["table"][label][column].get(which)) for label in values]
    return sorted(((x, summary) for x, summary in points if summary), key=lambda point: point[0])


def row_axis_figure(results: dict[str, Any], reproduction: Reproduction, path: Path) -> Path | None:
    """Write ``path`` (PNG), one panel per column with results; None when no cell has a result.
    ``results`` is :func:`recombine.runs.report.collect`'s."""
    panels = [column for column in reproduction.columns if along_axis(results, reproduction, column, "ood")]
    if not panels:
        return None

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False, sharey=True)
    for ax, column in zip(axes[0], panels, strict=True):
        ours = along_axis(results, reproduction, column, "ood")
        for x, summary in ours:
            ax.scatter([x] * len(summary["values"]), summary["values"], s=12, color="tab:blue", alpha=0.45)
        ax.errorbar(
            [x for x, _ in ours],
            [summary["mean"] for _, summary in ours],
            yerr=[summary["std"] for _, summary in ours],
            color="tab:blue",
            marker="o",
            capsize=3,
            label="ours (mean ± std; dots: seeds)",
        )
        paper = along_axis(results, reproduction, column, "paper")
        if paper:
            ax.errorbar(
                [x for x, _ in paper],
                [number["mean"] for _, number in paper],
                yerr=[number["std"] for _, number in paper],
                color="tab:orange",
                marker="s",
                linestyle="--",
                capsize=3,
                label="paper",
            )
        ax.set_xticks(sorted(axis_values(reproduction).values()))
        ax.set_xlabel(reproduction.row_axis or "")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{column}: {reproduction.report_split}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
