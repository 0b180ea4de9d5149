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
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recombine.errors import UserError, choices_hint
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
    quick_variants: tuple[str, ...] = ()  # labels run by --quick (all when empty)

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

    def select_variants(self, labels: list[str] | None, quick: bool) -> tuple[Variant, ...]:
        """The variants to run: ``labels`` if given, else the quick subset in quick mode, else all."""
        known = [v.label for v in self.variants]
        if labels:
            for label in labels:
                if label not in known:
                    raise UserError(
                        f"unknown model label {label!r} for {self.name}; {choices_hint(label, known)}"
                    )
            return tuple(v for v in self.variants if v.label in labels)
        if quick and self.quick_variants:
            return tuple(v for v in self.variants if v.label in self.quick_variants)
        return self.variants

    def cells(
        self, seeds: int, variants: tuple[Variant, ...] | None = None
    ) -> list[tuple[Variant, str, int]]:
        chosen = self.variants if variants is None else variants
        return [(v, c, s) for v in chosen for c in self.columns for s in range(1, seeds + 1)]


def _flatten(config: dict[str, Any]) -> list[str]:
    overrides = [f"seed={config['seed']}"]
    for section in ("task", "model", "train"):
        for key, value in config[section].items():
            text = json.dumps(value) if not isinstance(value, str) else value
            overrides.append(f"{section}.{key}={text}")
    return overrides


def _merged_manifest(
    path: Path, name: str, quick: bool, seeds: int, entries: list[dict[str, Any]]
) -> dict[str, Any]:
    """This grid's entries added to those already recorded in ``path`` (runs of other rows or seeds
    in the same directory stay in the report)."""
    runs: dict[str, dict[str, Any]] = {}
    if path.is_file():
        previous = json.loads(path.read_text())
        if previous["reproduction"] != name:
            raise UserError(f"{path.parent} holds reproduction {previous['reproduction']!r}, not {name!r}")
        if previous["quick"] != quick:
            mode = "--quick" if previous["quick"] else "full-scale"
            raise UserError(f"{path.parent} holds {mode} runs; use another --out to mix scales")
        runs = {entry["run"]: entry for entry in previous["runs"]}
        seeds = max(seeds, previous["seeds"])
    runs.update({entry["run"]: entry for entry in entries})
    return {"reproduction": name, "quick": quick, "seeds": seeds, "runs": list(runs.values())}


def _steps_done(run_path: Path) -> int:
    result = RunDir(run_path).read_result()
    return result["steps"] if result is not None and result.get("status") == "completed" else -1


def run_grid(
    reproduction: Reproduction,
    out: Path,
    seeds: int,
    quick: bool,
    jobs: int = 1,
    labels: list[str] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Train every cell not yet complete; return the manifest entries."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    variants = reproduction.select_variants(labels, quick)
    for variant, column, seed in reproduction.cells(seeds, variants):
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
    manifest = _merged_manifest(out / "manifest.json", reproduction.name, quick, seeds, entries)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))

    threads = 1 if jobs > 1 else 0
    todo = [e for e in entries if _steps_done(out / e["run"]) < e["config"]["train"]["steps"]]
    on_event(f"{len(entries) - len(todo)} of {len(entries)} runs already complete; training {len(todo)}")

    finished = [0]
    lock = threading.Lock()

    def train_one(entry: dict[str, Any]) -> None:
        run_path = out / entry["run"]
        resume = (run_path / "config.yaml").exists()
        command = [sys.executable, "-m", "recombine", "train", "--no-progress", "--run-dir", str(run_path)]
        command += ["--resume", str(run_path)] if resume else _flatten(entry["config"])
        if resume:  # continue an interrupted run, or extend a finished one to the requested steps
            command.append(f"train.steps={entry['config']['train']['steps']}")
        if threads and not resume:
            command.append(f"train.threads={threads}")
        run_path.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with (run_path / "train.log").open("a") as log:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
        status = "done" if code == 0 else f"FAILED (exit {code}, see {run_path / 'train.log'})"
        with lock:
            finished[0] += 1
            progress = f"[{finished[0]}/{len(todo)}]"
        on_event(f"{progress} {entry['run']}: {status} in {time.perf_counter() - started:.0f} s")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(train_one, todo))
    return entries
