"""``recombine probe masks`` on a seq2seq run (thesis 3.3): a small LSTM seq2seq trained on SCAN ``simple``.

Accuracies in the probe's report are checked against an independent evaluation: greedy decoding of one
example at a time on a copy of the model whose weights outside the mask are set to zero."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from recombine.cli import main
from recombine.probes.attention_maps import load_run_model
from recombine.probes.mask_probe import sample_examples
from recombine.probes.mask_sets import MaskSet
from recombine.tasks.base import Seq2SeqSplit
from zeroed_weights import zeroed_outside

EVAL_EXAMPLES = 60


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run") / "scan"
    overrides = [
        "task=scan",
        "task.split=simple",
        "model=lstm_seq2seq",
        "train.steps=300",
        "train.batch_size=32",
        "train.lr=0.003",
        "train.eval_every=300",
        "train.threads=1",
        "seed=1",
    ]
    assert main(["train", "--no-progress", "--run-dir", str(path), *overrides]) == 0
    return path


@pytest.fixture(scope="module")
def probed(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("probe")
    argv = ["probe", "masks", str(run_dir), "--target", "train", "--target", "valid_iid", "--steps", "10"]
    argv += ["--lr", "0.3", "--batch-size", "32", "--eval-examples", str(EVAL_EXAMPLES), "--out", str(out)]
    assert main(argv) == 0
    return out


def looped_exact_match(model: nn.Module, split: Seq2SeqSplit) -> float:
    """Exact match of greedy decoding, one example at a time (thesis C.1: every token and the length)."""
    correct = 0
    with torch.no_grad():
        for source, target in zip(split.inputs, split.outputs, strict=True):
            src = torch.as_tensor(source)[None]
            tokens, lengths = model.greedy_decode(  # type: ignore[operator]
                src, torch.tensor([len(source)]), max_length=len(target) + 1
            )
            correct += tokens[0, : int(lengths[0])].tolist() == target.tolist()
    return correct / len(split)


def test_the_trained_run_is_worth_probing(probed: Path) -> None:
    results = json.loads((probed / "results.json").read_text())
    assert results["accuracy"]["none"]["test_iid"] > 0.1  # otherwise the checks below say little


def test_masked_and_inverted_accuracy_equal_zeroed_weights_decoded_one_by_one(
    probed: Path, run_dir: Path
) -> None:
    results = json.loads((probed / "results.json").read_text())
    assert list(results["accuracy"]) == ["none", "train", "~train", "valid_iid", "~valid_iid"]
    model, task = load_run_model(run_dir)
    mask = MaskSet.load(probed / "masks" / "train.pt")
    assert 0 < mask.kept_fraction() < 1
    for split in ("valid_iid", "test_iid"):
        sample = sample_examples(task.splits[split], EVAL_EXAMPLES, seed=0)
        assert isinstance(sample, Seq2SeqSplit) and len(sample) == EVAL_EXAMPLES
        accuracy = results["accuracy"]
        assert accuracy["none"][split] == pytest.approx(looped_exact_match(model, sample))
        masked = zeroed_outside(model, mask)
        assert accuracy["train"][split] == pytest.approx(looped_exact_match(masked, sample))
        inverted = zeroed_outside(model, ~mask)
        assert accuracy["~train"][split] == pytest.approx(looped_exact_match(inverted, sample))


def test_two_seq2seq_masks_give_sharing_and_a_report(probed: Path) -> None:
    assert {p.name for p in probed.iterdir()} == {"masks", "results.json", "report.md", "sharing.png"}
    results = json.loads((probed / "results.json").read_text())
    first = MaskSet.load(probed / "masks" / "train.pt")
    second = MaskSet.load(probed / "masks" / "valid_iid.pt")
    assert results["iou"] == pytest.approx((first & second).n_kept() / (first | second).n_kept())
    assert "exact match of greedy decoding" in (probed / "report.md").read_text()


def test_sample_examples_is_a_seeded_ordered_subset() -> None:
    rng = np.random.default_rng(5)
    split = Seq2SeqSplit(
        inputs=[rng.integers(1, 9, size=n) for n in range(1, 31)],
        outputs=[rng.integers(1, 9, size=n + 1) for n in range(1, 31)],
        group=np.arange(30),
    )
    assert sample_examples(split, 0, seed=1) is split and sample_examples(split, 30, seed=1) is split
    sample = sample_examples(split, 12, seed=1)
    assert isinstance(sample, Seq2SeqSplit)
    chosen = sample.group.tolist()  # group = original index here
    assert len(set(chosen)) == 12 and chosen == sorted(chosen)
    for k, i in enumerate(chosen):
        assert np.array_equal(sample.inputs[k], split.inputs[i])
        assert np.array_equal(sample.outputs[k], split.outputs[i])
    assert sample_examples(split, 12, seed=1).group.tolist() == chosen  # type: ignore[union-attr]
    assert sample_examples(split, 12, seed=2).group.tolist() != chosen  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "train:depth=3"], "seq2seq task and its splits have no depths"),
        (["--target", "train", "--eval-examples", "-1"], "eval_examples must be >= 0"),
    ],
)
def test_seq2seq_user_errors_are_one_line_with_exit_code_2(
    run_dir: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "masks", str(run_dir), *argv, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
