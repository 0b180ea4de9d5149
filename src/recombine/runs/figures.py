"""Figures from stored runs: learning curves of a reproduction (mean over seeds, min-max band)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from recombine.runs.store import RunDir

PANELS_PER_ROW = 5


def learning_curves(
    out: Path, manifest: dict[str, Any], split: str, path: Path, order: list[str] | None = None
) -> Path | None:
    """One panel per column (task setting): ``split`` accuracy against step, a line per variant.
    Panels follow ``order`` (the reproduction's columns; default: sorted), at most
    ``PANELS_PER_ROW`` to a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, dict[str, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for entry in manifest["runs"]:
        evals = [r for r in RunDir(out / entry["run"]).read_metrics() if r.get("kind") == "eval"]
        if evals:
            curve = {r["step"]: r["splits"][split]["accuracy"] for r in evals if split in r["splits"]}
            curves[entry["column"]][entry["variant"]].append(curve)
    if not curves:
        return None
    known = [column for column in order or [] if column in curves]
    columns = known + sorted(set(curves) - set(known))
    n_cols = min(len(columns), PANELS_PER_ROW)
    n_rows = -(-len(columns) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(5 * n_cols, 3.6 * n_rows), squeeze=False, sharey=True)
    panels = axes.ravel()
    for ax in panels[len(columns) :]:
        ax.set_visible(False)
    for ax, column in zip(panels, columns, strict=False):
        for variant, seeds in curves[column].items():
            steps = sorted(set.intersection(*(set(c) for c in seeds)))
            values = np.array([[c[s] for s in steps] for c in seeds])
            line = ax.plot(steps, values.mean(0), label=f"{variant} ({len(seeds)})")[0]
            if len(seeds) > 1:
                ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
        ax.set_title(column)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel(f"{split} accuracy")
    panels[len(columns) - 1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
