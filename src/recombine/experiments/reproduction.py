"""A reproduction: a grid of model variants x task settings x seeds, with the paper's numbers.

Each cell is an ordinary run (its own run directory under ``OUT/runs``), trained by the trial
function of :mod:`recombine.experiments.trial` in a subprocess, so a crashing trial never takes the
grid down; re-running skips completed runs and resumes interrupted ones. The trials run on an
executor (:mod:`recombine.experiments.executors`: a local pool or Ray). ``OUT/manifest.json``
records the grid and its recipe so ``recombine report OUT`` can re-render the report from the
stored runs alone. ``recombine reproduce NAME`` runs a named reproduction, ``recombine sweep
RECIPE.yaml`` one read from a YAML recipe (:mod:`recombine.experiments.recipe`); both call
:func:`run_trials`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recombine.errors import UserError, choices_hint
from recombine.experiments.executors import Executor, LocalExecutor
from recombine.experiments.grid_progress import GridProgress
from recombine.experiments.trial import TrialOutcome, TrialSpec, is_done, run_trial, steps_done
from recombine.runs.directory_lock import exclusive_use
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
    # share of seeds at or above the success threshold, where the paper states it (thesis 6.3.1: "only
    # 32% of the seeds ... achieve over 95% accuracy")
    success_rate: float | None = None

    def format(self) -> str:
        text = f"{self.mean:.2f} ± {self.std:.2f}"
        return text if self.success_rate is None else f"{text} ({self.success_rate:.0%})"

    def to_dict(self) -> dict[str, float]:
        """The recipe's and results.json's form: ``{mean, std}`` plus ``success_rate`` when known."""
        number = {"mean": self.mean, "std": self.std}
        return number if self.success_rate is None else {**number, "success_rate": self.success_rate}


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
    seeds: int = 3  # seeds 1..seeds unless the command line says otherwise
    # column label -> train overrides of that column's cells (e.g. more steps for a harder direction)
    column_train: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (y, x): two task keys that every column sets; the report then lays the columns out as a grid
    # over them and draws a heat map per row (thesis Fig. 6.4), see recombine.runs.heatmap
    heatmap: tuple[str, str] | None = None
    # a model key that every variant sets to a number (e.g. n_layers): the rows are an ablation over
    # it, and the report plots accuracy against it (thesis Tab. 5.2), see recombine.runs.row_axis
    row_axis: str | None = None
    # what the task's per-example group is ("dependency depth", "number of functions"): the report then
    # breaks accuracy down by it, per split (how far past the training depths a model keeps working,
    # thesis ch.5), see recombine.runs.by_depth
    depth_axis: str | None = None

    def __post_init__(self) -> None:
        if self.depth_axis is not None and not self.depth_axis.strip():
            raise UserError(f"{self.name}: depth_axis must be a non-empty label or None")
        if self.row_axis is not None:
            rows_at: dict[float, str] = {}
            for variant in self.variants:
                value = variant.model_overrides.get(self.row_axis)
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise UserError(
                        f"{self.name}: variant {variant.label!r} does not set the row_axis model key "
                        f"{self.row_axis!r} to a number"
                    )
                if value in rows_at:
                    raise UserError(
                        f"{self.name}: variants {rows_at[value]!r} and {variant.label!r} are the same "
                        f"row_axis point {self.row_axis}={value}"
                    )
                rows_at[value] = variant.label

    def to_recipe(self) -> dict[str, Any]:
        """This reproduction as a sweep recipe (the YAML of ``recipes/``, read back by
        :func:`recombine.experiments.recipe.reproduction_from_recipe`)."""
        labels = {v.label for v in self.variants}
        recipe: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "task": self.task,
            "columns": {column: dict(overrides) for column, overrides in self.columns.items()},
            "variants": [
                {"label": v.label, "model": {"name": v.model, **v.model_overrides}}
                | ({"train": dict(v.train_overrides)} if v.train_overrides else {})
                for v in self.variants
            ],
            "seeds": self.seeds,
            "train": dict(self.train),
            "quick_train": dict(self.quick_train),
            "quick_variants": [label for label in self.quick_variants if label in labels],
            "report_split": self.report_split,
            "iid_split": self.iid_split,
            "success_threshold": self.success_threshold,
            "paper": {},
            "scale_note": self.scale_note,
        }
        if self.column_train:
            recipe["column_train"] = {column: dict(train) for column, train in self.column_train.items()}
        if self.heatmap:
            recipe["heatmap"] = {"y": self.heatmap[0], "x": self.heatmap[1]}
        if self.row_axis:
            recipe["row_axis"] = self.row_axis
        if self.depth_axis is not None:
            recipe["depth_axis"] = self.depth_axis
        for (label, column), number in self.paper.items():
            if label in labels and column in self.columns:  # others never reach a report
                recipe["paper"].setdefault(label, {})[column] = number.to_dict()
        return recipe

    def run_name(self, variant: Variant, column: str, seed: int) -> str:
        return f"{variant.label}--{column}--seed{seed}"

    def run_config(self, variant: Variant, column: str, seed: int, quick: bool) -> dict[str, Any]:
        # --quick comes last, so that a row's own steps (a longer-training baseline) never make it slow
        train = {
            **self.train,
            **self.column_train.get(column, {}),
            **variant.train_overrides,
            **(self.quick_train if quick else {}),
        }
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

    def select_columns(self, names: list[str] | None) -> tuple[str, ...]:
        """The columns to run: ``names`` if given (in the reproduction's order), else all."""
        if not names:
            return tuple(self.columns)
        known = list(self.columns)
        for name in names:
            if name not in known:
                raise UserError(f"unknown column {name!r} for {self.name}; {choices_hint(name, known)}")
        return tuple(column for column in known if column in names)

    def cells(
        self,
        seeds: int,
        variants: tuple[Variant, ...] | None = None,
        columns: tuple[str, ...] | None = None,
    ) -> list[tuple[Variant, str, int]]:
        chosen = self.variants if variants is None else variants
        chosen_columns = tuple(self.columns) if columns is None else columns
        return [(v, c, s) for v in chosen for c in chosen_columns for s in range(1, seeds + 1)]


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
    for entry in entries:
        recorded = runs.get(entry["run"])
        if recorded is not None and _without_steps(recorded["config"]) != _without_steps(entry["config"]):
            raise UserError(
                f"{path.parent / entry['run']} was trained with another config than this grid's; "
                "use another --out (or rename the row) to keep both"
            )
    runs.update({entry["run"]: entry for entry in entries})
    return {"reproduction": name, "quick": quick, "seeds": seeds, "runs": list(runs.values())}


def _without_steps(config: dict[str, Any]) -> dict[str, Any]:
    """A run config minus ``train.steps``, which may grow (finished runs are then extended)."""
    return {**config, "train": {k: v for k, v in config.get("train", {}).items() if k != "steps"}}


@dataclass(frozen=True)
class GridRun:
    """What :func:`run_trials` did: the grid's manifest entries and the outcome of each trial run."""

    entries: list[dict[str, Any]]
    outcomes: list[TrialOutcome]
    skipped: int  # trials already complete

    @property
    def failed(self) -> list[TrialOutcome]:
        """Trials that did not finish: broken or interrupted (:attr:`interrupted`)."""
        return [o for o in self.outcomes if not o.ok]

    @property
    def interrupted(self) -> list[TrialOutcome]:
        return [o for o in self.outcomes if o.interrupted]


def run_trials(
    reproduction: Reproduction,
    out: Path,
    seeds: int,
    quick: bool,
    executor: Executor | None = None,
    labels: list[str] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
    columns: list[str] | None = None,
    device: str = "cpu",
    compile_mode: str = "off",
    progress: bool = False,
) -> GridRun:
    """Write the manifest, then run every trial not yet complete on ``executor`` (default: one
    local worker), for the rows ``labels`` and the columns ``columns`` (default: all), each trial on
    ``device`` (``cpu``, ``cuda``, ``cuda:N``; several trials may share one GPU) with its training steps
    compiled by ``compile_mode`` (:mod:`recombine.train.compilation`). Failed trials are recorded in their
    run directories, never raised. ``progress`` shows the trials' steps on stderr, a bar on a terminal and
    a line per tenth elsewhere (:mod:`recombine.experiments.grid_progress`)."""
    executor = executor or LocalExecutor(1)
    out = out.resolve()
    with exclusive_use(out):  # one process fills a grid directory at a time
        entries = []
        variants = reproduction.select_variants(labels, quick)
        chosen_columns = reproduction.select_columns(columns)
        for variant, column, seed in reproduction.cells(seeds, variants, chosen_columns):
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
        manifest["recipe"] = reproduction.to_recipe()
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))

        threads = 1 if executor.workers > 1 else 0  # parallel trials: one thread each
        specs = [TrialSpec(str(out), e["run"], e["config"], threads, device, compile_mode) for e in entries]
        todo = [spec for spec in specs if not is_done(spec)]
        for spec in todo:  # an archived run (no checkpoint) cannot be extended, and must not restart
            finished_at = steps_done(spec.run_path)
            if finished_at > 0 and not RunDir(spec.run_path).has_checkpoint("last"):
                raise UserError(
                    f"{spec.run_path} is finished at {finished_at} steps but has no last.pt "
                    f"(an archive?), so it cannot be extended to {spec.steps}; use another --out"
                )
        on_event(f"{len(entries) - len(todo)} of {len(entries)} runs already complete; training {len(todo)}")
        outcomes = []
        with GridProgress(todo, disable=not progress) as bar:
            for outcome in executor.run(todo, run_trial):
                outcomes.append(outcome)
                log = out / outcome.run / "train.log"
                if outcome.ok:
                    status = "done"
                elif outcome.interrupted:
                    status = f"interrupted ({outcome.reason})"
                else:
                    status = f"FAILED ({outcome.reason}, see {log})"
                message = (
                    f"[{len(outcomes)}/{len(todo)}] {outcome.run}: {status} in {outcome.wall_time_s:.0f} s"
                )
                bar.write(on_event, message)
        return GridRun(entries, outcomes, len(entries) - len(todo))


def run_grid(
    reproduction: Reproduction,
    out: Path,
    seeds: int,
    quick: bool,
    jobs: int = 1,
    labels: list[str] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
    columns: list[str] | None = None,
    device: str = "cpu",
    compile_mode: str = "off",
    progress: bool = False,
) -> list[dict[str, Any]]:
    """``recombine reproduce``: :func:`run_trials` on ``jobs`` local workers; the manifest entries."""
    executor = LocalExecutor(max(1, jobs))
    grid = run_trials(
        reproduction, out, seeds, quick, executor, labels, on_event, columns, device, compile_mode, progress
    )
    return grid.entries
