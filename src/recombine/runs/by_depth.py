"""Grid reproductions on tasks with a difficulty per example: accuracy by depth (or length), per split.

Thesis ch.5 asks how far beyond its training depths a model keeps working: CTL trains on 1-5 functions
and tests on 9-10 (Tab. 5.1), ListOps trains on dependency depths 1-5 and tests on 7-8 (Tab. 5.4). A
split's one accuracy hides *where* a model breaks; every run of the supervised trainer therefore
records, for its selected checkpoint, the accuracy per task-defined group (``selected_per_depth`` in
``result.json``: CTL's number of functions, ListOps's dependency depth, the arithmetic depth; -1 marks
examples where the group means nothing, and is left out here).

A :class:`~recombine.experiments.reproduction.Reproduction` with ``depth_axis=LABEL`` (what the
group is, e.g. ``"dependency depth"``) keeps each run's record in its cell (``per_depth``, aligned with
the cell's ``runs``; None for a run that has none) and gets, below its table, per column:

* a Markdown table: one row per model, one column per (depth, split) point, the mean accuracy over
  the seeds that recorded it (``(n=K)`` where that is fewer than the cell's runs);
* ``depths.png``: one panel per column, the mean ± std over seeds against depth, one colour per model
  and one line style per split, the same in every panel.

Points are ordered for reading left to right: splits by their smallest depth, depths ascending within
a split, so disjoint splits (CTL, ListOps) read as one depth axis and overlapping ones (CTL++'s
``test_iid`` and ``test_ood`` over the same lengths) stay apart. The depths of the selection split
(``valid_ood``) are not held out: each run's checkpoint was chosen on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recombine.experiments.reproduction import Reproduction
from recombine.runs.aggregate import SeedSummary

Point = tuple[str, str]  # (split, depth as recorded: a decimal string)
MEANINGLESS = "-1"  # ClassificationSplit.depth / Seq2SeqSplit.group where the group means nothing


def _records(cell: dict[str, Any]) -> list[dict[str, dict[str, float]]]:
    """The cell's per-run records that exist (split -> depth -> accuracy)."""
    return [record for record in cell.get("per_depth", []) if record]


def depth_points(cells: list[dict[str, Any]]) -> list[Point]:
    """Every (split, depth) with an accuracy in any run of ``cells`` (results.json table entries), in
    reading order (see the module docstring)."""
    depths: dict[str, set[str]] = {}
    for cell in cells:
        for record in _records(cell):
            for split, by_depth in record.items():
                found = {depth for depth in by_depth if depth != MEANINGLESS}
                if found:
                    depths.setdefault(split, set()).update(found)
    splits = sorted(depths, key=lambda split: min(int(d) for d in depths[split]))  # stable: ties keep order
    return [(split, depth) for split in splits for depth in sorted(depths[split], key=int)]


def point_values(cell: dict[str, Any], point: Point) -> list[float]:
    """The accuracies at ``point`` of the cell's runs that recorded it, in run order."""
    split, depth = point
    return [record[split][depth] for record in _records(cell) if depth in record.get(split, {})]


def _cells(results: dict[str, Any], reproduction: Reproduction, column: str) -> dict[str, dict[str, Any]]:
    """Row label -> the column's table entry, for rows with per-depth records, in row order."""
    table = results["table"]
    return {
        variant.label: table[variant.label][column]
        for variant in reproduction.variants
        if _records(table[variant.label][column])
    }


def _summary(values: list[float], reproduction: Reproduction) -> SeedSummary:
    return SeedSummary.of(values, reproduction.success_threshold)


def depth_tables(results: dict[str, Any], reproduction: Reproduction) -> list[str]:
    """Markdown lines: per column with per-depth records, a heading line and its table, and a line
    naming the rows with finished runs but no records. ``results`` is
    :func:`recombine.runs.report.collect`'s."""
    axis = reproduction.depth_axis or "depth"
    lines: list[str] = []
    for column in reproduction.columns:
        cells = _cells(results, reproduction, column)
        if not cells:
            continue
        points = depth_points(list(cells.values()))
        lines += [
            "",
            f"**Accuracy by {axis}, {column}** (mean over seeds at each run's selected checkpoint; "
            f"a column is one {axis} of one split; the selection split's are not held out)",
            "",
        ]
        lines.append("| model | " + " | ".join(f"{depth} {split}" for split, depth in points) + " |")
        lines.append("|" + "---|" * (len(points) + 1))
        for label, cell in cells.items():
            texts = []
            for point in points:
                values = point_values(cell, point)
                text = f"{_summary(values, reproduction).mean:.2f}" if values else "–"
                texts.append(
                    text + (f" (n={len(values)})" if values and len(values) < len(cell["runs"]) else "")
                )
            lines.append(f"| {label} | " + " | ".join(texts) + " |")
        unrecorded = [
            variant.label
            for variant in reproduction.variants
            if variant.label not in cells and results["table"][variant.label][column].get("runs")
        ]
        if unrecorded:
            lines += ["", f"Rows whose runs recorded no per-{axis} accuracy: " + ", ".join(unrecorded)]
    return lines


LINE_STYLES = ("-", "--", ":", "-.")


def depth_figure(results: dict[str, Any], reproduction: Reproduction, path: Path) -> Path | None:
    """Write ``path`` (PNG), one panel per column with per-depth records; None when there is none."""
    panels = {column: _cells(results, reproduction, column) for column in reproduction.columns}
    panels = {column: cells for column, cells in panels.items() if cells}
    if not panels:
        return None

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    labels = [variant.label for variant in reproduction.variants]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {label: colours[i % len(colours)] for i, label in enumerate(labels)}  # same in every panel
    offset = {
        label: 0.12 * (i - (len(labels) - 1) / 2) / max(len(labels) - 1, 1) for i, label in enumerate(labels)
    }
    all_splits = list(
        dict.fromkeys(split for cells in panels.values() for split, _ in depth_points(list(cells.values())))
    )
    style = {split: LINE_STYLES[i % len(LINE_STYLES)] for i, split in enumerate(all_splits)}

    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (column, cells) in zip(axes[0], panels.items(), strict=True):
        points = depth_points(list(cells.values()))
        splits = list(dict.fromkeys(split for split, _ in points))
        for label, cell in cells.items():
            for split in splits:
                series = [
                    (int(depth), _summary(values, reproduction))
                    for s, depth in points
                    if s == split and (values := point_values(cell, (s, depth)))
                ]
                if series:
                    ax.errorbar(
                        [depth + offset[label] for depth, _ in series],  # rows side by side, not on top
                        [summary.mean for _, summary in series],
                        yerr=[summary.std for _, summary in series],
                        color=colour[label],
                        linestyle=style[split],
                        marker="o",
                        markersize=4,
                        capsize=2,
                    )
        rows = [Line2D([], [], color=colour[label], marker="o") for label in cells]
        styles = [Line2D([], [], color="gray", linestyle=style[split]) for split in splits]
        ax.legend(rows + styles, [*cells, *splits], fontsize=7, loc="best")
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
