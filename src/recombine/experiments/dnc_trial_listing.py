"""Where the runs of a DNC reproduction stand: the kept runs and the checkpointed ones (``recombine runs``).

A DNC reproduction (``dnc-repeat-copy``, ``dnc-assoc-recall``, ``dnc-key-value``) keeps its finished runs in
``trials.jsonl`` + ``trials/*.pt`` (:class:`~recombine.experiments.dnc_memory.StoredTrials`) and the run
still to finish at every evaluation in ``trials/partial/<variant>-seed<S>-<digest>.pt``
(:mod:`~recombine.experiments.dnc_trial_checkpoint`). At the thesis's A.2 sizes a run takes hours and spans
sessions, so ``recombine runs DIR`` lists these too, one line per run
(:func:`recombine.probes.dnc_stored_trace.stored_runs` finds them and matches each checkpoint to a run of the
reproduction's ``experiment.yaml``): variant, seed, ``kept`` or ``checkpoint`` (a run that resumes from its
checkpoint when the reproduction is started again; whether a process is training it now is not known),
step of steps, its last evaluation (loss, bit error, sequence accuracy), its training seconds, the size of
the ensemble a kept run trained in, when the checkpoint was saved, and the run's name (for
``recombine probe dnc-trace --run``).

Each run also carries its curves so far (every evaluation and the training loss per step), which
``recombine report`` draws for a reproduction that has not finished
(:mod:`~recombine.experiments.dnc_progress_report`).

This module imports nothing heavy at the top: ``recombine runs`` calls :func:`find_dnc_reproductions` on
every listing.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from recombine.runs.text_table import aligned_columns

if TYPE_CHECKING:
    import numpy as np

    from recombine.tasks.memory_tasks import MemoryTaskConfig


@dataclass(frozen=True)
class DNCTrialProgress:
    """One run of a DNC reproduction: kept, checkpointed, or ``unreadable`` (its file cannot be read)."""

    name: str  # <variant>-seed<S>-<digest>
    variant: str
    seed: int
    status: str
    step: int | None
    steps: int
    eval_loss: float | None = None  # the last evaluation's
    bit_error: float | None = None
    sequence_accuracy: float | None = None
    seconds: float | None = None
    ensemble: int | None = None  # kept runs: the size of the ensemble it trained in (1: alone)
    saved: datetime.datetime | None = None  # checkpoints: when the file was written
    # (step, loss, bit error, sequence accuracy) of every evaluation so far (step 0: at initialisation)
    evaluations: tuple[tuple[int, float, float, float], ...] = ()
    train_loss: np.ndarray | None = field(default=None, compare=False, repr=False)  # [step] so far
    task: MemoryTaskConfig | None = field(default=None, compare=False, repr=False)


def dnc_trials(out_dir: Path) -> list[DNCTrialProgress]:
    """The kept and checkpointed runs of the DNC reproduction in ``out_dir``, by variant, seed and steps."""
    import torch

    from recombine.errors import UserError
    from recombine.experiments.dnc_memory import StoredTrials
    from recombine.experiments.dnc_trial_checkpoint import UNREADABLE_STATE_ERRORS, load_training_state
    from recombine.probes.dnc_stored_trace import stored_runs

    store = StoredTrials(out_dir)
    records = store.log.finished()
    try:
        runs = stored_runs(out_dir)
    except UserError:  # no run of this version of recombine (checkpoints that match none are said on stderr)
        return []
    listed = []
    for run in runs:
        common = {
            "name": run.name,
            "variant": run.model.variant,
            "seed": run.train.seed,
            "steps": run.train.steps,
            "task": run.task,
        }
        if run.at_step is None:
            # None where the key rebuilt from the configs is not the stored one (a field added since)
            record = records.get(store.key(run.task, run.model, run.train)) or {}
            try:
                stored = torch.load(out_dir / record["file"], weights_only=True)
                evaluation = {
                    "eval_loss": float(stored["eval_loss"][-1]),
                    "bit_error": float(stored["eval_bit_error"][-1]),
                    "sequence_accuracy": float(stored["eval_sequence_accuracy"][-1]),
                    "seconds": float(record["seconds"]),
                    "ensemble": int(record.get("ensemble", 1)),
                    "evaluations": _evaluations(stored),
                    "train_loss": stored["train_loss"].numpy(),
                }
            except UNREADABLE_STATE_ERRORS:
                listed.append(DNCTrialProgress(**common, status="unreadable", step=None))
                continue
            listed.append(DNCTrialProgress(**common, status="kept", step=run.train.steps, **evaluation))
            continue
        path = store.partial_path(run.task, run.model, run.train)
        state = load_training_state(path)
        if state is None or not state.evaluations:
            listed.append(DNCTrialProgress(**common, status="unreadable", step=None))
            continue
        _, loss, bit_error, accuracy = state.evaluations[-1]
        listed.append(
            DNCTrialProgress(
                **common,
                status="checkpoint",
                step=state.step,
                eval_loss=loss,
                bit_error=bit_error,
                sequence_accuracy=accuracy,
                seconds=state.seconds,
                evaluations=tuple(state.evaluations),
                train_loss=state.train_loss,
                saved=datetime.datetime.fromtimestamp(path.stat().st_mtime),
            )
        )
    return listed


def _evaluations(stored: dict) -> tuple[tuple[int, float, float, float], ...]:
    columns = ("eval_steps", "eval_loss", "eval_bit_error", "eval_sequence_accuracy")
    step, loss, bit_error, accuracy = (stored[name].tolist() for name in columns)
    rows = zip(step, loss, bit_error, accuracy, strict=True)
    return tuple((int(s), float(lo), float(b), float(a)) for s, lo, b, a in rows)


def find_dnc_reproductions(root: Path) -> list[Path]:
    """The directories under ``root`` (``root`` included) that hold kept or checkpointed DNC runs. Run
    directories (``config.yaml``) are not entered; another kind of grid's ``trials.jsonl`` does not count."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        if "config.yaml" in files or "failure.json" in files:  # a run of `recombine train`
            subdirectories.clear()
            continue
        subdirectories.sort()
        path = Path(directory)
        checkpoints = any((path / "trials" / "partial").glob("*.pt"))
        if checkpoints or ("trials.jsonl" in files and _holds_dnc_runs(path)):
            found.append(path)
            subdirectories.clear()
    return sorted(found)


def _holds_dnc_runs(path: Path) -> bool:
    from recombine.experiments.dnc_memory import StoredTrials

    return bool(StoredTrials(path).finished())


def format_dnc_trials(trials: list[DNCTrialProgress]) -> str:
    """One line per run: variant, seed, status, step, last evaluation, seconds, ensemble, saved, name."""
    header = [
        "variant",
        "seed",
        "status",
        "step",
        "eval loss",
        "bit error",
        "seq. acc.",
        "seconds",
        "ensemble",
    ]
    header += ["saved", "run"]
    rows = []
    for trial in trials:
        rows.append(
            [
                trial.variant,
                str(trial.seed),
                trial.status,
                f"{'-' if trial.step is None else trial.step}/{trial.steps}",
                _number(trial.eval_loss, "{:.3g}"),
                _number(trial.bit_error, "{:.4f}"),
                _number(trial.sequence_accuracy, "{:.3f}"),
                _number(trial.seconds, "{:.0f}"),
                "-" if trial.ensemble is None else str(trial.ensemble),
                "-" if trial.saved is None else trial.saved.strftime("%Y-%m-%d %H:%M"),
                trial.name,
            ]
        )
    return aligned_columns([header, *rows])


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)
