"""A sweep directory written by hand in the run store's format, for report tests: three finished
seeds of row A (test_ood :data:`OOD`, valid_iid :data:`IID`, wall time 10 s x seed) and one trial of
row B killed by SIGKILL, under the recipe :data:`RECIPE` (success threshold 0.95, paper A = 0.9 ± 0.05).

:func:`expected_cells` gives the report table's cells computed by hand from these numbers (sample
std over seeds, seeds at or above the threshold), independently of :mod:`recombine.runs.aggregate`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

OOD = [1.0, 0.96, 0.5]  # test_ood of seeds 1..3
IID = [1.0, 1.0, 0.9]
RECIPE = {
    "name": "toy",
    "description": "a hand-written grid",
    "source": "nowhere",
    "task": "ctl",
    "columns": {"c": {}},
    "variants": [{"label": "A", "model": {"name": "ndr"}}, {"label": "B", "model": {"name": "lstm"}}],
    "success_threshold": 0.95,
    "paper": {"A": {"c": {"mean": 0.9, "std": 0.05}}},
}


def write_toy_sweep(root: Path) -> Path:
    """Write the grid into ``root`` (created) and return it."""
    entries = []
    for seed, (ood, iid) in enumerate(zip(OOD, IID, strict=True), start=1):
        run = root / "runs" / f"A--c--seed{seed}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed}))
        evals = [
            {"kind": "eval", "step": s, "splits": {"test_ood": {"accuracy": ood * s / 20}}} for s in (10, 20)
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
        result = {
            "status": "completed",
            "steps": 20,
            "best_step": 20,
            "wall_time_s": 10.0 * seed,
            "selected": {"test_ood": ood, "valid_iid": iid},
        }
        (run / "result.json").write_text(json.dumps(result))
        entries.append({"variant": "A", "column": "c", "seed": seed, "run": f"runs/A--c--seed{seed}"})
    failed = root / "runs" / "B--c--seed1"
    failed.mkdir(parents=True)
    (failed / "failure.json").write_text(json.dumps({"reason": "killed by SIGKILL"}))
    entries.append({"variant": "B", "column": "c", "seed": 1, "run": "runs/B--c--seed1"})
    manifest = {"reproduction": "toy", "quick": False, "seeds": 3, "runs": entries, "recipe": RECIPE}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def expected_cells() -> dict[str, list[str]]:
    """The report table by hand: header and one row per variant (model, ours, paper, IID, s / run)."""
    mean, std = _mean_std(OOD)
    iid_mean, iid_std = _mean_std(IID)
    ours = f"{mean:.2f} ± {std:.2f} (2/3)"  # 1.0 and 0.96 reach the 0.95 threshold, 0.5 does not
    iid = f"{iid_mean:.2f} ± {iid_std:.2f} (2/3)"
    return {
        "header": ["model", "c test_ood (ours)", "c (paper)", "c valid_iid (ours)", "s / run"],
        "A": ["A", ours, "0.90 ± 0.05", iid, "20"],  # 20 s: mean of 10, 20, 30
        "B": ["B", "failed (1)", "–", "–", "–"],
    }
