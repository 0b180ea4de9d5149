"""Train several seeds of one DNC configuration at once, as one batched model (``ensemble=N``).

At the thesis's A.2 sizes a DNC training step is a few hundred tiny tensor operations per time step, so its
cost grows little with the batch: a compiled step of three DNCs as one ensemble took 1.3x (DNC) to 1.4x
(DNC-MDS) as long as one DNC's step (``benchmarks/bench_dnc_ensemble.py``). :func:`train_memory_ensemble`
therefore trains the runs of one variant and several seeds in one process as one model
(:func:`recombine.models.ensemble.stack_models`): each member is built and seeded as it would be alone, draws
its batches and evaluation set from its own generators, has its own gradient-norm clip
(:func:`~recombine.models.ensemble.clip_grad_norm_per_member`), and the element-wise optimiser on the stacked
weights updates each member as its own optimiser would. The batch holds every member's batch; members'
sequences of different lengths are right-padded to the longest, which changes no real step's output (the DNC
is causal) and no loss (padding has no loss weight). So each member follows the run
:func:`~recombine.experiments.dnc_memory.train_memory_task` trains alone, up to float rounding (tested over a
few steps; over thousands of steps, rounding differences grow as between ``compile_steps`` on and off).

Every member writes its own mid-run checkpoint in the single run's format, and its result is kept like a
single run's, so reports, ``recombine probe dnc-trace`` and later single-run continuations read it unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from recombine.experiments.dnc_memory import (
    DNCSequenceConfig,
    MemoryTrainConfig,
    MemoryTrainResult,
    answer_metrics,
    batch_loss,
    build_sequence_dnc,
    evaluations_on_schedule,
    make_optimizer,
    model_inputs,
    resume_point,
)
from recombine.experiments.dnc_trial_checkpoint import StoredState, TrainingState, save_training_state
from recombine.experiments.progress import training_bar
from recombine.models.dnc import DNC
from recombine.models.ensemble import (
    clip_grad_norm_per_member,
    member_optimizer_state,
    member_rows,
    member_state_dict,
    stack_models,
    stack_optimizer_states,
)
from recombine.tasks.memory_tasks import MemoryTaskBatch, MemoryTaskConfig, sample_batch


@dataclasses.dataclass
class _Member:
    """One seed's run inside the ensemble: its settings, generators, curves and where it started."""

    train: MemoryTrainConfig
    checkpoint: Path | None
    batch_rng: np.random.Generator
    eval_batch: MemoryTaskBatch
    train_loss: np.ndarray
    evaluations: list[tuple[int, float, float, float]]
    seconds_before: float


def concatenate_batches(batches: Sequence[MemoryTaskBatch]) -> MemoryTaskBatch:
    """The members' batches, member after member, right-padded to the longest sequence (no loss weight)."""
    n_steps = max(batch.inputs.shape[1] for batch in batches)

    def padded(array: np.ndarray) -> np.ndarray:
        width = [(0, 0)] * array.ndim
        width[1] = (0, n_steps - array.shape[1])
        return np.pad(array, width)

    return MemoryTaskBatch(
        inputs=np.concatenate([padded(b.inputs) for b in batches]),
        targets=np.concatenate([padded(b.targets) for b in batches]),
        loss_mask=np.concatenate([padded(b.loss_mask) for b in batches]),
        lengths=np.concatenate([b.lengths for b in batches]),
    )


def train_memory_ensemble(
    task: MemoryTaskConfig,
    model_config: DNCSequenceConfig,
    trains: Sequence[MemoryTrainConfig],
    checkpoints: Sequence[Path | None] | None = None,
    continue_from: Sequence[StoredState | None] | None = None,
) -> list[MemoryTrainResult]:
    """Train one DNC per element of ``trains`` (settings differing in ``seed`` only) as one batched model;
    the results in the order of ``trains``, each as
    :func:`~recombine.experiments.dnc_memory.train_memory_task` would return it (module docstring).
    ``checkpoints`` and ``continue_from`` are per member, as for a single run. Members that would resume
    from different steps are trained as separate ensembles, one after the other, each group's members
    together."""
    n = len(trains)
    if n < 1:
        raise ValueError("an ensemble needs at least one member")
    checkpoints = list(checkpoints) if checkpoints is not None else [None] * n
    continue_from = list(continue_from) if continue_from is not None else [None] * n
    if len(checkpoints) != n or len(continue_from) != n:
        raise ValueError("need one checkpoint and one continue_from entry (or None) per member")
    shared = {dataclasses.replace(train, seed=0) for train in trains}
    if len(shared) != 1 or len({train.seed for train in trains}) != n:
        raise ValueError("the members of an ensemble must differ in their seed, and only in it")
    members = zip(trains, checkpoints, continue_from, strict=True)
    resumed = [resume_point(task, model_config, *member) for member in members]
    start_steps = [state.step if state is not None else 0 for state in resumed]
    results: dict[int, MemoryTrainResult] = {}
    for start in sorted(set(start_steps)):
        group = [i for i, step in enumerate(start_steps) if step == start]
        trained = _train_from_one_step(
            task,
            model_config,
            [trains[i] for i in group],
            [checkpoints[i] for i in group],
            [resumed[i] for i in group],
        )
        results.update(zip(group, trained, strict=True))
    return [results[i] for i in range(n)]


