"""Grid reproductions on tasks with a difficulty per example: accuracy by depth (or length), per split.

Thesis ch.5 asks how far beyond its training depths a model keeps working: CTL trains on 1-5 functions
and tests on 9-10 (Tab. 5.1), ListOps trains on dependency depths 1-5 and tests on 7-8 (Tab. 5.4). A
split's one accuracy hides *where* a model breaks; every classification run therefore records, for
its selected checkpoint, the accuracy per task-defined group (``selected_per_depth`` in
``result.json``: CTL's number of functions, ListOps's dependency depth, the arithmetic depth).

A :class:`~recombine.experiments.reproduction.Reproduction` with ``depth_axis=LABEL`` (what the
group is, e.g. ``"dependency depth"``) gets, below its table, per column:

* a Markdown table: one row per model, one column per (depth, split) point, the mean accuracy over
  seeds;
* ``depths.png``: one panel per column, the mean ± std over seeds against depth, one colour per model
  and one line style per split.

Points are ordered for reading left to right: splits by their smallest depth, depths ascending within
a split, so disjoint splits (CTL, ListOps) read as one depth axis and overlapping ones (CTL++'s
``test_iid`` and ``test_ood`` over the same lengths) stay apart.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from statistics import fmean
from typing import Any

from recombine.experiments.reproduction import Reproduction

Point = tuple[str, str]  # (split, depth as recorded: a decimal string)


def depth_points(cells: list[dict[str, Any]]) -> list[Point]:
    """Every (split, depth) with an accuracy in any of ``cells`` (results.json table entries), in
    reading order (see the module docstring)."""
    depths: dict[str, set[str]] = {}
    for cell in cells:
        for split, by_depth in cell.get("per_depth", {}).items():
            depths.setdefault(split, set()).update(by_depth)
    splits = sorted(depths, key=lambda split: min(int(d) for d in depths[split]))  # stable: ties keep order
    return [(split, depth) for split in splits for depth in sorted(depths[split], key=int)]


def _values(cell: dict[str, Any], point: Point) -> list[float]:
    split, depth = point
    return list(cell.get("per_depth", {}).get(split, {}).get(depth, []))


def _std(values: list[float]) -> float:
    """Sample std over seeds, as in the report's cells (:class:`recombine.runs.aggregate.SeedSummary`)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _cells(results: dict[str, Any], reproduction: Reproduction, column: str) -> dict[str, dict[str, Any]]:
    """Row label -> the column's table entry, for rows with per-depth accuracies, in row order."""
    table = results["table"]
    return {
        variant.label: table[variant.label][column]
        for variant in reproduction.variants
        if table[variant.label][column].get("per_depth")
    }


def depth_tables(results: dict[str, Any], reproduction: Reproduction) -> list[str]:
    """Markdown lines: per column with per-depth accuracies, a heading line and its table.
    ``results`` is :func:`recombine.runs.report.collect`'s."""
    axis = reproduction.depth_axis or "depth"
    lines: list[str] = []
    for column in reproduction.columns:
        cells = _cells(results, reproduction, column)
        if not cells:
            continue
        points = depth_points(list(cells.values()))
        lines += ["", f"**Accuracy by {axis}, {column}** (mean over seeds; the split under each {axis})", ""]
        lines.append("| model | " + " | ".join(f"{depth} {split}" for split, depth in points) + " |")
        lines.append("|" + "---|" * (len(points) + 1))
        for label, cell in cells.items():
            texts = [f"{fmean(v):.2f}" if (v := _values(cell, point)) else "–" for point in points]
            lines.append(f"| {label} | " + " | ".join(texts) + " |")
    return lines


LINE_STYLES = ("-", "--", ":", "-.")


def depth_figure(results: dict[str, Any], reproduction: Reproduction, path: Path) -> Path | None:
    """Write ``path`` (PNG), one panel per column with per-depth accuracies; None when there is none."""
    panels = [column for column in reproduction.columns if _cells(results, reproduction, column)]
    if not panels:
        return None

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.6), squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, column in zip(axes[0], panels, strict=True):
        cells = _cells(results, reproduction, column)
        points = depth_points(list(cells.values()))
        splits = list(dict.fromkeys(split for split, _ in points))
        style = {split: LINE_STYLES[i % len(LINE_STYLES)] for i, split in enumerate(splits)}
        for index, cell in enumerate(cells.values()):
            colour = colours[index % len(colours)]
            for split in splits:
                series = [(int(d), v) for s, d in points if s == split and (v := _values(cell, (s, d)))]
                if not series:
                    continue
                ax.errorbar(
                    [depth for depth, _ in series],
                    [fmean(values) for _, values in series],
                    yerr=[_std(values) for _, values in series],
                    color=colour,
                    linestyle=style[split],
                    marker="o",
                    markersize=4,
                    capsize=2,
                )
        rows = [Line2D([], [], color=colours[i % len(colours)], marker="o") for i in range(len(cells))]
        styles = [Line2D([], [], color="gray", linestyle=style[split]) for split in splits]
        ax.legend(rows + styles, [*cells, *splits], fontsize=7, loc="lower left")
        ax.set_xticks(sorted({int(depth) for _, depth in points}))
        ax.set_xlabel(reproduction.depth_axis or "depth")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(column, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy (mean ± std over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
