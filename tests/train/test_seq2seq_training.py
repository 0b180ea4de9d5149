"""Seq2seq training: teacher forcing and exact match, group-balanced batches, memorising a small SCAN
subset, and ``recombine train`` end to end on a SCAN length split."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine import models, run_config, tasks
from recombine.errors import UserError
from recombine.models.seq2seq_interface import teacher_forcing
from recombine.tasks.base import Seq2SeqSplit
from recombine.train.batching import PaddedSeq2SeqSplit
from recombine.train.objectives import exact_match, objective_for


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_teacher_forcing_adds_sos_to_the_input_and_eos_to_the_target() -> None:
    y = torch.tensor([[3, 1, 2], [4, 0, 0]])
    decoder_input, target, lengths = teacher_forcing(y, torch.tensor([3, 1]), n_classes=5)
    assert decoder_input.tolist() == [[6, 3, 1, 2], [6, 4, 0, 0]]  # SOS = n_classes + 1
    assert target.tolist() == [[3, 1, 2, 5], [4, 5, 0, 0]]  # EOS = n_classes
    assert lengths.tolist() == [4, 2]


def test_exact_match_needs_every_token_and_the_length() -> None:
    target, target_len = torch.tensor([[1, 2, 3], [1, 2, 0]]), torch.tensor([3, 2])
    outputs = torch.tensor([[1, 2, 3, 0], [1, 2, 3, 0]])
    assert exact_match(outputs, torch.tensor([3, 3]), target, target_len).tolist() == [True, False]
    assert exact_match(outputs[:, :2], torch.tensor([2, 2]), target, target_len).tolist() == [False, True]


def test_group_balanced_batches_draw_groups_uniformly() -> None:
    groups = np.array([1] * 90 + [2] * 9 + [3] * 1)
    split = Seq2SeqSplit([np.array([1])] * 100, [np.array([1] * int(g)) for g in groups], groups)
    padded = PaddedSeq2SeqSplit.from_split(split)
    generator = torch.Generator().manual_seed(0)
    batch = padded.random_batch(3000, generator, group_balanced=True)
    counts = torch.bincount(batch.group, minlength=4)[1:].float() / 3000
    torch.testing.assert_close(counts, torch.full((3,), 1 / 3), atol=0.04, rtol=0)
    assert (batch.tgt_len == batch.group).all() and batch.tgt.shape[1] == 3


def test_label_smoothing_is_validated_and_changes_the_loss() -> None:
    with pytest.raises(UserError, match="label_smoothing"):
        run_config.resolve({"task": "scan", "model": "transformer_seq2seq", "train": {"label_smoothing": 1}})
    task = tasks.get("scan", split="simple", seed=0)
    torch.manual_seed(0)
    model = models.build("transformer_seq2seq", task.spec, d_model=16, n_heads=2, d_ff=32, dropout=0.0)
    batch = objective_for(task.spec).prepare(task.splits["valid_iid"]).batch(torch.arange(8))
    plain, _, n = objective_for(task.spec).loss(model, batch)
    smoothed, _, _ = objective_for(task.spec, label_smoothing=0.1).loss(model, batch)
    assert n == 8 and smoothed.item() != pytest.approx(plain.item())


def test_small_scan_subset_is_memorised() -> None:
    """200 SCAN commands with at most 8 actions: a 1+1-layer relative Transformer reaches >= 0.9 greedy
    exact match on them in 350 steps."""
    task = tasks.get("scan", split="simple", seed=0)
    train = task.splits["train"]
    assert isinstance(train, Seq2SeqSplit)
    keep = [i for i in range(len(train)) if len(train.outputs[i]) <= 8][:200]
    inputs, outputs = [train.inputs[i] for i in keep], [train.outputs[i] for i in keep]
    subset = Seq2SeqSplit(inputs, outputs, train.group[keep])
    torch.manual_seed(0)
    config = {"d_model": 32, "n_heads": 4, "d_ff": 64, "n_encoder_layers": 1, "n_decoder_layers": 1}
    model = models.build("transformer_seq2seq_rel", task.spec, **config, dropout=0.0)
    objective = objective_for(task.spec)
    prepared = objective.prepare(subset)
    steps = 350
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        loss, _, _ = objective.loss(model, objective.batch(prepared, 64, generator, balanced=False))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    result = objective.evaluate(model, prepared, batch_size=256)
    assert result["accuracy"] >= 0.9
    assert set(result["per_depth"]) == {str(n) for n in np.unique(subset.group)}

    # evaluation decodes length-sorted batches: every example's verdict must be the one it gets alone;
    # the memorised commands mixed with unseen longer ones give right and wrong answers of many lengths
    valid = task.splits["valid_iid"]
    assert isinstance(valid, Seq2SeqSplit)
    mixed = Seq2SeqSplit(
        inputs + valid.inputs[:100],
        outputs + valid.outputs[:100],
        np.concatenate([subset.group, valid.group[:100]]),
    )
    result = objective.evaluate(model, objective.prepare(mixed), batch_size=16)
    model.eval()
    alone = []
    with torch.no_grad():
        for source, target in zip(mixed.inputs, mixed.outputs, strict=True):
            tokens, lengths = model.greedy_decode(
                torch.as_tensor(source)[None], torch.tensor([len(source)]), max_length=len(target) + 1
            )
            alone.append(tokens[0, : int(lengths[0])].tolist() == target.tolist())
    assert 0.3 < np.mean(alone) < 0.9  # right and wrong answers, so a misplaced verdict would show
    assert result["accuracy"] == pytest.approx(np.mean(alone))
    for group in np.unique(mixed.group):
        in_group = [a for a, g in zip(alone, mixed.group, strict=True) if g == group]
        assert result["per_depth"][str(group)] == pytest.approx(np.mean(in_group))


def test_length_sorted_batches_cover_every_example_once_shortest_outputs_first() -> None:
    rng = np.random.default_rng(0)
    out_lengths = rng.integers(1, 30, size=50)
    split = Seq2SeqSplit(
        [rng.integers(1, 5, size=int(n)) for n in rng.integers(1, 9, size=50)],
        [np.arange(1, n + 1) for n in out_lengths],
        np.arange(50),
    )
    padded = PaddedSeq2SeqSplit.from_split(split)
    seen, previous_longest = [], 0
    for index, batch in padded.length_sorted_batches(8):
        assert batch.group.tolist() == index.tolist()  # group = original index here
        assert batch.tgt_len.tolist() == out_lengths[index.numpy()].tolist()
        assert int(batch.tgt_len.min()) >= previous_longest and batch.tgt.shape[1] == int(batch.tgt_len.max())
        previous_longest = int(batch.tgt_len.max())
        seen += index.tolist()
    assert sorted(seen) == list(range(50))


def test_cli_trains_a_relative_transformer_on_a_scan_length_split(tmp_path: Path) -> None:
    from recombine.cli import main

    run = tmp_path / "run"
    overrides = [
        "task=scan",
        "task.split=length_cutoff_26",
        "model=transformer_seq2seq_rel",
        "model.d_model=16",
        "model.n_heads=2",
        "model.d_ff=32",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "train.steps=10",
        "train.batch_size=16",
        "train.eval_every=10",
        "train.threads=1",
        "train.label_smoothing=0.1",
    ]
    assert main(["train", "--no-progress", "--run-dir", str(run), *overrides]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "completed" and result["selection_split"] == "valid_ood"
    assert set(result["selected"]) == {"valid_iid", "valid_ood", "test_ood"}
    assert 0.0 <= result["selected"]["test_ood"] <= 1.0
    assert min(int(g) for g in result["selected_per_depth"]["test_ood"]) > 26  # groups = output lengths
