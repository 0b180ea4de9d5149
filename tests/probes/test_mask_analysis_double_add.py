"""The double-addition mask analysis (thesis 3.2.2, Tab. 3.1) at a tiny scale: mod 10, a 2x48 FNN."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from recombine.models.fnn import FeedForwardNetwork, FNNConfig
from recombine.probes.mask_analysis_common import format_mean_std
from recombine.probes.mask_analysis_double_add import (
    DoubleAddAnalysisConfig,
    DoubleAddAnalysisResult,
    copy_pair1_io_to_pair2,
    hidden_inversion,
    pair_accuracy,
    pair_loss,
    pair_passes,
    run_double_add_analysis,
    run_double_add_reproduction,
    train_network,
)
from recombine.probes.weight_masks import MaskedModel, MaskTrainingConfig
from recombine.tasks.addmul import AddMulConfig, build_double_addition, only_pair
from zeroed_weights import zeroed_outside


def _config(train_steps: int = 300, mask_steps: int = 150) -> DoubleAddAnalysisConfig:
    return DoubleAddAnalysisConfig(
        task=AddMulConfig(n_digits=1, n_train=1000, n_test=300),
        model=FNNConfig([48, 48]),
        train_steps=train_steps,
        batch_size=64,
        learning_rate=1e-2,
        mask=MaskTrainingConfig(steps=mask_steps, learning_rate=5e-2, alpha=3e-4),
    )


@pytest.fixture(scope="module")
def result() -> DoubleAddAnalysisResult:
    return run_double_add_analysis(_config(), seed=1)


def test_pair_loss_and_passes_match_a_naive_loop() -> None:
    split = build_double_addition(AddMulConfig(n_digits=2, n_train=5, n_test=1), seed=0)["train"]
    inputs, digits, pair = pair_passes(split)
    assert inputs.shape == (10, 80) and digits.shape == (10, 2)
    for row in range(10):
        p, example = pair[row], row % 5
        a, b = split.operands[example, 2 * p : 2 * p + 2]
        assert digits[row, 0] + 10 * digits[row, 1] == (a + b) % 100
        assert inputs[row, 40 * (1 - p) : 40 * (2 - p)].sum() == 0  # the other pair is zeroed
        assert inputs[row, 40 * p : 40 * (p + 1)].sum() == 4  # four one-hot digits
    logits = torch.randn(10, 40, dtype=torch.float64)
    naive = np.mean(
        [
            float(
                F.cross_entropy(
                    logits[r, 20 * pair[r] + 10 * d : 20 * pair[r] + 10 * d + 10], torch.tensor(digits[r, d])
                )
            )
            for r in range(10)
            for d in range(2)
        ]
    )
    loss = pair_loss(logits, (torch.as_tensor(digits), torch.as_tensor(pair)))
    assert float(loss) == pytest.approx(naive, rel=1e-12)


def test_masks_separate_the_pairs_as_in_table_3_1(result: DoubleAddAnalysisResult) -> None:
    assert list(result.accuracy) == [
        "none",
        "full",
        "pair1",
        "~pair1",
        "pair2",
        "~pair2",
        "hidden~pair1",
        "hidden~pair2",
    ]
    assert min(result.accuracy["none"].values()) >= 0.95
    assert result.accuracy["pair1"]["pair1"] >= 0.9 and result.accuracy["pair2"]["pair2"] >= 0.9
    # a pair's mask carries nothing of the other pair: its input and output weights are all removed
    assert result.accuracy["pair1"]["pair2"] < 0.5 and result.accuracy["pair2"]["pair1"] < 0.5
    # thesis Fig. 3.3: "the first and last layers have no shared weights"
    assert list(result.sharing) == ["layers.0.weight", "layers.1.weight", "output.weight"]
    assert result.sharing["layers.0.weight"].n_shared == 0 and result.sharing["output.weight"].n_shared == 0
    pair1 = result.masks["pair1"]
    assert not pair1["layers.0.weight"][:, 20:].any() and not pair1["output.weight"][10:].any()
    assert 0 <= result.iou <= result.iomin <= 1
    assert result.accuracy_table().splitlines()[0].startswith("| pair | none | full | pair1 | ~pair1 |")


def test_inverted_mask_accuracy_equals_a_model_with_those_weights_zeroed_by_hand(
    result: DoubleAddAnalysisResult,
) -> None:
    test = build_double_addition(_config().task, seed=1)["test"]
    for name, mask in (("~pair1", ~result.masks["pair1"]), ("~pair2", ~result.masks["pair2"])):
        zeroed = zeroed_outside(result.model, mask)
        for index, pair in enumerate(("pair1", "pair2")):
            assert pair_accuracy(zeroed, test, index, n_digits=1) == result.accuracy[name][pair]
        x = torch.as_tensor(test.inputs[:50])
        torch.testing.assert_close(MaskedModel(result.model, mask)(x), zeroed(x))
    hidden = hidden_inversion(
        result.masks["pair1"], result.masks["full"], ["layers.0.weight", "output.weight"]
    )
    assert torch.equal(hidden["layers.0.weight"], result.masks["full"]["layers.0.weight"])
    assert torch.equal(hidden["layers.1.weight"], ~result.masks["pair1"]["layers.1.weight"])
    zeroed = zeroed_outside(result.model, hidden)
    assert pair_accuracy(zeroed, test, 1, n_digits=1) == result.accuracy["hidden~pair1"]["pair2"]


def test_copied_io_makes_pair_2_a_replica_of_pair_1() -> None:
    """B.3.1: after the copy, feeding (a, b) as pair 2 gives the hidden layers and pair 2's logits exactly
    what feeding (a, b) as pair 1 gives pair 1's; pair 1 itself is untouched."""
    torch.manual_seed(0)
    model = FeedForwardNetwork(80, 40, FNNConfig([32, 16]))
    split = build_double_addition(AddMulConfig(n_digits=2, n_train=50, n_test=1), seed=0)["train"]
    as_pair1 = torch.as_tensor(only_pair(split.inputs, 0))
    as_pair2 = torch.roll(as_pair1, 40, dims=1)  # the same digits on pair 2's inputs, pair 1 zeroed
    before = model(as_pair1)
    copy_pair1_io_to_pair2(model)
    after1, after2 = model(as_pair1), model(as_pair2)
    torch.testing.assert_close(after1[:, :20], before[:, :20])  # pair 1's logits unchanged
    torch.testing.assert_close(after2[:, 20:], after1[:, :20])
    assert not torch.allclose(before[:, 20:], after1[:, 20:])  # pair 2's outputs were rewired


