"""Where the runs of a DNC reproduction stand: the kept runs and the ones in progress (``recombine runs``).

A DNC reproduction (``dnc-repeat-copy``, ``dnc-assoc-recall``) keeps its finished runs in
``trials.jsonl`` + ``trials/*.pt`` (:class:`~recombine.experiments.dnc_memory.StoredTrials`) and the run
in progress at every evaluation in ``trials/partial/<variant>-seed<S>-<digest>.pt``
(:mod:`~recombine.experiments.dnc_trial_checkpoint`). At the thesis's A.2 sizes a run takes hours and spans
sessions, so ``recombine runs DIR`` lists these too: per run its variant and seed, whether it is kept or
in progress, its step (of the reproduction's ``steps``, read from ``experiment.yaml``, for a run in
progress), its last evaluation (loss, bit error, sequence accuracy), its training seconds and, for a kept
run, the size of the ensemble it trained in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from recombine.experiments.dnc_memory import StoredTrials
from recombine.experiments.dnc_trial_checkpoint import UNREADABLE_STATE_ERRORS, load_training_state


@dataclass(frozen=True)
class DNCTrialProgress:
    variant: str
    seed: int
    status: str  # "kept" or "in progress"; "unreadable" for a file that cannot be read
    step: int
    steps: int | None  # None for a run in progress whose reproduction config is not there
    eval_loss: float | None  # the last evaluation's
    bit_error: float | None
    sequence_accuracy: float | None
    seconds: float | None
    ensemble: int | None  # kept runs: the size of the ensemble it trained in (1: alone)
    file: Path


def dnc_trials(out_dir: Path) -> list[DNCTrialProgress]:
    """The kept runs of the DNC reproduction in ``out_dir``, then its runs in progress, each by variant and
    seed."""
    store = StoredTrials(out_dir)
    records = store.log.finished()
    kept = []
    for task, model, train in store.finished():
        record = records[store.key(task, model, train)]
        path = out_dir / record["file"]
        common = {"variant": model.variant, "seed": train.seed, "step": train.steps, "steps": train.steps}
        try:
            stored = torch.load(path, weights_only=True)
            last = [float(stored[curve][-1]) for curve in _LAST_EVALUATION]
        except UNREADABLE_STATE_ERRORS:
            kept.append(DNCTrialProgress(**common, status="unreadable", **_NO_EVALUATION, file=path))
            continue
        seconds, ensemble = float(record["seconds"]), int(record.get("ensemble", 1))
        kept.append(
            DNCTrialProgress(**common, status="kept", **_evaluation(*last, seconds, ensemble), file=path)
        )
    steps = _configured_steps(out_dir)
    in_progress = []
    for path in sorted((out_dir / "trials" / "partial").glob("*.pt")):
        variant, seed = _variant_and_seed(path)
        state = load_training_state(path)
        common = {"variant": variant, "seed": seed, "steps": steps, "file": path}
        if state is None or not state.evaluations:
            in_progress.append(DNCTrialProgress(**common, status="unreadable", step=0, **_NO_EVALUATION))
            continue
        _, loss, bit_error, accuracy = state.evaluations[-1]
        evaluation = _evaluation(loss, bit_error, accuracy, state.seconds, None)
        in_progress.append(DNCTrialProgress(**common, status="in progress", step=state.step, **evaluation))
    order = lambda trial: (trial.variant, trial.seed)  # noqa: E731
    return sorted(kept, key=order) + sorted(in_progress, key=order)


#: the curves of a kept run whose last values are listed
_LAST_EVALUATION = ("eval_loss", "eval_bit_error", "eval_sequence_accuracy")


def _evaluation(
    loss: float | None,
    bit_error: float | None,
    accuracy: float | None,
    seconds: float | None,
    ensemble: int | None,
) -> dict[str, float | int | None]:
    return {
        "eval_loss": loss,
        "bit_error": bit_error,
        "sequence_accuracy": accuracy,
        "seconds": seconds,
        "ensemble": ensemble,
    }


_NO_EVALUATION = _evaluation(None, None, None, None, None)


def _variant_and_seed(path: Path) -> tuple[str, int]:
    """``<variant>-seed<S>-<digest>.pt`` -> (variant, S); (stem, -1) for a name not of that form."""
    name, _, _digest = path.stem.rpartition("-")
    variant, _, seed = name.rpartition("-seed")
    return (variant, int(seed)) if variant and seed.isdigit() else (path.stem, -1)


def _configured_steps(out_dir: Path) -> int | None:
    """The ``steps`` of the reproduction's stored config (``experiment.yaml``), if it has one."""
    try:
        config = yaml.safe_load((out_dir / "experiment.yaml").read_text())
        return int(config["steps"])
    except (OSError, yaml.YAMLError, TypeError, KeyError, ValueError):
        return None


def find_dnc_reproductions(root: Path) -> list[Path]:
    """The directories under ``root`` (``root`` included) that hold kept or in-progress DNC runs."""
    found = []
    for directory, subdirectories, _files in os.walk(root):
        path = Path(directory)
        partial = path / "trials" / "partial"
        if any(partial.glob("*.pt")) or StoredTrials(path).finished():
            found.append(path)
            subdirectories.clear()
        else:
            subdirectories.sort()
    return sorted(found)


def format_dnc_trials(trials: list[DNCTrialProgress]) -> str:
    """One line per run: variant, seed, status, step, last evaluation, seconds, ensemble."""
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
    rows = []
    for trial in trials:
        progress = f"{trial.step}/{trial.steps}" if trial.steps is not None else str(trial.step)
        rows.append(
            [
                trial.variant,
                str(trial.seed),
                trial.status,
                progress,
                _number(trial.eval_loss, "{:.3g}"),
                _number(trial.bit_error, "{:.4f}"),
                _number(trial.sequence_accuracy, "{:.3f}"),
                _number(trial.seconds, "{:.0f}"),
                "-" if trial.ensemble is None else str(trial.ensemble),
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(text.ljust(w) for text, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)
