"""DNC on bAbI (thesis 2.3): padding invariance of the batched model, the answer-step loss against a
loop, and a tiny bAbI-format task (where did the person go?) learnt well below chance."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.experiments.dnc_babi import (
    BabiDNC,
    BabiRunConfig,
    answer_loss,
    padded_batch,
    per_task_sample,
    train_babi,
)
from recombine.experiments.dnc_memory import DNCSequenceConfig, MemoryTrainConfig
from recombine.tasks.babi import NO_TARGET, BabiConfig, build_babi

ROOMS = ["kitchen", "garden", "office", "hallway"]
NAMES = ["mary", "john"]


def write_task(directory: Path, n_stories: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_stories):
        name, other = rng.choice(NAMES, 2, replace=False)
        room, other_room = rng.choice(ROOMS, 2)
        lines += [f"1 {name} went to the {room}.", f"2 {other} went to the {other_room}."]
        lines += [f"3 Where is {name}? \t{room}\t1"]
    (directory / f"qa1_{['train', 'test'][seed]}.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def data(tmp_path: Path):  # type: ignore[no-untyped-def]
    write_task(tmp_path, 300, seed=0)
    write_task(tmp_path, 60, seed=1)
    return build_babi(BabiConfig(data_dir=str(tmp_path), tasks=[1], thinking_steps=1, valid_fraction=0.1))


SMALL = DNCSequenceConfig(variant="dnc_md", d_controller=32, n_cells=8, cell_width=8)


def test_padding_changes_no_output_and_the_loss_reads_answer_steps_only(data) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = BabiDNC(len(data.words), len(data.answers), 8, SMALL).double()
    stories = data.parts["train"]
    inputs, targets = padded_batch(stories, np.array([0, 1, 2]))
    alone, _ = padded_batch(stories, np.array([1]))
    with torch.no_grad():
        batched, single = model(inputs), model(alone)
    torch.testing.assert_close(batched[1, : alone.shape[1]], single[0])
    assert (targets != NO_TARGET).sum() == 3  # one answer per story
    logits = torch.randn(*targets.shape, len(data.answers), dtype=torch.float64)
    terms = [
        -torch.log_softmax(logits[b, t], -1)[targets[b, t]]
        for b in range(3)
        for t in range(targets.shape[1])
        if targets[b, t] != NO_TARGET
    ]
    torch.testing.assert_close(answer_loss(logits, targets), torch.stack(terms).mean())


def test_a_tiny_location_task_is_learnt_well_below_chance(data) -> None:  # type: ignore[no-untyped-def]
    train = MemoryTrainConfig(steps=150, batch_size=16, optimizer="adam", lr=1e-2, eval_every=75)
    result = train_babi(data, BabiRunConfig(model=SMALL, d_embedding=16, train=train, eval_stories=30))
    assert result.eval_steps == [0, 75, 150]
    assert result.valid_mean_error[0] > 0.5  # chance is 3/4
    assert result.test_errors[1] < 0.3, result.test_errors
    assert result.summary["failed_tasks"] == int(result.test_errors[1] >= 0.05)
    # deterministic, and evaluation does not disturb training: a shorter run repeats the first steps
    shorter = dataclasses.replace(train, steps=20, eval_every=7)
    again = train_babi(data, BabiRunConfig(model=SMALL, d_embedding=16, train=shorter, eval_stories=30))
    np.testing.assert_array_equal(again.train_loss, result.train_loss[:20])


def test_the_validation_sample_covers_every_task() -> None:
    tasks = np.array([1, 1, 1, 2, 2, 3])
    assert per_task_sample(tasks, 3).tolist() == [0, 3, 5]
    assert per_task_sample(tasks, 4).tolist() == [0, 1, 3, 4, 5]  # ceil(4 / 3) = 2 per task
    assert per_task_sample(tasks, 100).tolist() == list(range(6))
    assert per_task_sample(np.array([], dtype=np.int64), 5).tolist() == []
