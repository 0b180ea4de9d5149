"""A reproduction: a grid of model variants x task settings x seeds, with the paper's numbers.

Each cell is an ordinary run (its own run directory under ``OUT/runs``), trained in a subprocess
so a crashing trial never takes the grid down; re-running skips completed runs and resumes
interrupted ones. ``OUT/manifest.json`` records the grid so ``recombine report OUT`` can
re-render the report from the stored runs alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recombine.runs.store import RunDir


@dataclass(frozen=True)
class Variant:
    """One table row: a model preset with overrides."""

    label: str
    model: str
    model_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PaperNumber:
    mean: float
    std: float

    def format(self) -> str:
        return f"{self.mean:.2f} ± {self.std:.2f}"


@dataclass(frozen=True)
class Reproduction:
    name: str
    description: str
    source: str
    task: str
    columns: dict[str, dict[str, Any]]  # column label -> task overrides (e.g. direction)
    variants: tuple[Variant, ...]
    train: dict[str, Any]
    quick_train: dict[str, Any]
    report_split: str
    iid_split: str
    paper: dict[tuple[str, str], PaperNumber]  # (variant label, column) -> paper's number
    success_threshold: float = 0.95
    scale_note: str = ""

    def run_name(self, variant: Variant, column: str, seed: int) -> str:
        return f"{variant.label}--{column}--seed{seed}"

    def run_config(self, variant: Variant, column: str, seed: int, quick: bool) -> dict[str, Any]:
        train = {**self.train, **(self.quick_train if quick else {}), **variant.train_overrides}
        return {
            "seed": seed,
            "task": {"name": self.task, **self.columns[column]},
            "model": {"name": variant.model, **variant.model_overrides},
            "train": train,
        }

    def cells(self, seeds: int) -> list[tuple[Variant, str, int]]:
        return [(v, c, s) for v in self.variants for c in self.columns for s in range(1, seeds + 1)]


def _flatten(config: dict[str, Any]) -> list[str]:
    overrides = [f"seed={config['seed']}"]
    for section in ("task", "model", "train"):
        for key, value in config[section].items():
            text = json.dumps(value) if not isinstance(value, str) else value
            overrides.append(f"{section}.{key}={text}")
    return overrides


def run_grid(
    reproduction: Reproduction,
    out: Path,
    seeds: int,
    quick: bool,
    jobs: int = 1,
    on_event: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Train every cell not yet complete; return the manifest entries."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for variant, column, seed in reproduction.cells(seeds):
        name = reproduction.run_name(variant, column, seed)
        entries.append(
            {
                "variant": variant.label,
                "column": column,
                "seed": seed,
                "run": f"runs/{name}",
                "config": reproduction.run_config(variant, column, seed, quick),
            }
        )
    manifest = {"reproduction": reproduction.name, "quick": quick, "seeds": seeds, "runs": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))

    threads = 1 if jobs > 1 else 0
    todo = [e for e in entries if not RunDir(out / e["run"]).is_complete()]
    on_event(f"{len(entries) - len(todo)} of {len(entries)} runs already complete; training {len(todo)}")

    def train_one(entry: dict[str, Any]) -> None:
        run_path = out / entry["run"]
        resume = (run_path / "config.yaml").exists()
        command = [sys.executable, "-m", "recombine", "train", "--no-progress", "--run-dir", str(run_path)]
        command += ["--resume", str(run_path)] if resume else _flatten(entry["config"])
        if threads and not resume:
            command.append(f"train.threads={threads}")
        run_path.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with (run_path / "train.log").open("a") as log:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
        status = "done" if code == 0 else f"FAILED (exit {code}, see {run_path / 'train.log'})"
        on_event(f"{entry['run']}: {status} in {time.perf_counter() - started:.0f} s")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(train_one, todo))
    return entries