def _train_from_one_step(
    task: MemoryTaskConfig,
    model_config: DNCSequenceConfig,
    trains: Sequence[MemoryTrainConfig],
    checkpoints: Sequence[Path | None],
    resumed: Sequence[TrainingState | None],
) -> list[MemoryTrainResult]:
    """The members' training, all starting at the same step."""
    settings = trains[0]  # what the members share (they differ in their seed only)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    models: list[DNC] = []
    optimizer_states = []
    members: list[_Member] = []
    for train, checkpoint, state in zip(trains, checkpoints, resumed, strict=True):
        torch.manual_seed(train.seed)  # the member's initial weights, as alone
        model = build_sequence_dnc(task, model_config)
        optimizer = make_optimizer(model, train)
        batch_rng = np.random.default_rng([train.seed, 0])
        member = _Member(
            train=train,
            checkpoint=checkpoint,
            batch_rng=batch_rng,
            eval_batch=sample_batch(task, train.eval_size, np.random.default_rng([train.seed, 1])),
            train_loss=np.zeros(train.steps),
            evaluations=[],
            seconds_before=0.0,
        )
        if state is not None:
            model.load_state_dict(state.model)
            optimizer.load_state_dict(copy.deepcopy(state.optimizer))
            batch_rng.bit_generator.state = state.batch_rng
            member.train_loss[: state.step] = state.train_loss
            member.evaluations.extend(evaluations_on_schedule(state, train))
            member.seconds_before = state.seconds
        models.append(model)
        optimizer_states.append(optimizer.state_dict())
        members.append(member)
    first_step = resumed[0].step if resumed[0] is not None else 0
    ensemble = stack_models(models)
    optimizer = make_optimizer(ensemble, settings)
    optimizer.load_state_dict(stack_optimizer_states(optimizer_states))
    eval_batch = concatenate_batches([m.eval_batch for m in members])
    batch_size = settings.batch_size

    def record(step: int) -> None:
        was_training = ensemble.training
        ensemble.eval()
        with torch.no_grad():
            logits, _ = ensemble(model_inputs(eval_batch.inputs))
        ensemble.train(was_training)
        for i, member in enumerate(members):
            rows = member_rows(settings.eval_size, i)
            own = member.eval_batch
            member_logits = logits[rows, : own.inputs.shape[1]]
            bit_error, accuracy = answer_metrics(member_logits, own)
            loss = float(batch_loss(member_logits, own, settings.loss_on))
            member.evaluations.append((step, loss, bit_error, accuracy))

    def state_at(i: int, step: int, seconds: float) -> TrainingState:
        """Member ``i``'s state in the single run's format. Its ``torch_rng`` is this process's, not the one
        the member would have alone; nothing in DNC memory training draws from torch's generator (no dropout,
        numpy batches), so a run continued from it trains the same."""
        member = members[i]
        return TrainingState(
            step=step,
            model=member_state_dict(ensemble, i),
            optimizer=member_optimizer_state(optimizer.state_dict(), i),
            batch_rng=member.batch_rng.bit_generator.state,
            torch_rng=torch.get_rng_state(),
            train_loss=member.train_loss[:step].copy(),
            evaluations=list(member.evaluations),
            seconds=member.seconds_before + seconds,
        )

    start = time.perf_counter()
    if first_step == 0:
        record(0)
    ensemble.train()
    seeds = ",".join(str(t.seed) for t in trains)
    with training_bar(settings.steps, f"{model_config.variant} seeds {seeds}", initial=first_step) as bar:
        bar.set_postfix_str(_evaluation_postfix(members))
        for step in range(first_step, settings.steps):
            config = settings.curriculum.config_at(task, step)
            own_batches = [sample_batch(config, batch_size, m.batch_rng) for m in members]
            batch = concatenate_batches(own_batches)
            logits, _ = ensemble(model_inputs(batch.inputs))
            losses = [
                batch_loss(logits[member_rows(batch_size, i), : own.inputs.shape[1]], own, settings.loss_on)
                for i, own in enumerate(own_batches)
            ]
            optimizer.zero_grad(set_to_none=True)
            torch.stack(losses).sum().backward()
            if settings.grad_clip > 0:
                clip_grad_norm_per_member(ensemble.parameters(), settings.grad_clip)
            optimizer.step()
            for member, loss in zip(members, losses, strict=True):
                member.train_loss[step] = loss.item()
            if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
                record(step + 1)
                bar.set_postfix_str(_evaluation_postfix(members))
                if step + 1 < settings.steps:
                    elapsed = time.perf_counter() - start
                    for i, member in enumerate(members):
                        if member.checkpoint is not None:
                            save_training_state(member.checkpoint, state_at(i, step + 1, elapsed))
            bar.update()
    seconds = time.perf_counter() - start
    results = []
    for i, member in enumerate(members):
        model = build_sequence_dnc(task, model_config)
        model.load_state_dict(member_state_dict(ensemble, i))
        model.eval()
        steps, eval_losses, bit_errors, accuracies = (
            np.array(column) for column in zip(*member.evaluations, strict=True)
        )
        results.append(
            MemoryTrainResult(
                model=model,
                train_loss=member.train_loss,
                eval_steps=steps.astype(int),
                eval_loss=eval_losses,
                eval_bit_error=bit_errors,
                eval_sequence_accuracy=accuracies,
                seconds=member.seconds_before + seconds,
                final_state=state_at(i, settings.steps, seconds),
                ensemble=len(members),
            )
        )
    return results


def _evaluation_postfix(members: Sequence[_Member]) -> str:
    """The progress bar's note: every member's last evaluation loss."""
    return "eval loss " + " ".join(f"{member.evaluations[-1][1]:.3g}" for member in members)
