"""Training the (improved) DNC on the algorithmic memory tasks (thesis 2.3, A.2; CATALOG §4 R-DNC).

:func:`train_memory_task` trains :class:`~recombine.models.dnc.DNC` on a per-step-target task of
:mod:`recombine.tasks.memory_tasks` and returns its loss curves:

* inputs are the task's bits mapped to ``2x - 1`` and the outputs are logits of the target bits
  (Csordás's reference code, ``RobertCsordas/dnc``);
* the loss is the binary cross-entropy summed over the loss steps and bits, divided by the batch
  size (the reference's normalisation, so curves are "bits of loss per sequence"). ``loss_on`` is
  ``"output_steps"`` (only the steps that carry an answer, as in Graves et al. 2016) or
  ``"all_steps"`` (every real step, zero targets outside the answers: the reference code);
* metrics on the answer steps only: bit error rate (thresholded at probability 0.5) and the
  fraction of sequences with every answer bit right;
* the optimiser defaults are the reference code's (the thesis does not give them): RMSprop, learning
  rate 1e-4, momentum 0.9, eps 1e-10, weight decay 1e-5 on weights only, gradient norm clipped to 10;
  Adam is the alternative. Batch size 16 (A.2).

Determinism: parameters are initialised right after ``torch.manual_seed(seed)``; training batches
come from ``numpy.random.default_rng([seed, 0])`` and the fixed evaluation set from
``default_rng([seed, 1])``, so the same configs and seed give the same curves.

:func:`compare_on_repeated_copy` is the small-scale version of thesis Fig. 2.3b: DNC vs DNC-DS vs
DNC-MDS on repeated copy whose total length exceeds the memory, with the loss-curve figure and one
memory-trace figure per model (:mod:`recombine.probes.dnc_traces`, Figs. 2.3a / 2.4).

Two scripted reproductions (``run(out_dir, config)`` writing ``report.md``, ``results.json`` and the
figures; :mod:`recombine.experiments.scripted_reproduction`):

* :func:`run_dnc_repeat_copy` / :class:`DNCRepeatCopyConfig` (``dnc-repeat-copy``): DNC vs DNC-DS vs
  DNC-MDS on repeated copy longer than the memory, loss curves over seeds (Fig. 2.3b), the memory
  trace of each variant and the link distributions / read modes side by side (Figs. 2.3a, 2.4);
* :func:`run_dnc_assoc_recall` / :class:`DNCAssocRecallConfig` (``dnc-assoc-recall``): DNC vs DNC-M on
  associative recall, loss curves over seeds and the steps each seed needs to bring its smoothed
  training loss below a threshold (Fig. 2.2a: "masking improves convergence speed").

Both keep every finished run in their output directory (:class:`StoredTrials`) and read it back when
run again with the same settings: an interrupted run resumes, and one-variant runs add up (side by side
in directories of their own, then merged). A run killed midway continues from its last evaluation
(:mod:`recombine.experiments.dnc_trial_checkpoint`).

Both measure convergence speed by :func:`steps_to_threshold`: the first step after which the moving
average of the training loss is below ``threshold_fraction`` times the chance loss (the loss of
predicting 1/2 for every answer bit, :func:`chance_loss`); the thesis shows curves, not this number.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError, choices_hint, first_line
from recombine.experiments.dnc_trial_checkpoint import (
    UNREADABLE_STATE_ERRORS,
    StoredState,
    TrainingState,
    load_training_state,
    save_training_state,
    training_state_from_payload,
    training_state_payload,
)
from recombine.experiments.orphan_guard import end_with_parent
from recombine.experiments.progress import progress_as_lines, training_bar, trial_done
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.models.dnc import DNC
from recombine.models.layers.dnc_memory import DNCMemoryConfig
from recombine.probes.dnc_traces import (
    MemoryTraceArrays,
    save_link_comparison,
    save_memory_trace,
    trace_arrays,
)
from recombine.runs.store import atomic_write_bytes
from recombine.tasks.memory_tasks import (
    MEMORY_TASKS,
    AssociativeRecallConfig,
    Curriculum,
    MemorySequence,
    MemoryTaskBatch,
    MemoryTaskConfig,
    RepeatedCopyConfig,
    pad_batch,
    sample_batch,
    sample_sequence,
)

#: the eight models of thesis 2.3 by name: (masked M, dealloc D, sharpness S)
VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "dnc": (False, False, False),
    "dnc_m": (True, False, False),
    "dnc_d": (False, True, False),
    "dnc_s": (False, False, True),
    "dnc_md": (True, True, False),
    "dnc_ms": (True, False, True),
    "dnc_ds": (False, True, True),
    "dnc_mds": (True, True, True),
}

LOSS_ON = ("output_steps", "all_steps")
OPTIMIZERS = ("rmsprop", "adam")


@dataclass(frozen=True)
class DNCSequenceConfig:
    """A DNC with per-step outputs; defaults are the copy-task sizes of A.2 (controller 32, 16 cells of
    16, one read head)."""

    variant: str = "dnc"  # a key of VARIANTS
    d_controller: int = 32
    n_cells: int = 16
    cell_width: int = 16
    n_read_heads: int = 1
    mask_min: float = 0.1  # delta of eq. A.2
    interface_clip: float = 20.0
    compile_steps: bool = False  # torch.compile each time step (recombine.models.dnc)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise UserError(f"unknown DNC variant {self.variant!r}; {choices_hint(self.variant, VARIANTS)}")
        if self.d_controller < 1:
            raise UserError(f"d_controller must be >= 1; got {self.d_controller}")
        self.memory_config()  # validates the memory fields

    def memory_config(self) -> DNCMemoryConfig:
        masked, dealloc, sharpness = VARIANTS[self.variant]
        return DNCMemoryConfig(
            n_cells=self.n_cells,
            cell_width=self.cell_width,
            n_read_heads=self.n_read_heads,
            masked=masked,
            dealloc=dealloc,
            sharpness=sharpness,
            mask_min=self.mask_min,
            interface_clip=self.interface_clip,
        )


@dataclass(frozen=True)
class MemoryTrainConfig:
    steps: int = 1000
    batch_size: int = 16  # A.2
    optimizer: str = "rmsprop"  # "rmsprop" | "adam"
    lr: float = 1e-4
    momentum: float = 0.9  # RMSprop only
    weight_decay: float = 1e-5  # not on the linear layers' biases (make_optimizer)
    grad_clip: float = 10.0  # max global gradient norm; 0 disables
    loss_on: str = "output_steps"  # "output_steps" | "all_steps"
    curriculum: Curriculum = field(default_factory=Curriculum)
    eval_every: int = 100
    eval_size: int = 64
    seed: int = 0
    threads: int = 1  # torch threads; 0 leaves the setting alone

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"unknown optimizer {self.optimizer!r}; valid choices: {', '.join(OPTIMIZERS)}")
        if self.loss_on not in LOSS_ON:
            raise UserError(f"unknown loss_on {self.loss_on!r}; valid choices: {', '.join(LOSS_ON)}")
        if min(self.steps, self.batch_size, self.eval_every, self.eval_size) < 1:
            raise UserError("steps, batch_size, eval_every and eval_size must be >= 1")
        if self.lr <= 0 or self.grad_clip < 0 or self.weight_decay < 0 or self.threads < 0:
            raise UserError("lr must be > 0; grad_clip, weight_decay and threads must be >= 0")


@dataclass
class BatchMetrics:
    loss: float  # summed BCE over the loss steps / batch size
    bit_error: float  # fraction of wrong answer bits
    sequence_accuracy: float  # fraction of sequences with every answer bit right


@dataclass
class MemoryTrainResult:
    model: DNC
    train_loss: np.ndarray  # [steps]
    eval_steps: np.ndarray  # [E] steps after which the fixed evaluation set was scored (0 = init)
    eval_loss: np.ndarray  # [E]
    eval_bit_error: np.ndarray  # [E]
    eval_sequence_accuracy: np.ndarray  # [E]
    seconds: float
    # where training ended (optimiser, RNGs), to continue the run to more steps; None for a run read back
    final_state: TrainingState | None = None
    # runs trained together as one batched model, this one included (experiments.dnc_ensemble_training)
    ensemble: int = 1


def build_sequence_dnc(task: MemoryTaskConfig, config: DNCSequenceConfig) -> DNC:
    return DNC(
        task.input_size, task.output_size, config.d_controller, config.memory_config(), config.compile_steps
    )


def model_inputs(bits: np.ndarray) -> torch.Tensor:
    """Task bits ``{0, 1}`` -> model inputs ``{-1, 1}`` (reference code)."""
    return torch.as_tensor(bits) * 2.0 - 1.0


def loss_weights(batch: MemoryTaskBatch, loss_on: str) -> torch.Tensor:
    """``[B, T]`` 0/1 weights of the steps that enter the loss."""
    if loss_on == "output_steps":
        return torch.as_tensor(batch.loss_mask, dtype=torch.float32)
    steps = torch.arange(batch.inputs.shape[1])
    return (steps[None] < torch.as_tensor(batch.lengths)[:, None]).float()


def batch_loss(logits: torch.Tensor, batch: MemoryTaskBatch, loss_on: str) -> torch.Tensor:
    targets = torch.as_tensor(batch.targets, dtype=logits.dtype)
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1)  # [B, T]
    return (bce * loss_weights(batch, loss_on).to(logits.dtype)).sum() / len(batch)


def wrong_answer_bits(logits: torch.Tensor, batch: MemoryTaskBatch) -> np.ndarray:
    """``[B, T, Y]``: the output bits that are wrong (thresholded at probability 1/2) on the answer steps
    (``loss_mask``); False elsewhere."""
    wrong = (logits > 0).cpu().numpy() != (batch.targets > 0.5)
    return wrong & batch.loss_mask[..., None]


def answer_metrics(logits: torch.Tensor, batch: MemoryTaskBatch) -> tuple[float, float]:
    """(bit error rate, sequence accuracy) on the answer steps (``loss_mask``)."""
    wrong = wrong_answer_bits(logits, batch)  # [B, T, Y]
    n_bits = batch.loss_mask.sum() * batch.targets.shape[-1]
    bit_error = float(wrong.sum() / max(n_bits, 1))
    sequence_accuracy = float((~wrong.any(axis=(1, 2))).mean())
    return bit_error, sequence_accuracy


@torch.no_grad()
def evaluate(model: DNC, batch: MemoryTaskBatch, loss_on: str = "output_steps") -> BatchMetrics:
    was_training = model.training
    model.eval()
    logits, _ = model(model_inputs(batch.inputs))
    model.train(was_training)
    bit_error, sequence_accuracy = answer_metrics(logits, batch)
    return BatchMetrics(float(batch_loss(logits, batch, loss_on)), bit_error, sequence_accuracy)


def make_optimizer(model: nn.Module, config: MemoryTrainConfig) -> torch.optim.Optimizer:
    # the LSTM controller's bias_ih / bias_hh are not named "bias" and are decayed; spared now, they would
    # change every stored run's training (docs/models/dnc.md, "The trainer")
    weights = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    groups = [{"params": weights}, {"params": biases, "weight_decay": 0.0}]
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            groups, lr=config.lr, momentum=config.momentum, eps=1e-10, weight_decay=config.weight_decay
        )
    return torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay)


def train_memory_task(
    task: MemoryTaskConfig,
    model_config: DNCSequenceConfig,
    train: MemoryTrainConfig,
    checkpoint: Path | None = None,
    continue_from: StoredState | None = None,
) -> MemoryTrainResult:
    """Train a fresh DNC on ``task``; deterministic given the configs (see the module docstring).

    With ``checkpoint``, the training state is written there at every evaluation and, if the file already
    holds one (a killed run of the same settings), training continues from it exactly
    (:mod:`recombine.experiments.dnc_trial_checkpoint`); the caller removes it when the run is kept.
    Otherwise (or if that checkpoint cannot be resumed) ``continue_from``, the final state of a shorter run of
    the same settings, is continued: nothing in the loop depends on ``train.steps`` (the curriculum counts
    its own steps), so the run ends with exactly the curves of one trained for ``train.steps`` from the
    start (the shorter run's last evaluation is dropped where it falls between two ``eval_every`` steps).
    A state that cannot be resumed is said on stderr in one line. The result's ``final_state`` is where
    training ended, for a later continuation."""
    if train.threads:
        torch.set_num_threads(train.threads)

    def fresh() -> tuple[DNC, torch.optim.Optimizer, np.random.Generator]:
        torch.manual_seed(train.seed)
        model = build_sequence_dnc(task, model_config)
        return model, make_optimizer(model, train), np.random.default_rng([train.seed, 0])

    eval_batch = sample_batch(task, train.eval_size, np.random.default_rng([train.seed, 1]))
    evaluations: list[tuple[int, float, float, float]] = []  # (step, loss, bit error, sequence accuracy)
    train_loss = np.zeros(train.steps)
    first_step, seconds_before = 0, 0.0

    def record(step: int) -> None:
        metrics = evaluate(model, eval_batch, train.loss_on)
        evaluations.append((step, metrics.loss, metrics.bit_error, metrics.sequence_accuracy))

    def state_at(step: int, seconds: float) -> TrainingState:  # copies: training goes on after it
        return TrainingState(
            step=step,
            model=copy.deepcopy(model.state_dict()),
            optimizer=copy.deepcopy(optimizer.state_dict()),
            batch_rng=train_rng.bit_generator.state,
            torch_rng=torch.get_rng_state(),
            train_loss=train_loss[:step].copy(),
            evaluations=list(evaluations),
            seconds=seconds,
        )

    resumed = resume_point(task, model_config, train, checkpoint, continue_from)
    model, optimizer, train_rng = fresh()
    if resumed is not None:
        model.load_state_dict(resumed.model)
        optimizer.load_state_dict(copy.deepcopy(resumed.optimizer))  # torch would keep its tensors
        train_rng.bit_generator.state = resumed.batch_rng
        torch.set_rng_state(resumed.torch_rng)
        first_step, seconds_before = resumed.step, resumed.seconds
        train_loss[:first_step] = resumed.train_loss
        evaluations.extend(evaluations_on_schedule(resumed, train))
    start = time.perf_counter() - seconds_before
    if first_step == 0:
        record(0)
    model.train()
    with training_bar(train.steps, f"{model_config.variant} seed {train.seed}", initial=first_step) as bar:
        bar.set_postfix_str(_evaluation_postfix(evaluations[-1]))
        for step in range(first_step, train.steps):
            batch = sample_batch(train.curriculum.config_at(task, step), train.batch_size, train_rng)
            logits, _ = model(model_inputs(batch.inputs))
            loss = batch_loss(logits, batch, train.loss_on)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if train.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            optimizer.step()
            train_loss[step] = loss.item()
            if (step + 1) % train.eval_every == 0 or step + 1 == train.steps:
                record(step + 1)
                bar.set_postfix_str(_evaluation_postfix(evaluations[-1]))
                if checkpoint is not None and step + 1 < train.steps:
                    save_training_state(checkpoint, state_at(step + 1, time.perf_counter() - start))
            bar.update()
    model.eval()
    seconds = time.perf_counter() - start
    steps, losses, bit_errors, accuracies = (np.array(column) for column in zip(*evaluations, strict=True))
    return MemoryTrainResult(
        model=model,
        train_loss=train_loss,
        eval_steps=steps.astype(int),
        eval_loss=losses,
        eval_bit_error=bit_errors,
        eval_sequence_accuracy=accuracies,
        seconds=seconds,
        final_state=state_at(train.steps, seconds),
    )


def resume_point(
    task: MemoryTaskConfig,
    model_config: DNCSequenceConfig,
    train: MemoryTrainConfig,
    checkpoint: Path | None = None,
    continue_from: StoredState | None = None,
) -> TrainingState | None:
    """The training state a run of these settings continues from: ``checkpoint``'s if the file holds one that
    loads into this run's model and optimiser, else ``continue_from``'s (a shorter kept run, said on stderr),
    else None (a fresh start; said on stderr when there was something to try). Each state that cannot be
    resumed is said on stderr in one line."""
    what = f"{model_config.variant} seed {train.seed}"
    sources: list[tuple[str, TrainingState | None]] = []  # tried in this order
    if checkpoint is not None and checkpoint.is_file():
        sources.append((f"{checkpoint}", load_training_state(checkpoint)))
    if continue_from is not None:
        sources.append(
            (f"the stored {continue_from.state.step}-step run {continue_from.path}", continue_from.state)
        )
    for source, resumed in sources:
        try:
            if (
                resumed is None
                or not 0 < resumed.step < train.steps
                or len(resumed.train_loss) != resumed.step
            ):
                raise ValueError("not a training state of this run")
            with torch.random.fork_rng():  # building the scratch model leaves the caller's RNG alone
                scratch = build_sequence_dnc(task, model_config)
            scratch.load_state_dict(resumed.model)
            make_optimizer(scratch, train).load_state_dict(copy.deepcopy(resumed.optimizer))
            np.random.default_rng().bit_generator.state = resumed.batch_rng
            torch.Generator().set_state(resumed.torch_rng)
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as error:
            print(f"{source} cannot be resumed ({first_line(error)})", file=sys.stderr, flush=True)
            continue
        if continue_from is not None and resumed is continue_from.state:
            print(
                f"{what}: continuing the stored {resumed.step}-step run to {train.steps} steps",
                file=sys.stderr,
            )
        return resumed
    if sources:
        print(f"training {what} from the start", file=sys.stderr, flush=True)
    return None


def evaluations_on_schedule(
    resumed: TrainingState, train: MemoryTrainConfig
) -> list[tuple[int, float, float, float]]:
    """A resumed state's evaluations that a run trained this long from the start also has: the runs continued
    agree on ``eval_every`` (it is in the key), so only a shorter run's last evaluation can lie off that
    schedule, and a run trained this long from the start has none there."""
    return [e for e in resumed.evaluations if e[0] % train.eval_every == 0]


def _evaluation_postfix(evaluation: tuple[int, float, float, float]) -> str:
    _, loss, bit_error, _ = evaluation
    return f"eval loss {loss:.3g}, bit error {bit_error:.3f}"


@torch.no_grad()
def trace_sequence(model: DNC, sequence: MemorySequence) -> MemoryTraceArrays:
    """Run ``model`` on one sequence with the memory trace on; the arrays include the bit maps."""
    batch = pad_batch([sequence])
    logits, trace = model(model_inputs(batch.inputs), return_trace=True)
    assert trace is not None
    return trace_arrays(
        trace,
        inputs=sequence.inputs,
        targets=sequence.targets,
        outputs=torch.sigmoid(logits[0]).numpy(),
    )


# --- thesis Fig. 2.3b at small scale ------------------------------------------------------------


def small_repeated_copy() -> RepeatedCopyConfig:
    """A CPU-sized long repeated copy: 2-4 copies of 1-4 words of 6 bits, always more than 6 words."""
    return RepeatedCopyConfig(width=6, length_range=(1, 4), repeats_range=(2, 4), exceed_memory=6)


def small_dnc(variant: str) -> DNCSequenceConfig:
    """A.2's copy-task DNC with the memory shrunk to 6 cells, below the task's total length."""
    return DNCSequenceConfig(variant=variant, d_controller=32, n_cells=6, cell_width=16, n_read_heads=1)


@dataclass(frozen=True)
class _RunToTrain:
    """One (variant, seed) run that is not kept yet, with where it may start from."""

    variant: str
    seed: int
    model: DNCSequenceConfig
    train: MemoryTrainConfig
    checkpoint: Path | None
    continue_from: StoredState | None


def train_variants(
    task: MemoryTaskConfig,
    model: DNCSequenceConfig,
    train: MemoryTrainConfig,
    variants: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path | None = None,
    jobs: int = 1,
    ensemble: int = 1,
) -> dict[str, list[MemoryTrainResult]]:
    """Train every variant with every seed, variant by variant; one progress line per finished run.

    With ``out_dir``, every finished run is kept (:class:`StoredTrials`) and a run already kept under the
    same settings is loaded instead of trained again: an interrupted reproduction resumes, and
    reproductions of different variants or seeds into one directory, one after the other, add up. A run
    interrupted midway continues from its last evaluation (:meth:`StoredTrials.partial_path`), and a run
    whose settings differ from a kept run's only in more ``steps`` continues that run
    (:meth:`StoredTrials.shorter_run`). With ``jobs > 1``, up to ``jobs`` runs train at once, each in a
    process of its own (:func:`_train_runs`); this process alone writes the store, as runs finish. With
    ``ensemble > 1``, up to ``ensemble`` seeds of one variant train together as one batched model
    (:mod:`recombine.experiments.dnc_ensemble_training`), a group counting as one job."""
    store = StoredTrials(out_dir) if out_dir is not None else None
    results: dict[str, dict[int, MemoryTrainResult]] = {variant: {} for variant in variants}
    total, done = len(variants) * len(seeds), 0

    def finished(variant: str, seed: int, result: MemoryTrainResult, headline: str) -> None:
        nonlocal done
        results[variant][seed] = result
        done += 1
        trial_done(done, total, f"{variant} seed {seed}", result.seconds, headline, steps=train.steps)

    to_train: list[_RunToTrain] = []
    for variant in variants:
        for seed in seeds:
            variant_model = dataclasses.replace(model, variant=variant)
            seed_train = dataclasses.replace(train, seed=seed)
            if store is None:
                to_train.append(_RunToTrain(variant, seed, variant_model, seed_train, None, None))
            elif (stored := store.load(task, variant_model, seed_train)) is not None:
                # a kill between keeping the run and removing its checkpoint leaves the checkpoint
                store.partial_path(task, variant_model, seed_train).unlink(missing_ok=True)
                finished(variant, seed, stored, f"stored run from {store.log.path}")
            else:
                partial, shorter = store.partial_path(task, variant_model, seed_train), None
                if load_training_state(partial) is None:  # none, or unreadable: a shorter run may do
                    shorter = store.shorter_run(task, variant_model, seed_train)
                to_train.append(_RunToTrain(variant, seed, variant_model, seed_train, partial, shorter))
    for run, result in _train_runs(task, to_train, jobs, ensemble):
        if store is not None and run.checkpoint is not None:
            store.save(task, run.model, run.train, result)
            run.checkpoint.unlink(missing_ok=True)
        finished(run.variant, run.seed, result, f"final eval loss {result.eval_loss[-1]:.3g}")
    return {variant: [results[variant][seed] for seed in seeds] for variant in variants}


def _train_runs(
    task: MemoryTaskConfig, runs: list[_RunToTrain], jobs: int, ensemble: int = 1
) -> Iterator[tuple[_RunToTrain, MemoryTrainResult]]:
    """Train ``runs``, yielding each with its result as it finishes. The runs are grouped into ensembles of
    up to ``ensemble`` seeds of one variant (:func:`_ensembles`; 1: each run alone); the groups train one
    after another, or with ``jobs > 1`` up to ``jobs`` at once in fresh ("spawn") processes, whose progress
    goes to stderr as lines. Each group sets its own thread count (``train.threads``) and seeds, so it trains
    as it would alone. If a group fails or this process is interrupted, the groups not started are cancelled
    and the workers stopped; their checkpoints let the next start resume the runs they were training."""
    groups = _ensembles(runs, ensemble)
    if jobs <= 1 or len(groups) <= 1:
        for group in groups:
            yield from zip(group, _train_group(task, group), strict=True)
        return
    context = multiprocessing.get_context("spawn")  # no fork of a process with torch's thread pools
    n_workers = min(jobs, len(groups))
    with ProcessPoolExecutor(
        n_workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
    ) as pool:
        futures = {pool.submit(_train_group, task, group): group for group in groups}
        try:
            for future in as_completed(futures):
                group = futures[future]
                yield from zip(group, future.result(), strict=True)
        except BaseException:  # Ctrl-C or a failed run: the runs still training would hold up the exit
            _stop_workers(pool)
            raise


def _start_worker(parent: int) -> None:
    """Initializer of a training worker: progress as lines, and no life beyond the parent's."""
    progress_as_lines()
    end_with_parent(parent)


def _ensembles(runs: list[_RunToTrain], size: int) -> list[list[_RunToTrain]]:
    """``runs`` in groups of up to ``size`` runs of one variant, in order."""
    groups: list[list[_RunToTrain]] = []
    for run in runs:
        if groups and len(groups[-1]) < size and groups[-1][0].model == run.model:
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


def _train_group(task: MemoryTaskConfig, group: list[_RunToTrain]) -> list[MemoryTrainResult]:
    """One run alone (:func:`train_memory_task`) or several seeds as one ensemble."""
    if len(group) == 1:
        (run,) = group
        return [train_memory_task(task, run.model, run.train, run.checkpoint, run.continue_from)]
    # not at the top: the ensemble trainer builds on this module's single-run pieces
    from recombine.experiments.dnc_ensemble_training import train_memory_ensemble

    return train_memory_ensemble(
        task,
        group[0].model,
        [run.train for run in group],
        [run.checkpoint for run in group],
        [run.continue_from for run in group],
    )


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the runs not started and terminate ``pool``'s worker processes (their runs resume from their
    checkpoints). Python 3.14 has ``terminate_workers``; before it, the executor's process table is the only
    handle on them, and ``shutdown`` empties it, so it is read first."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


