"""Warm start: a fresh run whose model begins from another run's trained weights.

``train.init_from=runs/listops-depth1`` starts the model from that run's ``last.pt`` (``train.init_checkpoint=
best`` takes its ``best.pt``) instead of a random initialisation. Only the weights carry over: the
optimizer, the learning-rate schedule, the step counter and the random streams start afresh, as in any
new run, so the run is a second training phase with its own task and training settings. The thesis trains
every model from scratch; this is a CPU-scale aid for staged training, e.g. ListOps' sum modulo 10 learned
on depth-1 problems first (docs/reproductions/ndr-listops.md).

The two runs must share the model (name and parameter shapes) and the vocabularies, token for token: a
weight means something only for the token ids it was trained on. Both are checked, each with a one-line
UserError, before the new run writes anything. Other model settings (dropout, test-time layers) may differ
and are listed in the notice :func:`load_initial_weights` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from recombine.errors import UserError
from recombine.run_config import RunConfig, resolve
from recombine.runs.store import RunDir
from recombine.tasks.base import TaskData


def load_initial_weights(
    model: nn.Module,
    config: RunConfig,
    task: TaskData,
    build_task: Callable[[RunConfig], TaskData],
) -> dict[str, Any]:
    """Load ``config.train.init_from``'s weights into ``model`` (built for ``task``) and say where they
    came from: ``{"run", "checkpoint", "step", "differing_model_fields"}``.

    ``build_task(RunConfig) -> TaskData`` builds the source run's task (from the task cache, where that
    run trained on this machine) to compare its vocabularies with ``task``'s."""
    source = RunDir(config.train.init_from)
    which = config.train.init_checkpoint
    if not source.path.is_dir():
        hint = " (name the run directory; train.init_checkpoint=best|last picks the file)"
        raise UserError(
            f"train.init_from {config.train.init_from!r} is not a run directory"
            + (hint if source.path.suffix == ".pt" else "")
        )
    if not source.has_checkpoint(which):
        raise UserError(f"train.init_from: {source.path} has no {which}.pt (train.init_checkpoint={which})")
    state = source.load_checkpoint(which)
    if not isinstance(state, dict) or not all(isinstance(state.get(k), dict) for k in ("config", "model")):
        raise UserError(
            f"train.init_from: {source.path / (which + '.pt')} is not a recombine train checkpoint"
        )
    try:
        source_config = resolve(state["config"])
    except UserError as e:
        raise UserError(f"train.init_from: the config of {source.path} no longer resolves: {e}") from None
    if source_config.model_name != config.model_name:
        raise UserError(
            f"train.init_from: {source.path} trained model {source_config.model_name!r}, "
            f"this run builds {config.model_name!r}"
        )
    try:
        source_task = build_task(source_config)
    except UserError as e:
        raise UserError(
            f"train.init_from: cannot build {source.path}'s task to compare vocabularies: {e}"
        ) from None
    for side in ("input_vocab", "output_vocab"):
        ours, theirs = getattr(task, side).tokens, getattr(source_task, side).tokens
        if ours != theirs:
            at = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                min(len(ours), len(theirs)),
            )
            raise UserError(
                f"train.init_from: the {side.replace('_', ' ')} of {source.path}'s task "
                f"{source_config.task_name!r} differs from this run's task {config.task_name!r} from token "
                f"id {at} on ({len(theirs)} against {len(ours)} tokens); its weights would mean other tokens"
            )
    _load_matching(model, state["model"], source.path)
    ours_model, theirs_model = config.to_dict()["model"], source_config.to_dict()["model"]
    differing = sorted(key for key in ours_model if ours_model[key] != theirs_model.get(key))
    return {
        "run": str(source.path.resolve()),
        "checkpoint": which,
        "step": state["step"],
        "differing_model_fields": differing,
    }


def _load_matching(model: nn.Module, weights: dict[str, Any], source: Path) -> None:
    """``model.load_state_dict(weights)``, with a missing, extra or reshaped tensor as one UserError line."""
    ours = model.state_dict()
    missing = sorted(set(ours) - set(weights))
    extra = sorted(set(weights) - set(ours))
    reshaped = sorted(
        f"{name} {tuple(weights[name].shape)} -> {tuple(ours[name].shape)}"
        for name in set(ours) & set(weights)
        if weights[name].shape != ours[name].shape
    )
    problems = [
        *([f"missing {', '.join(missing[:3])}"] if missing else []),
        *([f"unexpected {', '.join(extra[:3])}"] if extra else []),
        *([f"shape {', '.join(reshaped[:3])}"] if reshaped else []),
    ]
    if problems:
        raise UserError(f"train.init_from: {source}'s weights do not fit this model: {'; '.join(problems)}")
    model.load_state_dict(weights)
