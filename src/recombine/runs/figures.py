"""Figures from stored runs: learning curves of a reproduction (mean over seeds, min-max band)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from recombine.runs.store import RunDir


def learning_curves(out: Path, manifest: dict[str, Any], split: str, path: Path) -> Path | None:
    """One panel per column (task setting): ``split`` accuracy against step, a line per variant."""
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
    columns = sorted(curves)
    fig, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns), 3.6), squeeze=False, sharey=True)
    for ax, column in zip(axes[0], columns, strict=True):
        for variant, seeds in curves[column].items():
            steps = sorted(set.intersection(*(set(c) for c in seeds)))
            values = np.array([[c[s] for s in steps] for c in seeds])
            line = ax.plot(steps, values.mean(0), label=f"{variant} ({len(seeds)})")[0]
            if len(seeds) > 1:
                ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
        ax.set_title(column)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{split} accuracy")
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
