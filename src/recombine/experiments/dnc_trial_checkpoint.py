"""Mid-run checkpoints of one DNC training run, so that a killed trial resumes instead of starting over.

The DNC reproductions keep every *finished* run (:class:`~recombine.experiments.dnc_memory.StoredTrials`);
at the thesis's A.2 sizes one run takes one to two hours on a CPU core, and a kill in its last minutes
used to lose all of it. :func:`~recombine.experiments.dnc_memory.train_memory_task` therefore writes the
whole training state at every evaluation to ``DIR/trials/partial/<variant>-seed<S>-<digest>.pt`` (the same
key as the finished run's file) and continues from it when the same run is started again; the file is
removed once the finished run is stored. The finished run's file embeds its final state
(:func:`training_state_payload`), so that a later run of the same settings with more steps continues it
(:meth:`~recombine.experiments.dnc_memory.StoredTrials.shorter_run`).

What makes the continuation exact (same curves as an uninterrupted run, tested): the weights, the
optimiser's moments, the numpy generator of the training batches (its bit-generator state), torch's RNG
state, the training losses and evaluations so far, and the wall time already spent (so ``seconds`` stays
the run's whole training time). The evaluation set is re-drawn from its own seed.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from recombine.runs.store import atomic_write_bytes

#: what reading a stored file or the training state in it can raise: a cut or foreign file, missing or
#: malformed entries (also for the kept runs' files, which embed a state)
UNREADABLE_STATE_ERRORS = (
    OSError,
    EOFError,
    RuntimeError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    pickle.UnpicklingError,
)


@dataclass
class TrainingState:
    """Where a run stood after ``step`` training steps."""

    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    batch_rng: Mapping[str, Any]  # numpy bit-generator state of the training batches
    torch_rng: torch.Tensor
    train_loss: np.ndarray  # [step]
    evaluations: list[tuple[int, float, float, float]]  # (step, loss, bit error, sequence accuracy)
    seconds: float


class StoredState(NamedTuple):
    """A training state and the file it was read from (for messages)."""

    path: Path
    state: TrainingState


def training_state_payload(state: TrainingState) -> dict[str, Any]:
    """``state`` as a dict of tensors and plain values that ``torch.load(..., weights_only=True)`` reads back
    (:func:`training_state_from_payload`); a kept run's file embeds it to be continued to more steps."""
    return {
        "step": state.step,
        "model": state.model,
        "optimizer": state.optimizer,
        "batch_rng": json.dumps(dict(state.batch_rng)),  # a dict with 128-bit integers
        "torch_rng": state.torch_rng,
        "train_loss": torch.from_numpy(state.train_loss.copy()),
        "evaluations": torch.tensor(state.evaluations, dtype=torch.float64),
        "seconds": state.seconds,
    }


def training_state_from_payload(payload: Mapping[str, Any]) -> TrainingState:
    """The inverse of :func:`training_state_payload`; KeyError or ValueError when ``payload`` is not one."""
    evaluations = [
        (int(step), float(loss), float(bits), float(accuracy))
        for step, loss, bits, accuracy in payload["evaluations"].tolist()
    ]
    return TrainingState(
        step=int(payload["step"]),
        model=payload["model"],
        optimizer=payload["optimizer"],
        batch_rng=json.loads(payload["batch_rng"]),
        torch_rng=payload["torch_rng"],
        train_loss=payload["train_loss"].numpy(),
        evaluations=evaluations,
        seconds=float(payload["seconds"]),
    )


def save_training_state(path: Path, state: TrainingState) -> None:
    """Write ``state`` to ``path`` atomically (a kill while writing keeps the previous checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = training_state_payload(state)
    atomic_write_bytes(path, lambda f: torch.save(payload, f))


def load_training_state(path: Path) -> TrainingState | None:
    """The state stored at ``path``, or None when there is none or it cannot be read."""
    if not path.is_file():
        return None
    try:
        return training_state_from_payload(torch.load(path, weights_only=True))
    except UNREADABLE_STATE_ERRORS:
        return None
