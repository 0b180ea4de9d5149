"""The LSTM settings of the add/mul and double-addition mask analyses (thesis 3.2.1, 3.2.2, B.3.4, B.3.5)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from recombine.models.arithmetic_lstm import ArithmeticLSTMConfig, PairByPairLSTM, RepeatedInputLSTM
from recombine.models.fnn import FNNConfig
from recombine.probes import mask_analysis_addmul, mask_analysis_double_add
from recombine.probes.mask_sets import MaskSet
from recombine.probes.weight_masks import (
    MaskedModel,
    MaskTrainingConfig,
    WeightMask,
    forward_with_mask_samples,
)
from recombine.tasks.addmul import AddMulConfig

CONFIG = ArithmeticLSTMConfig(hidden_size=8, n_layers=2, steps=3)


def _settings() -> dict[str, torch.nn.Module]:
    """Every LSTM setting as the analyses build it: add/mul (42 -> 20), double addition (80 -> 40)."""
    torch.manual_seed(0)
    addmul = mask_analysis_addmul.AddMulAnalysisConfig(architecture="lstm", lstm=CONFIG)
    models = {"addmul lstm": mask_analysis_addmul.build_model(addmul, 42, 20)}
    for architecture in ("lstm_together", "lstm_forced"):
        config = mask_analysis_double_add.DoubleAddAnalysisConfig(architecture=architecture, lstm=CONFIG)
        models[f"double-add {architecture}"] = mask_analysis_double_add.build_model(config, 80, 40)
    return models


@pytest.mark.parametrize("name", list(_settings()))
def test_shapes_and_all_ones_masks_leave_every_setting_unchanged(name: str) -> None:
    model = _settings()[name].eval()
    n_inputs = model.lstm.input_size
    x = torch.randn(8, n_inputs, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(x)
        assert out.shape == (8, n_inputs // 2 if n_inputs == 80 else 20)
        shapes = {n: p.shape for n, p in model.named_parameters() if p.ndim >= 2}
        torch.testing.assert_close(MaskedModel(model, MaskSet.full(shapes))(x), out)
        ones = {n: torch.ones(4, *s) for n, s in shapes.items()}
        torch.testing.assert_close(forward_with_mask_samples(model, ones, [x]), out)  # the loop fallback
        zeros = {n: torch.zeros(4, *s) for n, s in shapes.items()}
        assert not torch.allclose(forward_with_mask_samples(model, zeros, [x]), out)
    assert list(WeightMask.for_model(model).names) == [
        "lstm.weight_ih_l0",
        "lstm.weight_hh_l0",
        "lstm.weight_ih_l1",
        "lstm.weight_hh_l1",
        "output.weight",
    ]


def test_repeated_input_lstm_reads_the_last_of_n_steps() -> None:
    torch.manual_seed(0)
    model = RepeatedInputLSTM(6, 4, CONFIG, n_steps=5).eval()
    x = torch.randn(3, 6)
    state = None
    for _ in range(5):  # step by step by hand
        hidden, state = model.lstm(x.unsqueeze(1), state)
    torch.testing.assert_close(model(x), model.output(hidden[:, -1]))


def test_forced_lstm_shows_the_pairs_one_after_the_other_without_resetting_the_state() -> None:
    """B.3.5: pair 1 for steps 1-3, read at step 3 from its outputs; pair 2 for steps 4-6, read at step 6."""
    torch.manual_seed(0)
    model = PairByPairLSTM(8, 6, CONFIG).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = model(x)
        changed_pair2 = x.clone()
        changed_pair2[:, 4:] += 1.0
        changed_pair1 = x.clone()
        changed_pair1[:, :4] += 1.0
        torch.testing.assert_close(model(changed_pair2)[:, :3], out[:, :3])  # read before pair 2 is shown
        assert not torch.allclose(model(changed_pair2)[:, 3:], out[:, 3:])
        assert not torch.allclose(model(changed_pair1)[:, 3:], out[:, 3:])  # the state carries pair 1 over
        first = torch.cat([x[:, :4], torch.zeros(4, 4)], 1).unsqueeze(1).expand(-1, 3, -1)
        second = torch.cat([torch.zeros(4, 4), x[:, 4:]], 1).unsqueeze(1).expand(-1, 3, -1)
        logits = model.output(model.lstm(torch.cat([first, second], 1))[0])
        torch.testing.assert_close(out, torch.cat([logits[:, 2, :3], logits[:, 5, 3:]], 1))
    with pytest.raises(Exception, match="halves"):
        PairByPairLSTM(7, 6, CONFIG)


def test_lstm_learns_a_tiny_addmul_and_the_masks_select_an_operation() -> None:
    config = mask_analysis_addmul.AddMulAnalysisConfig(
        task=AddMulConfig(n_digits=1, n_train=1000, n_test=300),
        architecture="lstm",
        lstm=ArithmeticLSTMConfig(hidden_size=48, n_layers=1, steps=3),
        train_steps=250,
        batch_size=64,
        learning_rate=2e-2,
        full_mask=False,
        mask=MaskTrainingConfig(steps=150, learning_rate=5e-2, alpha=1e-4),
    )
    result = mask_analysis_addmul.run_addmul_analysis(config, seed=0)
    assert result.train_losses[-1] < 0.5 * result.train_losses[0]
    assert min(result.accuracy["none"].values()) > 0.9  # chance: 0.1
    # each operation's mask keeps its own operation better than the other (thesis Tab. B.1)
    assert result.accuracy["add"]["add"] > result.accuracy["add"]["mul"] + 0.2
    assert result.accuracy["mul"]["mul"] > result.accuracy["mul"]["add"] + 0.2
    assert list(result.sharing) == ["lstm.weight_ih_l0", "lstm.weight_hh_l0", "output.weight"]


@pytest.mark.parametrize("architecture", ["lstm_together", "lstm_forced"])
def test_double_addition_runs_with_both_lstm_settings(architecture: str) -> None:
    config = mask_analysis_double_add.DoubleAddAnalysisConfig(
        task=AddMulConfig(n_digits=1, n_train=500, n_test=100),
        architecture=architecture,
        model=FNNConfig([8]),
        lstm=ArithmeticLSTMConfig(hidden_size=32, n_layers=1, steps=2),
        train_steps=150,
        batch_size=64,
        learning_rate=2e-2,
        mask=MaskTrainingConfig(steps=20, learning_rate=5e-2, alpha=3e-4),
    )
    result = mask_analysis_double_add.run_double_add_analysis(config, seed=0)
    assert result.train_losses[-1] < 0.6 * result.train_losses[0]
    assert list(result.accuracy)[-2:] == ["hidden~pair1", "hidden~pair2"]
    assert list(result.sharing) == ["lstm.weight_ih_l0", "lstm.weight_hh_l0", "output.weight"]
    assert 0 <= result.iou <= result.iomin <= 1
    with pytest.raises(Exception, match="unknown architecture"):
        dataclasses.replace(config, architecture="lstm")