def test_train_network_applies_the_copy_for_fnn_copied_io() -> None:
    config = dataclasses.replace(_config(train_steps=3), architecture="fnn_copied_io")
    model, _ = train_network(config, build_double_addition(config.task, seed=0)["train"], seed=0)
    assert isinstance(model, FeedForwardNetwork)
    half_in, half_out = model.layers[0].in_features // 2, model.output.out_features // 2
    assert torch.equal(model.layers[0].weight[:, half_in:], model.layers[0].weight[:, :half_in])
    assert torch.equal(model.output.weight[half_out:], model.output.weight[:half_out])
    assert torch.equal(model.output.bias[half_out:], model.output.bias[:half_out])


def test_reproduction_writes_report_results_and_figure_with_mean_and_std_over_seeds(tmp_path: Path) -> None:
    results = run_double_add_reproduction(_config(train_steps=40, mask_steps=10), seeds=[0, 1], out=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {
        "report.md",
        "results.json",
        "sharing.png",
        "trials.jsonl",
    }
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["seeds"] == [0, 1] and list(stored["architectures"]) == ["fnn"]
    fnn = stored["architectures"]["fnn"]
    assert set(fnn["per_seed"]) == {"0", "1"}
    values = [fnn["per_seed"][s]["accuracy"]["~pair1"]["pair2"] for s in ("0", "1")]
    mean, std = fnn["mean_std"]["accuracy"]["~pair1"]["pair2"]
    assert mean == pytest.approx(np.mean(values)) and std == pytest.approx(np.std(values, ddof=1))
    shared = [fnn["per_seed"][s]["sharing"]["layers.1.weight"]["shared_of_pair1"] for s in ("0", "1")]
    assert fnn["mean_std"]["sharing"]["layers.1.weight"]["shared_of_pair1"][0] == pytest.approx(
        np.mean(shared)
    )
    assert stored["thesis"]["table_3_1"]["fnn"]["~pair1"]["pair2"] == [94.0, 6.7]
    assert stored["thesis"]["table_3_1"]["lstm_forced"]["~pair1"]["pair2"] == [96.0, 4.1]
    report = (tmp_path / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| fnn | ~pair1 |"))
    pair1 = format_mean_std(fnn["mean_std"]["accuracy"]["~pair1"]["pair1"])
    assert row == f"| fnn | ~pair1 | {pair1} | 20 ± 12.7 | {format_mean_std((mean, std))} | 94 ± 6.7 |"
    assert results["architectures"]["fnn"]["per_seed"]["1"]["iou"] == pytest.approx(
        fnn["per_seed"]["1"]["iou"], nan_ok=True
    )


def test_a_rerun_with_more_seeds_trains_only_the_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trials resume from ``trials.jsonl``: seeds 0, 1 and then 0, 1, 2 into one directory train seed 2
    only, and give seeds 0 and 1 exactly the first run's numbers; other settings train afresh."""
    config = _config(train_steps=20, mask_steps=5)
    first = run_double_add_reproduction(config, seeds=[0, 1], out=tmp_path)
    capsys.readouterr()
    second = run_double_add_reproduction(config, seeds=[0, 1, 2], out=tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert [("trials.jsonl" in line) for line in lines] == [True, True, False]
    for seed in ("0", "1"):
        assert (
            second["architectures"]["fnn"]["per_seed"][seed]
            == first["architectures"]["fnn"]["per_seed"][seed]
        )
    assert set(second["architectures"]["fnn"]["per_seed"]) == {"0", "1", "2"}
    run_double_add_reproduction(dataclasses.replace(config, train_steps=21), seeds=[0], out=tmp_path)
    assert "trials.jsonl" not in capsys.readouterr().err  # another config: trained again
