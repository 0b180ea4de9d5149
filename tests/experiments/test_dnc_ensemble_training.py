"""Seeds of one DNC configuration trained as one ensemble (``ensemble=N``): each member follows the run it
would train alone, its checkpoints are single-run checkpoints (in both directions), and reproductions keep
ensemble-trained runs like any other."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.experiments.dnc_ensemble_training import concatenate_batches, train_memory_ensemble
from recombine.experiments.dnc_memory import (
    DNCRepeatCopyConfig,
    MemoryTrainConfig,
    MemoryTrainResult,
    run_dnc_repeat_copy,
    small_dnc,
    small_repeated_copy,
    train_memory_task,
)
from recombine.experiments.dnc_trial_checkpoint import load_training_state
from recombine.tasks.memory_tasks import sample_batch
from tiny_dnc import TINY_DNC_REPRODUCTION

TASK = small_repeated_copy()
# a clip low enough to act on every step, so that a clip over the whole ensemble would show
TRAIN = MemoryTrainConfig(
    steps=6, eval_every=3, eval_size=6, batch_size=4, optimizer="adam", lr=1e-2, grad_clip=0.5
)


def assert_same_run(ensemble: MemoryTrainResult, alone: MemoryTrainResult, lr: float = TRAIN.lr) -> None:
    np.testing.assert_allclose(ensemble.train_loss, alone.train_loss, rtol=1e-5)
    np.testing.assert_array_equal(ensemble.eval_steps, alone.eval_steps)
    for curve in ("eval_loss", "eval_bit_error", "eval_sequence_accuracy"):
        np.testing.assert_allclose(getattr(ensemble, curve), getattr(alone, curve), rtol=1e-5, atol=1e-6)
    # Adam and RMSprop move a weight of a near-zero gradient by ~lr per step whatever its rounding, so a
    # rounding difference that flips such a gradient's sign (batched and single matrix products round
    # differently, by CPU) shows as a few lr in that weight; the curves above pin every member's run
    atol = 5 * lr
    for name, tensor in alone.model.state_dict().items():
        torch.testing.assert_close(ensemble.model.state_dict()[name], tensor, rtol=1e-3, atol=atol)


@pytest.mark.parametrize(
    ("variant", "optimizer", "lr"), [("dnc", "adam", 1e-2), ("dnc_mds", "rmsprop", 1e-3)]
)
def test_each_member_trains_as_it_would_alone(variant: str, optimizer: str, lr: float) -> None:
    trains = [dataclasses.replace(TRAIN, seed=seed, optimizer=optimizer, lr=lr) for seed in (0, 1, 2)]
    results = train_memory_ensemble(TASK, small_dnc(variant), trains)
    for train, result in zip(trains, results, strict=True):
        assert_same_run(result, train_memory_task(TASK, small_dnc(variant), train), lr)
    # the seeds differ: members are not copies of one another
    assert not np.allclose(results[0].train_loss, results[1].train_loss)
    assert [result.ensemble for result in results] == [3, 3, 3]


def test_batches_of_different_lengths_are_padded_without_loss_weight() -> None:
    rng = np.random.default_rng(0)
    batches = [sample_batch(TASK, 2, rng) for _ in range(4)]
    lengths = {b.inputs.shape[1] for b in batches}
    assert len(lengths) > 1  # the test needs members of different lengths
    joined = concatenate_batches(batches)
    assert joined.inputs.shape[1] == max(lengths)
    for i, batch in enumerate(batches):
        rows = slice(2 * i, 2 * i + 2)
        steps = batch.inputs.shape[1]
        np.testing.assert_array_equal(joined.inputs[rows, :steps], batch.inputs)
        np.testing.assert_array_equal(joined.loss_mask[rows, :steps], batch.loss_mask)
        assert not joined.loss_mask[rows, steps:].any()


def test_an_ensemble_checkpoint_resumes_as_a_single_run_and_back(tmp_path: Path) -> None:
    """Members write single-run checkpoints: the one left at step 3 of a 6-step ensemble continues alone to
    the curves of an uninterrupted run, and both continue together as one ensemble; an ensemble resumes
    members from single-run checkpoints, those at another step than the rest trained in a group of their
    own."""
    trains = [dataclasses.replace(TRAIN, seed=seed) for seed in (0, 1)]
    checkpoints = [tmp_path / f"seed{t.seed}.pt" for t in trains]
    train_memory_ensemble(TASK, small_dnc("dnc_ds"), trains, checkpoints)
    assert [load_training_state(c).step for c in checkpoints] == [3, 3]  # the last mid-run evaluation
    uninterrupted = [train_memory_task(TASK, small_dnc("dnc_ds"), train) for train in trains]
    assert_same_run(train_memory_task(TASK, small_dnc("dnc_ds"), trains[1], checkpoints[1]), uninterrupted[1])
    for result, expected in zip(
        train_memory_ensemble(TASK, small_dnc("dnc_ds"), trains, checkpoints), uninterrupted, strict=True
    ):
        assert_same_run(result, expected)

    # seed 1 resumes from its step-3 checkpoint, seed 2 starts fresh: two groups, each member still exact
    trains = [trains[1], dataclasses.replace(TRAIN, seed=2)]
    results = train_memory_ensemble(TASK, small_dnc("dnc_ds"), trains, [checkpoints[1], None])
    assert_same_run(results[0], uninterrupted[1])
    assert_same_run(results[1], train_memory_task(TASK, small_dnc("dnc_ds"), trains[1]))
    assert [result.ensemble for result in results] == [1, 1]  # trained in two groups of one


def test_members_must_differ_in_their_seed_only() -> None:
    with pytest.raises(ValueError, match="seed"):
        train_memory_ensemble(TASK, small_dnc("dnc"), [TRAIN, dataclasses.replace(TRAIN, lr=1e-3, seed=1)])
    with pytest.raises(ValueError, match="seed"):
        train_memory_ensemble(TASK, small_dnc("dnc"), [TRAIN, TRAIN])


def test_a_reproduction_with_ensembles_keeps_the_same_runs(tmp_path: Path) -> None:
    """``ensemble=2`` over three seeds and two variants: groups of at most two seeds of one variant, each run
    kept with its ensemble's size; the runs equal those trained one by one (up to rounding), and a second
    start reads every run back instead of training it."""
    settings = {**TINY_DNC_REPRODUCTION, "steps": 4, "eval_every": 2, "variants": ["dnc", "dnc_ds"]}
    settings["seeds"] = [0, 1, 2]
    alone = run_dnc_repeat_copy(tmp_path / "alone", DNCRepeatCopyConfig(**settings))
    config = DNCRepeatCopyConfig(**settings, ensemble=2)
    together = run_dnc_repeat_copy(tmp_path / "together", config)
    for variant, runs in alone.comparison.results.items():
        for single, member in zip(runs, together.comparison.results[variant], strict=True):
            assert_same_run(member, single)
    records = [json.loads(line)["record"] for line in (tmp_path / "together" / "trials.jsonl").open()]
    assert sorted(r.get("ensemble", 1) for r in records) == [1, 1, 2, 2, 2, 2]
    assert "with an `ensemble` size" in together.report.read_text()
    assert "`ensemble`" not in alone.report.read_text()
    again = run_dnc_repeat_copy(tmp_path / "together", config)
    assert all(run.final_state is None for runs in again.comparison.results.values() for run in runs)
    assert sorted(run.ensemble for runs in again.comparison.results.values() for run in runs) == [
        1,
        1,
        2,
        2,
        2,
        2,
    ]


def test_ensemble_must_be_positive() -> None:
    with pytest.raises(UserError, match="ensemble"):
        DNCRepeatCopyConfig(ensemble=0)
