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


def ndr(weight_init: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    kwargs = dict(d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF, n_layers=3, hidden_dropout=True)
    return build("ndr", SPEC, weight_init=weight_init, **kwargs)


def assert_uniform_with_std(weight: torch.Tensor, std: float) -> None:
    bound = math.sqrt(3.0) * std
    assert weight.abs().max().item() <= bound
    assert weight.abs().max().item() > 0.99 * bound  # fills the interval (tens of thousands of draws)
    assert weight.std().item() == pytest.approx(std, rel=0.02)


def test_weights_have_the_standard_deviations_of_the_released_layer() -> None:
    layer = ndr("glorot").layers[0]
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


def test_biases_outside_attention_keep_their_defaults_and_the_gate_starts_closed() -> None:
    layer = ndr("glorot").layers[0]
    default = ndr("pytorch").layers[0]
    assert torch.all(layer.copy_gate.ffn[-1].bias == -3.0)
    bound = 1.0 / math.sqrt(D_MODEL)  # nn.Linear's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert layer.ffn[0].bias.abs().max().item() <= bound
    assert layer.ffn[0].bias.std().item() == pytest.approx(default.ffn[0].bias.std().item(), rel=0.2)
    assert layer.attention.direction.weight.abs().max().item() <= bound


def test_larger_than_pytorch_defaults_and_the_same_parameters() -> None:
    glorot, default = ndr("glorot"), ndr("pytorch")
    assert glorot.state_dict().keys() == default.state_dict().keys()
    ratio = glorot.layers[0].ffn[-1].weight.std() / default.layers[0].ffn[-1].weight.std()
    # tanh-gain Glorot over U(+-1/sqrt(512)): (5/3) sqrt(2/768) / (1/sqrt(3 * 512)) = 3.33
    assert ratio.item() == pytest.approx(10.0 / 3.0, rel=0.03)
    default.load_state_dict(glorot.state_dict())  # the forward is the default model's
    x, lengths = torch.randint(0, 12, (3, 6)), torch.tensor([6, 4, 1])
    glorot.eval(), default.eval()
    torch.testing.assert_close(glorot(x, lengths), default(x, lengths), rtol=0, atol=0)


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
    with pytest.raises(UserError, match="needs attention=geometric and ffn=dense"):
        TransformerClassifierConfig(weight_init="glorot", attention="relative")
    with pytest.raises(UserError, match="needs attention=geometric and ffn=dense"):
        TransformerClassifierConfig(weight_init="glorot", attention="geometric", ffn="sigma_moe")