#: the memory-task config classes by the name a stored run's key gives them
_TASK_CLASSES_BY_NAME = {cls.__name__: cls for cls in MEMORY_TASKS.values()}


class UnreadableStoredRun(Exception):
    """A stored run's file is missing or cannot be read."""


class StoredTrials:
    """The finished runs of a DNC reproduction in ``out_dir``: ``trials.jsonl`` (one line per run,
    :class:`~recombine.experiments.block_architecture_grid.TrialLog`) names a file under ``trials/``
    with the trained weights and the curves.

    A run's key holds :data:`STORE_VERSION` and every task, model and training setting but
    ``compile_steps`` and ``threads``: those change neither the model nor the arithmetic, only its float
    rounding, which a run near chance can amplify, so a run read back need not equal a fresh one to the
    last digit. Its line records them, with the torch version. A stored file that is missing or cannot
    be read is reported and the run trained again. One process writes a directory: runs side by side are
    trained by :func:`train_variants` with ``jobs`` (``--jobs``), whose parent process alone keeps them."""

    def __init__(self, out_dir: Path) -> None:
        # not at the top: block_architecture_grid imports the experiments package
        from recombine.experiments.block_architecture_grid import TRIALS_FILE, TrialLog

        self.out_dir = out_dir
        self.log = TrialLog(out_dir / TRIALS_FILE)

    @staticmethod
    def key(task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig) -> str:
        from recombine.experiments.block_architecture_grid import trial_key

        model_settings = dataclasses.asdict(model)
        model_settings.pop("compile_steps")
        train_settings = dataclasses.asdict(train)
        train_settings.pop("threads")
        task_settings = {"kind": type(task).__name__, **dataclasses.asdict(task)}
        settings = {"task": task_settings, "model": model_settings, "train": train_settings}
        return trial_key({"version": STORE_VERSION, **settings})

    @staticmethod
    def settings_from_key(key: str) -> tuple[MemoryTaskConfig, DNCSequenceConfig, MemoryTrainConfig] | None:
        """The configs a :meth:`key` was made from (``compile_steps`` and ``threads`` at their defaults), or
        None for a key of another store version or kind of trial, or one these configs cannot hold (a field
        renamed or removed since the run was kept)."""
        try:
            settings = json.loads(key)
            if settings.get("version") != STORE_VERSION or not {"task", "model", "train"} <= settings.keys():
                return None
            task_settings = dict(settings["task"])
            task_class = _TASK_CLASSES_BY_NAME.get(task_settings.pop("kind"))
            if task_class is None:
                return None
            # JSON gives the (low, high) ranges back as lists; the task configs hold no other sequences
            task = task_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in task_settings.items()})
            train_settings = dict(settings["train"])
            train_settings["curriculum"] = Curriculum(**train_settings["curriculum"])
            return task, DNCSequenceConfig(**settings["model"]), MemoryTrainConfig(**train_settings)
        # no JSON (JSONDecodeError is a ValueError), missing entries, fields the configs no longer have
        except (ValueError, TypeError, KeyError, AttributeError, UserError):
            return None

    def finished(self) -> list[tuple[MemoryTaskConfig, DNCSequenceConfig, MemoryTrainConfig]]:
        """The settings of every finished run recorded here (of this store version), in the log's order."""
        runs = (self.settings_from_key(key) for key in self.log.finished())
        return [run for run in runs if run is not None]

    def load(
        self, task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig
    ) -> MemoryTrainResult | None:
        """The stored run of these settings, or None: none stored, or its file unreadable (said on stderr)."""
        try:
            return self.read(task, model, train)
        except UnreadableStoredRun as error:
            what = f"{model.variant} seed {train.seed}"
            print(f"{error}; training {what} again", file=sys.stderr, flush=True)
            return None

    def read(
        self, task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig
    ) -> MemoryTrainResult | None:
        """The stored run of these settings, or None if none is stored; :class:`UnreadableStoredRun` if its
        file cannot be read."""
        record = self.log.finished().get(self.key(task, model, train))
        if record is None:
            return None
        path = self.out_dir / record["file"]
        try:
            stored = torch.load(path, weights_only=True)
            dnc = build_sequence_dnc(task, model)
            dnc.load_state_dict(stored["state_dict"])
            curves = {name: stored[name].numpy() for name in _CURVES}
        except UNREADABLE_STATE_ERRORS as error:
            raise UnreadableStoredRun(f"{path} cannot be read ({first_line(error)})") from error
        dnc.eval()
        seconds, ensemble = float(record["seconds"]), int(record.get("ensemble", 1))
        return MemoryTrainResult(model=dnc, seconds=seconds, ensemble=ensemble, **curves)

    def shorter_run(
        self, task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig
    ) -> StoredState | None:
        """Where the longest kept run of these settings but fewer ``steps`` ended, to continue it to
        ``train.steps`` (:func:`train_memory_task`'s ``continue_from``); None when there is none. A kept run
        without its final state (stored before runs kept it) or with an unreadable file is said on stderr
        in one line and skipped."""
        wanted = self.key(task, model, train)
        shorter_steps = sorted(
            {
                kept.steps
                for kept_task, kept_model, kept in self.finished()
                if kept.steps < train.steps
                and self.key(kept_task, kept_model, dataclasses.replace(kept, steps=train.steps)) == wanted
            },
            reverse=True,
        )
        for steps in shorter_steps:
            record = self.log.finished()[self.key(task, model, dataclasses.replace(train, steps=steps))]
            path = self.out_dir / record["file"]
            try:
                stored = torch.load(path, weights_only=True)
                if "training_state" not in stored:
                    reason = "was kept without its training state"
                else:
                    return StoredState(path, training_state_from_payload(stored["training_state"]))
            except UNREADABLE_STATE_ERRORS as error:
                reason = f"cannot be read ({first_line(error)})"
            print(f"the {steps}-step run in {path} {reason}; it cannot be continued", file=sys.stderr)
        return None

    def run_name(self, task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig) -> str:
        """``<variant>-seed<S>-<digest>``: the stem of the run's weights file (and of its checkpoint)."""
        digest = hashlib.sha256(self.key(task, model, train).encode()).hexdigest()[:10]
        return f"{model.variant}-seed{train.seed}-{digest}"

    def partial_path(
        self, task: MemoryTaskConfig, model: DNCSequenceConfig, train: MemoryTrainConfig
    ) -> Path:
        """Where the unfinished run of these settings keeps its training state
        (:mod:`recombine.experiments.dnc_trial_checkpoint`)."""
        return self.out_dir / "trials" / "partial" / f"{self.run_name(task, model, train)}.pt"

    def save(
        self,
        task: MemoryTaskConfig,
        model: DNCSequenceConfig,
        train: MemoryTrainConfig,
        result: MemoryTrainResult,
    ) -> None:
        """Keep ``result``; a run trained in an ensemble (``result.ensemble > 1``) records its size, and its
        ``seconds`` are the ensemble's."""
        key = self.key(task, model, train)
        name = f"trials/{self.run_name(task, model, train)}.pt"
        path = self.out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        stored: dict[str, Any] = {"state_dict": result.model.state_dict()}
        stored.update({curve: torch.from_numpy(getattr(result, curve)) for curve in _CURVES})
        if result.final_state is not None:  # lets a later reproduction with more steps continue this run
            stored["training_state"] = training_state_payload(result.final_state)
        atomic_write_bytes(path, lambda f: torch.save(stored, f))  # complete before trials.jsonl names it
        record = {
            "file": name,
            "seconds": result.seconds,
            "compile_steps": model.compile_steps,
            "threads": train.threads,
            "torch": torch.__version__,
        }
        if result.ensemble > 1:
            record["ensemble"] = result.ensemble
        self.log.add(key, record)


