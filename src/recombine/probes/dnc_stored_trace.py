"""``recombine probe dnc-trace DIR``: the memory trace of any stored run of a DNC reproduction.

The DNC reproductions (``dnc-repeat-copy``, ``dnc-assoc-recall``) draw one trace figure per variant, of
their first seed on the first evaluation sequence. Every finished run keeps its weights
(``DIR/trials/*.pt``) and its full settings (the key of its line in ``DIR/trials.jsonl``: task, model,
training), so any other seed, variant or evaluation sequence can be drawn afterwards without training:
bit maps, write/read weightings, forward links, read modes (thesis Figs. 2.3a, 2.4) and, for masked
models, the read mask (Fig. 2.2b). A directory holding several runs of the same variant and seed (e.g.
at two step counts) asks for ``--steps``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recombine.errors import UserError, choices_hint
from recombine.models.dnc import DNC
from recombine.probes.dnc_traces import MemoryTraceArrays, save_memory_trace
from recombine.tasks.memory_tasks import MEMORY_TASKS, MemoryTaskConfig

#: the task config classes by the name a stored run's key gives them
_TASK_KINDS = {cls.__name__: cls for cls in MEMORY_TASKS.values()}


@dataclass(frozen=True)
class StoredDNCRun:
    """One finished run of a DNC reproduction directory."""

    variant: str
    seed: int
    steps: int
    task: MemoryTaskConfig
    model: Any  # DNCSequenceConfig (not imported at module level: the experiments package imports probes)
    weights: Path

    @property
    def label(self) -> str:
        return f"{self.variant} seed {self.seed}, {self.steps} steps"


def _task_from_key(settings: dict[str, Any]) -> MemoryTaskConfig:
    settings = dict(settings)
    kind = settings.pop("kind")
    if kind not in _TASK_KINDS:
        raise UserError(f"stored run of an unknown memory task {kind!r}")
    # JSON gave the (low, high) ranges back as lists; the task configs hold no other sequences
    return _TASK_KINDS[kind](**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()})


def stored_runs(directory: str | Path) -> list[StoredDNCRun]:
    """Every finished run recorded in ``directory/trials.jsonl`` whose weights file exists."""
    from recombine.experiments.block_architecture_grid import TRIALS_FILE, TrialLog
    from recombine.experiments.dnc_memory import DNCSequenceConfig

    directory = Path(directory)
    log_path = directory / TRIALS_FILE
    if not log_path.is_file():
        raise UserError(
            f"{directory} holds no {TRIALS_FILE}: not the output directory of a DNC reproduction "
            "(recombine reproduce dnc-repeat-copy / dnc-assoc-recall --out DIR)"
        )
    runs = []
    for key, record in TrialLog(log_path).finished().items():
        settings = json.loads(key)
        if not {"task", "model", "train"} <= settings.keys() or "file" not in record:
            continue  # a line of another kind of grid
        weights = directory / record["file"]
        if not weights.is_file():
            continue
        model = DNCSequenceConfig(**settings["model"])
        train = settings["train"]
        runs.append(
            StoredDNCRun(
                model.variant,
                int(train["seed"]),
                int(train["steps"]),
                _task_from_key(settings["task"]),
                model,
                weights,
            )
        )
    if not runs:
        raise UserError(f"{log_path} records no finished DNC run with its weights file")
    return sorted(runs, key=lambda run: (run.variant, run.seed, run.steps))


def select_run(
    runs: list[StoredDNCRun], variant: str | None, seed: int | None, steps: int | None
) -> StoredDNCRun:
    """The one run matching the given fields (None: any); a clear error naming what there is otherwise."""
    variants = sorted({run.variant for run in runs})
    if variant is not None and variant not in variants:
        raise UserError(f"no stored run of variant {variant!r}; {choices_hint(variant, variants)}")
    matching = [
        run
        for run in runs
        if (variant is None or run.variant == variant)
        and (seed is None or run.seed == seed)
        and (steps is None or run.steps == steps)
    ]
    available = "; ".join(run.label for run in runs)
    if not matching:
        raise UserError(f"no stored run matches; stored: {available}")
    if len(matching) > 1:
        which = "; ".join(run.label for run in matching)
        raise UserError(
            f"{len(matching)} stored runs match ({which}); choose with --variant, --seed, --steps"
        )
    return matching[0]


def load_model(run: StoredDNCRun) -> DNC:
    from recombine.experiments.dnc_memory import build_sequence_dnc

    model = build_sequence_dnc(run.task, run.model)
    model.load_state_dict(torch.load(run.weights, weights_only=True)["state_dict"])
    return model.eval()


def stored_trace(
    directory: str | Path,
    *,
    variant: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    example: int = 0,
) -> tuple[StoredDNCRun, MemoryTraceArrays]:
    """The selected stored run and its trace on evaluation sequence ``example`` of its seed."""
    from recombine.experiments.dnc_memory import evaluation_sequence, trace_sequence

    run = select_run(stored_runs(directory), variant, seed, steps)
    sequence = evaluation_sequence(run.task, run.seed, example)
    with torch.no_grad():
        return run, trace_sequence(load_model(run), sequence)


def draw_stored_trace(
    directory: str | Path,
    out: str | Path | None = None,
    *,
    variant: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    example: int = 0,
    head: int = 0,
) -> Path:
    """Draw :func:`stored_trace` of read head ``head``; the PNG's path (default
    ``DIR/probes/trace_<variant>_seed<S>_<steps>steps_ex<example>.png``)."""
    run, arrays = stored_trace(directory, variant=variant, seed=seed, steps=steps, example=example)
    name = f"trace_{run.variant}_seed{run.seed}_{run.steps}steps_ex{example}.png"
    path = Path(out) if out is not None else Path(directory) / "probes" / name
    title = f"{run.label}, evaluation sequence {example}"
    return save_memory_trace(arrays, path, head=head, title=title)
