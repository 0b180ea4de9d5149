"""``model.weight_init=glorot``: the released NDR layer's initialisation, checked against Glorot's formula."""

from __future__ import annotations

import math

import pytest
import torch

from recombine.errors import UserError
from recombine.models import build
from recombine.models.transformer_classifier import TransformerClassifierConfig
from recombine.tasks.base import TaskSpec

SPEC = TaskSpec(kind="classify", input_vocab_size=12, n_classes=8, max_input_length=10)
D_MODEL, D_FF, N_HEADS = 256, 512, 4


def glorot_std(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """Glorot & Bengio (2010): Var = gain^2 * 2 / (fan_in + fan_out)."""
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def ndr(weight_init: str, seed: int = 0, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    kwargs = dict(d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF, n_layers=3, hidden_dropout=True) | overrides
    return build("ndr", SPEC, weight_init=weight_init, **kwargs)


def assert_uniform_with_std(weight: torch.Tensor, std: float) -> None:
    bound = math.sqrt(3.0) * std
    assert weight.abs().max().item() <= bound
    assert weight.abs().max().item() > 0.99 * bound  # fills the interval (tens of thousands of draws)
    assert weight.std().item() == pytest.approx(std, rel=0.02)


def assert_released_layer_init(layer: torch.nn.Module) -> None:
    relu, tanh = math.sqrt(2.0), 5.0 / 3.0
    assert_uniform_with_std(layer.ffn[0].weight, glorot_std(D_MODEL, D_FF, relu))
    assert_uniform_with_std(layer.ffn[-1].weight, glorot_std(D_FF, D_MODEL, tanh))
    assert_uniform_with_std(layer.copy_gate.ffn[0].weight, glorot_std(D_MODEL, D_MODEL, relu))
    assert_uniform_with_std(layer.copy_gate.ffn[-1].weight, glorot_std(D_MODEL, D_MODEL))
    d_head = D_MODEL // N_HEADS
    attention = layer.attention
    for projection in (attention.query, attention.key, attention.value, attention.out):
        assert_uniform_with_std(projection.weight, glorot_std(D_MODEL, d_head))
    assert attention.key.bias is None
    for projection in (attention.query, attention.value, attention.out):  # start at zero
        assert torch.count_nonzero(projection.bias) == 0


def test_weights_have_the_standard_deviations_of_the_released_layer() -> None:
    assert_released_layer_init(ndr("glorot").layers[0])


def test_every_layer_of_an_unshared_stack_is_initialised() -> None:
    model = ndr("glorot", shared_layers=False)
    assert len(model.layers) == 3
    for layer in model.layers:
        assert_released_layer_init(layer)


def test_everything_else_keeps_its_default_initialisation() -> None:
    """FFN biases, the gate bias (-3), the directional projection, alpha/beta/gamma, LayerNorms and the
    embedding are those of the default model built from the same seed. (The readout is drawn after the
    re-initialisation, from PyTorch's default distribution.)"""
    glorot, default = ndr("glorot"), ndr("pytorch")
    assert glorot.state_dict().keys() == default.state_dict().keys()
    reinitialised = {f"{m}.weight" for m in ("ffn.0", "ffn.2", "copy_gate.ffn.0", "copy_gate.ffn.2")}
    reinitialised |= {
        f"attention.{m}.{p}" for m in ("query", "key", "value", "out") for p in ("weight", "bias")
    }
    untouched = 0
    for name, value in glorot.state_dict().items():
        if name.startswith("layers.0.") and name.removeprefix("layers.0.") in reinitialised:
            continue
        if name.startswith("readout."):
            assert value.abs().max().item() <= 1.0 / math.sqrt(D_MODEL)
            continue
        assert torch.equal(value, default.state_dict()[name]), name
        untouched += 1
    assert untouched >= 14  # embedding, 2 LayerNorms, 4 FFN biases, direction, alpha, beta, gamma
    assert torch.all(glorot.layers[0].copy_gate.ffn[-1].bias == -3.0)


def test_larger_than_pytorch_defaults() -> None:
    glorot, default = ndr("glorot"), ndr("pytorch")
    ratio = glorot.layers[0].ffn[-1].weight.std() / default.layers[0].ffn[-1].weight.std()
    # tanh-gain Glorot over U(+-1/sqrt(512)): (5/3) sqrt(2/768) / (1/sqrt(3 * 512)) = 3.33
    assert ratio.item() == pytest.approx(10.0 / 3.0, rel=0.03)


def test_pytorch_stays_the_default_initialisation() -> None:
    torch.manual_seed(0)
    implicit = build("ndr", SPEC, d_model=32, n_heads=1, d_ff=64, n_layers=2)
    torch.manual_seed(0)
    explicit = build("ndr", SPEC, d_model=32, n_heads=1, d_ff=64, n_layers=2, weight_init="pytorch")
    torch.manual_seed(0)
    glorot = build("ndr", SPEC, d_model=32, n_heads=1, d_ff=64, n_layers=2, weight_init="glorot")
    for name, value in implicit.state_dict().items():
        assert torch.equal(value, explicit.state_dict()[name]), name
    assert not torch.equal(implicit.layers[0].ffn[0].weight, glorot.layers[0].ffn[0].weight)


def test_config_errors_are_one_line() -> None:
    with pytest.raises(UserError, match="unknown model.weight_init 'xavier'; valid choices"):
        TransformerClassifierConfig(weight_init="xavier", attention="geometric")
    needs = "needs attention=geometric, ffn=dense and activation=relu"
    with pytest.raises(UserError, match=needs):
        TransformerClassifierConfig(weight_init="glorot", attention="relative")
    with pytest.raises(UserError, match=needs):
        TransformerClassifierConfig(weight_init="glorot", attention="geometric", ffn="sigma_moe")
    with pytest.raises(UserError, match=needs):
        TransformerClassifierConfig(weight_init="glorot", attention="geometric", activation="gelu")
    with pytest.raises(UserError, match="unknown model.attention 'geometrc'"):  # the typo is named first
        TransformerClassifierConfig(weight_init="glorot", attention="geometrc")