#: part of every stored run's key: bump it when a change to the DNC, the tasks or the training loop
#: changes what the same settings train, so that runs stored before are trained again
STORE_VERSION = 1

#: the arrays of a MemoryTrainResult a stored trial keeps
_CURVES = ("train_loss", "eval_steps", "eval_loss", "eval_bit_error", "eval_sequence_accuracy")


@dataclass
class VariantComparison:
    results: dict[str, list[MemoryTrainResult]]  # variant -> one result per seed
    loss_curve_figure: Path | None
    trace_figures: dict[str, Path]
    link_comparison_figure: Path | None

    def summary(self) -> dict[str, dict[str, float]]:
        """Per variant, over seeds: mean final eval loss, bit error and sequence accuracy, mean
        training loss of the last 10% of steps, and seconds per run."""
        rows = {}
        for variant, runs in self.results.items():
            tail = max(1, len(runs[0].train_loss) // 10)
            rows[variant] = {
                "final_eval_loss": float(np.mean([r.eval_loss[-1] for r in runs])),
                "final_bit_error": float(np.mean([r.eval_bit_error[-1] for r in runs])),
                "final_sequence_accuracy": float(np.mean([r.eval_sequence_accuracy[-1] for r in runs])),
                "last_train_loss": float(np.mean([r.train_loss[-tail:].mean() for r in runs])),
                "seconds": float(np.mean([r.seconds for r in runs])),
            }
        return rows


def compare_on_repeated_copy(
    variants: tuple[str, ...] = ("dnc", "dnc_ds", "dnc_mds"),
    seeds: tuple[int, ...] = (0,),
    task: RepeatedCopyConfig | None = None,
    model: DNCSequenceConfig | None = None,
    train: MemoryTrainConfig | None = None,
    out_dir: str | Path | None = None,
) -> VariantComparison:
    """Train every variant on the same task and seeds (thesis Fig. 2.3b); with ``out_dir``, write
    ``repeated_copy_loss.png`` (mean training loss, smoothed, with min-max over seeds), one
    ``trace_<variant>.png`` per variant (first seed, one evaluation sequence: Figs. 2.3a / 2.4) and
    ``links.png`` (forward links and read modes side by side: Fig. 2.4)."""
    task = task or small_repeated_copy()
    base_model = model or small_dnc("dnc")
    train = train or MemoryTrainConfig(steps=800, optimizer="adam", lr=1e-3, eval_every=100)
    for variant in variants:
        if variant not in VARIANTS:
            raise UserError(f"unknown DNC variant {variant!r}; {choices_hint(variant, VARIANTS)}")
    results = train_variants(task, base_model, train, variants, seeds)
    comparison = VariantComparison(results, None, {}, None)
    if out_dir is None:
        return comparison
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comparison.loss_curve_figure = save_loss_curves(results, out / "repeated_copy_loss.png")
    sequence = evaluation_sequence(task, train.seed)
    traces = {}
    for variant, runs in results.items():
        traces[variant] = trace_sequence(runs[0].model, sequence)
        comparison.trace_figures[variant] = save_memory_trace(
            traces[variant], out / f"trace_{variant}.png", title=f"{variant} on repeated copy"
        )
    comparison.link_comparison_figure = save_link_comparison(traces, out / "links.png")
    return comparison


def evaluation_sequence(task: MemoryTaskConfig, seed: int, index: int = 0) -> MemorySequence:
    """Sequence ``index`` of the fixed evaluation set of ``seed``, as :func:`train_memory_task` draws it."""
    if index < 0:
        raise UserError(f"the evaluation sequence index must be >= 0; got {index}")
    rng = np.random.default_rng([seed, 1])
    for _ in range(index):
        sample_sequence(task, rng)
    return sample_sequence(task, rng)


def save_loss_curves(results: dict[str, list[MemoryTrainResult]], path: str | Path, smooth: int = 20) -> Path:
    """Training loss per step (moving average over ``smooth`` steps), mean over seeds with the min-max
    band, one line per variant (thesis Fig. 2.3b)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for variant, runs in results.items():
        curves = np.stack([r.train_loss for r in runs])
        width = max(1, min(smooth, curves.shape[1]))
        kernel = np.ones(width) / width
        smoothed = np.stack([np.convolve(c, kernel, mode="valid") for c in curves])
        steps = np.arange(width, curves.shape[1] + 1)
        ax.plot(steps, smoothed.mean(0), label=f"{variant} ({len(runs)} seeds)")
        if len(runs) > 1:
            ax.fill_between(steps, smoothed.min(0), smoothed.max(0), alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (BCE per sequence)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the scripted reproductions `dnc-repeat-copy` and `dnc-assoc-recall` ------------------------


def steps_to_threshold(train_loss: np.ndarray, threshold: float, smooth: int) -> int | None:
    """The first step after which the moving average of the training loss over the last ``smooth``
    steps is below ``threshold``; ``None`` if it never is."""
    if len(train_loss) < smooth:  # no full window: the report's "smooth-step average" never exists
        return None
    width = max(1, smooth)
    averages = np.convolve(
        train_loss, np.ones(width) / width, mode="valid"
    )  # averages[i] ends at step i+width
    below = np.flatnonzero(averages < threshold)
    return int(below[0] + width) if len(below) else None


@dataclass
class DNCComparisonConfig:
    """What every DNC-variant comparison shares: the seeds and variants, the memory, the optimiser and the
    convergence threshold. :class:`DNCRepeatCopyConfig` and :class:`DNCAssocRecallConfig` add their task's
    fields and change some defaults."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    variants: list[str] = field(default_factory=lambda: ["dnc"])
    width: int = 6  # bits per word
    n_cells: int = 16
    cell_width: int = 16
    d_controller: int = 64
    n_read_heads: int = 1
    steps: int = 2000
    batch_size: int = 16
    optimizer: str = "adam"
    lr: float = 1e-3
    eval_every: int = 100
    eval_size: int = 64
    threshold_fraction: float = 0.2  # loss threshold = this x the chance loss (answer bits x ln 2)
    smooth: int = 50  # moving-average window of the training loss (threshold and figure)
    threads: int = 1
    # torch.compile each time step (same numbers up to float rounding): on in the reproductions' defaults,
    # where it is several times faster after 30-50 s of compiling per batch size
    # (benchmarks/results/dnc_compile.json); off for --quick, where compiling would dominate
    compile_steps: bool = False
    jobs: int = 1  # runs trained at once, each in a process of its own with `threads` threads
    # seeds of one variant trained together as one batched model (experiments.dnc_ensemble_training): each
    # member trains as alone up to float rounding, for little more than one run's time per step
    ensemble: int = 1

    def __post_init__(self) -> None:
        _check_variants(self.variants)
        if not self.seeds:
            raise UserError("need at least one seed")
        if self.jobs < 1:
            raise UserError(f"jobs must be >= 1; got {self.jobs}")
        if self.ensemble < 1:
            raise UserError(f"ensemble must be >= 1; got {self.ensemble}")
        for name in ("seeds", "variants"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise UserError(f"{name} must not repeat; got {values}")
        if not 0.0 < self.threshold_fraction < 1.0 or self.smooth < 1:
            raise UserError("threshold_fraction must be in (0, 1) and smooth >= 1")
        self.task()  # validates the task fields

    def task(self) -> MemoryTaskConfig:
        raise NotImplementedError

    def report_header(self) -> tuple[str, str, str]:
        """The report's title, its line on the task and the thesis's claim."""
        raise NotImplementedError


@dataclass
class DNCRepeatCopyConfig(DNCComparisonConfig):
    """``dnc-repeat-copy``: DNC vs DNC-DS vs DNC-MDS on repeated copy longer than the memory (thesis
    Figs. 2.3-2.4), at a CPU scale: ``min_repeats..max_repeats`` copies of ``min_length..max_length``
    words of ``width`` bits, always more words than ``n_cells``."""

    variants: list[str] = field(default_factory=lambda: ["dnc", "dnc_ds", "dnc_mds"])
    n_cells: int = 6
    d_controller: int = 32
    steps: int = 1000
    threshold_fraction: float = 0.1
    min_length: int = 1
    max_length: int = 4
    min_repeats: int = 2
    max_repeats: int = 4

    def task(self) -> RepeatedCopyConfig:
        return RepeatedCopyConfig(
            width=self.width,
            length_range=(self.min_length, self.max_length),
            repeats_range=(self.min_repeats, self.max_repeats),
            exceed_memory=self.n_cells,
        )

    def report_header(self) -> tuple[str, str, str]:
        return (
            "# DNC vs DNC-DS vs DNC-MDS on long repeated copy (thesis 2.3, Figs. 2.3-2.4)",
            f"Repeated copy: {self.min_repeats}-{self.max_repeats} copies of {self.min_length}-"
            f"{self.max_length} words of {self.width} bits, always more than {self.n_cells} words in total, "
            f"on a memory of {self.n_cells} cells: the memory must be freed and reused.",
            "Thesis: DNC-DS/MDS reach a near-zero loss quickly and solve the long task, the DNC stays blurry "
            "(Fig. 2.3); masking adds little here.",
        )


@dataclass
class DNCAssocRecallConfig(DNCComparisonConfig):
    """``dnc-assoc-recall``: DNC vs DNC-M on associative recall (thesis Fig. 2.2a: masking speeds up
    convergence), at a CPU scale: ``min_blocks..max_blocks`` blocks of ``block_words`` words of
    ``width`` bits."""

    variants: list[str] = field(default_factory=lambda: ["dnc", "dnc_m"])
    block_words: int = 2
    min_blocks: int = 2
    max_blocks: int = 4

    def task(self) -> AssociativeRecallConfig:
        return AssociativeRecallConfig(
            width=self.width, block_words=self.block_words, blocks_range=(self.min_blocks, self.max_blocks)
        )

    def report_header(self) -> tuple[str, str, str]:
        return (
            "# Masking speeds up associative recall: DNC vs DNC-M (thesis 2.3, Fig. 2.2a)",
            f"Associative recall: {self.min_blocks}-{self.max_blocks} blocks of {self.block_words} words of "
            f"{self.width} bits, then a query block; answer: the block that followed it.",
            "Thesis: the models with masking converge faster (Fig. 2.2a, 12 seeds per model).",
        )


ReproductionConfig = DNCComparisonConfig


def _check_variants(variants: list[str]) -> None:
    if not variants:
        raise UserError(f"need at least one variant; valid choices: {', '.join(VARIANTS)}")
    for variant in variants:
        if variant not in VARIANTS:
            raise UserError(f"unknown DNC variant {variant!r}; {choices_hint(variant, VARIANTS)}")


def model_and_train_configs(config: ReproductionConfig) -> tuple[DNCSequenceConfig, MemoryTrainConfig]:
    """The model and training settings of ``config``'s runs (variant and seed still to be set per run)."""
    model = DNCSequenceConfig(
        variant=config.variants[0],
        d_controller=config.d_controller,
        n_cells=config.n_cells,
        cell_width=config.cell_width,
        n_read_heads=config.n_read_heads,
        compile_steps=config.compile_steps,
    )
    train = MemoryTrainConfig(
        steps=config.steps,
        batch_size=config.batch_size,
        optimizer=config.optimizer,
        lr=config.lr,
        eval_every=config.eval_every,
        eval_size=config.eval_size,
        threads=config.threads,
    )
    return model, train


def chance_loss(task: MemoryTaskConfig, seed: int = 0, n: int = 256) -> float:
    """Mean number of answer bits per sequence times ``ln 2``: the loss of always predicting 1/2."""
    batch = sample_batch(task, n, np.random.default_rng([seed, 2]))
    return float(batch.loss_mask.sum() * task.output_size / n * np.log(2.0))


@dataclass
class DNCReproductionResult:
    config: ReproductionConfig
    comparison: VariantComparison
    threshold: float
    steps_to_threshold: dict[str, list[int | None]]  # variant -> per seed
    report: Path
    results: Path


def run_dnc_repeat_copy(
    out_dir: str | Path, config: DNCRepeatCopyConfig | None = None
) -> DNCReproductionResult:
    """Train every variant on every seed; write ``report.md``, ``results.json``, the loss curves
    (Fig. 2.3b), one memory trace per variant and the link comparison (Figs. 2.3a, 2.4)."""
    config = config or DNCRepeatCopyConfig()
    return run_variant_comparison(out_dir, config, "repeat copy", with_links=True)


def run_dnc_assoc_recall(
    out_dir: str | Path, config: DNCAssocRecallConfig | None = None
) -> DNCReproductionResult:
    """Train every variant on every seed; write ``report.md``, ``results.json``, the loss curves
    (Fig. 2.2a) and one memory trace per variant."""
    config = config or DNCAssocRecallConfig()
    return run_variant_comparison(out_dir, config, "associative recall", with_links=False)


def run_variant_comparison(
    out_dir: str | Path, config: ReproductionConfig, task_name: str, with_links: bool
) -> DNCReproductionResult:
    """Train ``config``'s variants on its task over its seeds (:func:`train_variants`) and write
    ``report.md``, ``results.json``, the loss curves, a memory trace per variant on the first seed's first
    evaluation sequence and, ``with_links``, the link comparison."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = config.task()
    model, train = model_and_train_configs(config)
    results = train_variants(
        task, model, train, config.variants, config.seeds, out, jobs=config.jobs, ensemble=config.ensemble
    )
    comparison = VariantComparison(results, None, {}, None)
    stem = task_name.replace(" ", "_")
    comparison.loss_curve_figure = save_loss_curves(results, out / f"{stem}_loss.png", smooth=config.smooth)
    sequence = evaluation_sequence(task, config.seeds[0])
    traces = {v: trace_sequence(runs[0].model, sequence) for v, runs in results.items()}
    for variant, arrays in traces.items():
        comparison.trace_figures[variant] = save_memory_trace(
            arrays, out / f"trace_{variant}.png", title=f"{variant} on {task_name} (seed {config.seeds[0]})"
        )
    if with_links:
        comparison.link_comparison_figure = save_link_comparison(traces, out / "links.png")
    threshold = config.threshold_fraction * chance_loss(task)
    reached = {
        v: [steps_to_threshold(r.train_loss, threshold, config.smooth) for r in runs]
        for v, runs in results.items()
    }
    results_path = out / "results.json"
    results_path.write_text(json.dumps(_results_json(config, comparison, threshold, reached), indent=2))
    figures = [p.name for p in [comparison.loss_curve_figure, comparison.link_comparison_figure] if p]
    figures += [p.name for p in comparison.trace_figures.values()]
    report = out / "report.md"
    report.write_text(render_dnc_report(config, task_name, comparison, threshold, reached, figures))
    return DNCReproductionResult(config, comparison, threshold, reached, report, results_path)


def _results_json(
    config: ReproductionConfig,
    comparison: VariantComparison,
    threshold: float,
    reached: dict[str, list[int | None]],
) -> dict[str, object]:
    runs = {
        variant: [
            {
                "seed": seed,
                "seconds": r.seconds,
                "steps_to_threshold": steps,
                "train_loss": r.train_loss.tolist(),
                "eval_steps": r.eval_steps.tolist(),
                "eval_loss": r.eval_loss.tolist(),
                "eval_bit_error": r.eval_bit_error.tolist(),
                "eval_sequence_accuracy": r.eval_sequence_accuracy.tolist(),
                "exact_at_end": exact_at_end(r),
            }
            for seed, r, steps in zip(config.seeds, results, reached[variant], strict=True)
        ]
        for variant, results in comparison.results.items()
    }
    return {
        "config": dataclasses.asdict(config),
        "loss_threshold": threshold,
        "summary": comparison.summary(),
        "runs": runs,
    }


def exact_at_end(run: MemoryTrainResult) -> bool:
    """Whether the run's last evaluation got every sequence right, bit for bit (thesis 2.3: "zero error").
    A run can pass the training-loss threshold and still blur a few bits of most sequences; this is the
    stricter measure that tells a solved run from a nearly solved one."""
    return bool(run.eval_sequence_accuracy[-1] == 1.0)


def render_dnc_report(
    config: ReproductionConfig,
    task_name: str,
    comparison: VariantComparison,
    threshold: float,
    reached: dict[str, list[int | None]],
    figures: list[str],
) -> str:
    title, task_line, paper = config.report_header()
    lines = [
        title,
        "",
        task_line,
        f"Model: LSTM controller {config.d_controller}, {config.n_cells} cells of width {config.cell_width}, "
        f"{config.n_read_heads} read head(s). {config.optimizer} lr {config.lr}, batch {config.batch_size}, "
        f"{config.steps} steps; seeds {config.seeds}. Loss: BCE summed over answer bits, per sequence.",
        "",
        paper,
        "",
        f"Steps to threshold: first step after which the {config.smooth}-step moving average of the training "
        f"loss is below {threshold:.3f} ({config.threshold_fraction:g} x the chance loss); '-' = never. "
        f"Exact at the end: the seed's last evaluation copies all {config.eval_size} sequences without a "
        "wrong bit (the thesis's zero error).",
        "",
        "| variant | final eval loss | final bit error | final sequence acc. | steps to threshold (per seed) "
        "| seeds reaching it | seeds exact at the end | s / run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = comparison.summary()
    for variant, runs in comparison.results.items():
        row = summary[variant]
        losses = [r.eval_loss[-1] for r in runs]
        bit_errors = [r.eval_bit_error[-1] for r in runs]
        accuracies = [r.eval_sequence_accuracy[-1] for r in runs]
        steps = ", ".join("-" if s is None else str(s) for s in reached[variant])
        n_reached = sum(s is not None for s in reached[variant])
        n_exact = sum(exact_at_end(r) for r in runs)
        lines.append(
            f"| {variant} | {np.mean(losses):.3f} ± {np.std(losses):.3f} | {np.mean(bit_errors):.4f} ± "
            f"{np.std(bit_errors):.4f} | {np.mean(accuracies):.3f} ± {np.std(accuracies):.3f} | {steps} | "
            f"{n_reached}/{len(runs)} | {n_exact}/{len(runs)} | {row['seconds']:.0f} |"
        )
    lines += [
        "",
        "Evaluation: a fixed set of "
        f"{config.eval_size} sequences per seed, scored on the answer steps (mean ± std over seeds).",
        *(
            [
                "Runs marked in `trials.jsonl` with an `ensemble` size trained with other seeds of their "
                "variant as one batched model: their s / run is the ensemble's time, shared by its runs."
            ]
            if any(run.ensemble > 1 for runs in comparison.results.values() for run in runs)
            else []
        ),
        "",
        *[f"![{name}]({name})" for name in figures],
        "",
    ]
    return "\n".join(lines)


#: the DNC reproductions' --quick (a pipeline check, no compiling) and their published runs' settings
DNC_REPRODUCTION_QUICK = {
    "steps": 40,
    "eval_every": 20,
    "eval_size": 16,
    "smooth": 10,
    "compile_steps": False,
}
DNC_REPRODUCTION_DEFAULTS = {"compile_steps": True}
DNC_REPEAT_COPY = ScriptedReproduction(
    "dnc-repeat-copy",
    "DNC vs DNC-DS vs DNC-MDS on repeated copy longer than the memory (thesis Figs. 2.3-2.4)",
    "Csordás thesis 2.3, Figs. 2.3-2.4",
    DNCRepeatCopyConfig,
    run_dnc_repeat_copy,
    defaults=DNC_REPRODUCTION_DEFAULTS,
    quick=DNC_REPRODUCTION_QUICK,
)
DNC_ASSOC_RECALL = ScriptedReproduction(
    "dnc-assoc-recall",
    "masking speeds up associative recall: DNC vs DNC-M (thesis Fig. 2.2a)",
    "Csordás thesis 2.3, Fig. 2.2a",
    DNCAssocRecallConfig,
    run_dnc_assoc_recall,
    defaults=DNC_REPRODUCTION_DEFAULTS,
    quick=DNC_REPRODUCTION_QUICK,
)
