"""The modified NDR layer of thesis E.1.1 against eqs. E.1, E.2, 5.1, 5.3 and 5.4 written out by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models import build
from recombine.models.layers.encoder_layer import EncoderLayer
from recombine.models.transformer_classifier import TransformerClassifierConfig
from recombine.tasks.base import TaskSpec


def modified_layer(dropout: float = 0.0) -> EncoderLayer:
    torch.manual_seed(0)
    return EncoderLayer(
        16,
        2,
        32,
        dropout=dropout,
        attention="geometric",
        copy_gate=True,
        activation="gelu",
        data_residual=True,
        ffn_dropout=False,
    )


def test_modified_layer_equals_equations_e1_e2_with_the_copy_gate() -> None:
    layer = modified_layer().eval()
    with torch.no_grad():  # open the gate part way, so that both terms of eq. 5.4 matter
        layer.copy_gate.ffn[-1].bias.fill_(0.0)
    h = torch.randn(3, 7, 16)
    out, info = layer(h)

    attended, _ = layer.attention(h, None)
    a = F.layer_norm(h + attended, (16,), layer.attention_norm.weight, layer.attention_norm.bias)  # 5.1
    first, second = layer.ffn[0], layer.ffn[2]
    ffn = (
        second.weight @ F.gelu(first.weight @ a[..., None] + first.bias[:, None]) + second.bias[:, None]
    )  # E.1
    u = F.layer_norm(ffn[..., 0] + a, (16,), layer.update_norm.weight, layer.update_norm.bias)  # E.2
    g1, g2 = layer.copy_gate.ffn[0], layer.copy_gate.ffn[2]
    g = torch.sigmoid(F.linear(F.gelu(F.linear(a, g1.weight, g1.bias)), g2.weight, g2.bias))  # 5.3 with E.1
    torch.testing.assert_close(info["gate"], g)
    torch.testing.assert_close(out, g * u + (1 - g) * h)  # 5.4
    assert 0.1 < g.mean() < 0.9


def test_no_dropout_on_the_feed_forward_output_only() -> None:
    """E.1.1 drops no FFN output; the attention residual keeps its dropout (eq. 5.1)."""
    torch.manual_seed(0)
    layer = modified_layer(dropout=0.5).train()
    h, attended, transformed = torch.randn(3, 2, 5, 16).unbind(0)
    assert torch.equal(layer.ffn_dropout(transformed), transformed)
    assert not torch.equal(layer.dropout(attended), attended)
    standard = EncoderLayer(16, 2, 32, 0.5, "geometric", True).train()
    assert not torch.equal(standard.ffn_dropout(transformed), transformed)
    with torch.no_grad():  # a closed gate still copies h exactly in training
        layer.copy_gate.ffn[-1].bias.fill_(-1e4)
    torch.testing.assert_close(layer(h)[0], h, rtol=0, atol=0)


def test_ndr_modified_preset_and_its_config_errors() -> None:
    spec = TaskSpec(kind="classify", input_vocab_size=12, n_classes=8, max_input_length=10)
    model = build("ndr_modified", spec, d_model=16, n_heads=2, d_ff=32, n_layers=3)
    layer = model.layers[0]
    assert isinstance(layer.ffn[1], torch.nn.GELU) and isinstance(layer.copy_gate.ffn[1], torch.nn.GELU)
    assert layer.data_residual and isinstance(layer.ffn_dropout, torch.nn.Identity)
    plain = build("ndr", spec, d_model=16, n_heads=2, d_ff=32, n_layers=3)
    assert isinstance(plain.layers[0].ffn[1], torch.nn.ReLU) and not plain.layers[0].data_residual
    assert model.state_dict().keys() == plain.state_dict().keys()  # same parameters, other function
    with pytest.raises(UserError, match="unknown model.activation 'gelux'; valid choices: gelu, relu"):
        TransformerClassifierConfig(activation="gelux")
    with pytest.raises(UserError, match="needs model.copy_gate=true"):
        TransformerClassifierConfig(data_residual=True)
    with pytest.raises(UserError, match="dense feed-forward block"):
        TransformerClassifierConfig(activation="gelu", ffn="sigma_moe")
