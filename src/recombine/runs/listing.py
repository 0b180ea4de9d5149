"""``recombine runs``: find the runs under a directory, filter them, and summarise each in a line.

A run is a directory holding a ``config.yaml`` (written by ``recombine train``) or a sweep's
``failure.json`` (a trial rejected before training; its record keeps the config). Filters: task,
model, status (:data:`recombine.runs.trial_record.STATUSES`) and ``key=value`` on any config field
by dotted path (``model.d_model=64``, ``train.lr=0.001``, ``seed=2``; values compared after YAML
parsing, so ``0.001`` and ``1.0e-3`` are the same). ``--compare`` adds a column for every config
field whose value differs between the listed runs (:func:`varying_fields`), so a table of a sweep shows
what sets its runs apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recombine.errors import UserError, choices_hint
from recombine.runs.store import RunDir
from recombine.runs.trial_record import STATUSES, read_failure, run_status


@dataclass(frozen=True)
class RunSummary:
    path: Path
    config: dict[str, Any]  # nested: seed, task, model, train
    status: str
    step: int  # the last step with a metrics record (the result's steps once finished)
    selected: dict[str, float]  # accuracies of the selected checkpoint (finished runs)
    reason: str = ""  # why it failed

    @property
    def task(self) -> str:
        return str(self.config.get("task", {}).get("name", "?"))

    @property
    def model(self) -> str:
        return str(self.config.get("model", {}).get("name", "?"))

    @property
    def steps(self) -> int | None:
        return self.config.get("train", {}).get("steps")

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "task": self.task,
            "model": self.model,
            "seed": self.config.get("seed"),
            "status": self.status,
            "step": self.step,
            "steps": self.steps,
            "selected": self.selected,
            "reason": self.reason,
            "config": self.config,
        }


def summarise(path: Path) -> RunSummary:
    run = RunDir(path)
    failure = read_failure(path)
    stored = run.read_config() if run.config_path.is_file() else None
    config = stored if stored is not None else (failure or {}).get("config") or {}
    result = run.read_result()
    step = run.last_logged_step()
    selected: dict[str, float] = {}
    reason = (failure or {}).get("reason", "")
    if result is not None and result.get("status") == "completed":
        step, selected = result["steps"], dict(result["selected"])
    elif result is not None and not reason:
        reason = f"status {result.get('status')!r}"
    return RunSummary(path, config, run_status(path), step, selected, reason)


def find_runs(root: Path) -> list[RunSummary]:
    """Every run directory under ``root`` (``root`` itself included), sorted by path."""
    if not root.exists():
        raise UserError(f"{root} does not exist")
    found = []
    for directory, subdirectories, files in os.walk(root):
        if "config.yaml" in files or "failure.json" in files:
            found.append(Path(directory))
            subdirectories.clear()  # a run holds no runs (its events/ and figures/ are not runs)
        else:
            subdirectories.sort()
    return [summarise(path) for path in sorted(found)]


def _field(config: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _config_keys(config: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items():
        keys += _config_keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
    return keys


def parse_where(items: list[str]) -> list[tuple[str, Any]]:
    conditions = []
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UserError(f"--where {item!r} is not of the form key=value (e.g. model.d_model=64)")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        conditions.append((key, value))
    return conditions


def _equal(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, int | float) and isinstance(wanted, str):  # YAML 1.1 reads 1e-3 as a string
        try:
            wanted = float(wanted)
        except ValueError:
            return False
    return bool(stored == wanted)


def filter_runs(
    runs: list[RunSummary],
    task: str | None = None,
    model: str | None = None,
    status: str | None = None,
    where: list[str] | None = None,
) -> list[RunSummary]:
    if status is not None and status not in STATUSES:
        raise UserError(f"unknown status {status!r}; {choices_hint(status, STATUSES)}")
    conditions = parse_where(where or [])
    known = sorted({key for run in runs for key in _config_keys(run.config)})
    for key, _ in conditions:
        if runs and key not in known:
            raise UserError(f"no run has config field {key!r}; {choices_hint(key, known)}")
    kept = []
    for run in runs:
        if task is not None and run.task != task:
            continue
        if model is not None and run.model != model:
            continue
        if status is not None and run.status != status:
            continue
        if all(_field(run.config, key)[0] and _equal(_field(run.config, key)[1], v) for key, v in conditions):
            kept.append(run)
    return kept


#: config fields the table always shows, or that differ between any two runs by construction
_SHOWN_FIELDS = {"seed", "task.name", "model.name"}


def varying_fields(runs: list[RunSummary]) -> list[str]:
    """The dotted config fields whose value is not the same in every run (a field a run lacks counts
    as a different value), in sorted order, leaving out those the table always shows."""
    keys = sorted({key for run in runs for key in _config_keys(run.config)} - _SHOWN_FIELDS)
    varying = []
    for key in keys:
        values = [_field(run.config, key) for run in runs]
        if any(value != values[0] for value in values[1:]):
            varying.append(key)
    return varying


def format_table(runs: list[RunSummary], root: Path, fields: list[str] | None = None) -> str:
    """One line per run: path (relative to ``root``), task, model, seed, status, steps, the config
    ``fields`` asked for (dotted paths; ``-`` where a run lacks one), accuracies."""
    fields = fields or []
    header = ["run", "task", "model", "seed", *fields, "status", "step", "selected accuracies"]
    rows = []
    for run in runs:
        relative = run.path.relative_to(root) if run.path.is_relative_to(root) else run.path
        progress = f"{run.step}/{run.steps}" if run.steps is not None else str(run.step)
        accuracies = " ".join(f"{split} {value:.3f}" for split, value in run.selected.items())
        rows.append(
            [
                str(relative),
                run.task,
                run.model,
                str(run.config.get("seed", "?")),
                *(_cell(run.config, key) for key in fields),
                run.status,
                progress,
                accuracies or run.reason,
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        lines.append(
            "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=False)) + "  " + row[-1]
        )
    return "\n".join(line.rstrip() for line in lines)


def _cell(config: dict[str, Any], dotted: str) -> str:
    present, value = _field(config, dotted)
    return str(value) if present else "-"
