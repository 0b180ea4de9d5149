"""Grid reproductions whose columns span two task parameters: matrix tables and heat maps.

Thesis Fig. 6.4 (and Figs. E.3, E.4) shows the OOD test accuracy of one model on CTL++ variant 'S' as a
heat map over the number of shared functions |G_o| (y) and of shared symbols per G_o function (x). A
:class:`~recombine.experiments.reproduction.Reproduction` with ``heatmap=(y, x)`` has one column per
(y, x) point (each column's task overrides set both keys); its report (:mod:`recombine.runs.report`)
then shows, per row, a matrix over the two keys instead of one wide table, and ``heatmap.png``: one
panel per row, the mean accuracy over seeds in each cell, with the number of successful seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from recombine.experiments.reproduction import Reproduction
from recombine.runs.unfinished import with_failed_and_interrupted_counts

MISSING = "–"


def _ordered(values: list[Any]) -> list[Any]:
    """Distinct values in ascending order (numbers numerically, anything else as text)."""
    distinct = list(dict.fromkeys(values))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in distinct):
        return sorted(distinct)
    return sorted(distinct, key=str)


def grid(reproduction: Reproduction) -> tuple[list[Any], list[Any], dict[tuple[Any, Any], str]]:
    """(y values, x values, (y, x) -> column label) of a heat-map reproduction."""
    if reproduction.heatmap is None:
        raise ValueError(f"{reproduction.name} has no heatmap axes")
    y_key, x_key = reproduction.heatmap
    points = {
        (overrides[y_key], overrides[x_key]): column for column, overrides in reproduction.columns.items()
    }
    return _ordered([y for y, _ in points]), _ordered([x for _, x in points]), points


def matrix_tables(
    results: dict[str, Any],
    reproduction: Reproduction,
    labels: list[str],
    fmt: Callable[[dict[str, Any] | None], str],
    paper_fmt: Callable[[dict[str, float] | None], str],
) -> list[str]:
    """Markdown lines, each table after a blank line: per row label, the report split and the IID
    split as matrices (y down, x across) with cells formatted by ``fmt`` (the report's
    ``mean ± std (successes/seeds)``), and the paper's matrix (``paper_fmt``) where the reproduction
    has paper numbers for that row. ``results`` is :func:`recombine.runs.report.collect`'s."""
    ys, xs, points = grid(reproduction)
    y_key, x_key = reproduction.heatmap or ("", "")
    lines: list[str] = []

    def table(title: str, cell: Callable[[str], str]) -> None:
        lines.extend(["", f"**{title}** (rows: {y_key}, columns: {x_key})", ""])
        lines.append("| " + " | ".join([f"{y_key} \\ {x_key}", *map(str, xs)]) + " |")
        lines.append("|" + "---|" * (len(xs) + 1))
        for y in ys:
            row = [cell(points[(y, x)]) if (y, x) in points else MISSING for x in xs]
            lines.append("| " + " | ".join([str(y), *row]) + " |")

    for label in labels:
        cells = results["table"][label]

        def summary(column: str, key: str, cells: dict[str, Any] = cells) -> str:
            return with_failed_and_interrupted_counts(fmt(cells[column].get(key)), cells[column])

        table(f"{label}: {reproduction.report_split}", lambda c, s=summary: s(c, "ood"))
        table(f"{label}: {reproduction.iid_split}", lambda c, s=summary: s(c, "iid"))
        if any(cells[c]["paper"] for c in points.values()):
            table(f"{label}: paper", lambda c, cells=cells: paper_fmt(cells[c]["paper"]))
    return lines


def heatmap_figure(
    results: dict[str, Any], reproduction: Reproduction, labels: list[str], path: Path
) -> Path | None:
    """Write ``path`` (PNG): one panel per row label with results, the mean ``report_split``
    accuracy over seeds per (y, x) cell, annotated with the mean and the successful seeds; None when
    no cell has a result."""
    ys, xs, points = grid(reproduction)
    panels = []
    for label in labels:
        means = np.full((len(ys), len(xs)), np.nan)
        notes = [["" for _ in xs] for _ in ys]
        for i, y in enumerate(ys):
            for j, x in enumerate(xs):
                summary = results["table"][label][points[(y, x)]].get("ood") if (y, x) in points else None
                if summary:
                    means[i, j] = summary["mean"]
                    hits = round(summary["success_rate"] * summary["n"])
                    notes[i][j] = f"{summary['mean']:.2f}\n{hits}/{summary['n']}"
        if not np.isnan(means).all():
            panels.append((label, means, notes))
    if not panels:
        return None

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y_key, x_key = reproduction.heatmap or ("", "")
    width = 1.0 + 0.9 * len(xs)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width * len(panels) + 1.2, 0.8 * len(ys) + 1.6), squeeze=False
    )
    image = None
    for ax, (label, means, notes) in zip(axes[0], panels, strict=True):
        image = ax.imshow(means, origin="upper", cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        for i in range(len(ys)):
            for j in range(len(xs)):
                if notes[i][j]:
                    color = "black" if means[i, j] > 0.6 else "white"
                    ax.text(j, i, notes[i][j], ha="center", va="center", fontsize=7, color=color)
        ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        ax.set_yticks(range(len(ys)), [str(y) for y in ys])
        ax.set_xlabel(x_key)
        ax.set_ylabel(y_key)
        ax.set_title(f"{label}: {reproduction.report_split}", fontsize=10)
    assert image is not None
    fig.colorbar(image, ax=list(axes[0]), fraction=0.04, pad=0.02, label="accuracy (mean over seeds)")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
