"""Dropout on the hidden units of the data and gate FFNs (the authors' released NDR layer's placement)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models import build
from recombine.models.layers.encoder_layer import EncoderLayer
from recombine.models.transformer_classifier import TransformerClassifierConfig
from recombine.tasks.base import TaskSpec

P = 0.5


def ndr_layer(hidden_dropout: bool, ffn_dropout: bool = False, activation: str = "relu") -> EncoderLayer:
    torch.manual_seed(0)
    return EncoderLayer(
        16,
        1,
        32,
        P,
        "geometric",
        True,
        hidden_dropout=hidden_dropout,
        ffn_dropout=ffn_dropout,
        activation=activation,
    )


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_data_and_gate_ffn_drop_their_hidden_units_as_written_out(activation: str) -> None:
    """``W_2 drop(act(W_1 a + b_1)) + b_2`` for both FFNs: the dropout after the activation."""
    act = torch.relu if activation == "relu" else F.gelu
    layer = ndr_layer(hidden_dropout=True, activation=activation).train()
    a = torch.randn(32, 7, 16)
    w1, w2 = layer.ffn[0], layer.ffn[2]
    torch.manual_seed(1)
    out = layer.ffn(a)
    torch.manual_seed(1)
    hidden = F.dropout(act(a @ w1.weight.T + w1.bias), P, training=True)
    torch.testing.assert_close(out, hidden @ w2.weight.T + w2.bias)
    g1, g2 = layer.copy_gate.ffn[0], layer.copy_gate.ffn[2]
    torch.manual_seed(2)
    gate = layer.copy_gate.gate(a)
    torch.manual_seed(2)
    hidden = F.dropout(act(a @ g1.weight.T + g1.bias), P, training=True)
    torch.testing.assert_close(gate, torch.sigmoid(hidden @ g2.weight.T + g2.bias))
    nonzero = act(a @ g1.weight.T + g1.bias) != 0
    assert (hidden[nonzero] == 0).float().mean().item() == pytest.approx(P, abs=0.05)


def test_only_hidden_units_are_dropped_so_a_zero_second_map_leaves_its_bias() -> None:
    """With W_2 = 0 the FFN output is b_2 whatever the hidden mask; output dropout would zero parts of it."""
    hidden_only = ndr_layer(hidden_dropout=True).train()
    output_drop = ndr_layer(hidden_dropout=False, ffn_dropout=True).train()
    for layer in (hidden_only, output_drop):
        with torch.no_grad():
            layer.ffn[2].weight.zero_()
            layer.ffn[2].bias.fill_(1.0)
    a = torch.randn(4, 5, 16)
    torch.testing.assert_close(hidden_only.ffn_dropout(hidden_only.ffn(a)), torch.ones(4, 5, 16))
    assert (output_drop.ffn_dropout(output_drop.ffn(a)) == 0).any()


def test_same_parameters_and_the_same_function_in_evaluation() -> None:
    spec = TaskSpec(kind="classify", input_vocab_size=12, n_classes=8, max_input_length=10)
    kwargs = dict(d_model=16, n_heads=1, d_ff=32, n_layers=3, dropout=P, ffn_dropout=False)
    hidden = build("ndr", spec, hidden_dropout=True, **kwargs)
    plain = build("ndr", spec, **kwargs)
    assert hidden.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(hidden.state_dict())
    x = torch.randint(0, 12, (4, 6))
    lengths = torch.tensor([6, 5, 3, 1])
    hidden.eval(), plain.eval()
    torch.testing.assert_close(hidden(x, lengths), plain(x, lengths), rtol=0, atol=0)
    hidden.train(), plain.train()  # the same seed draws the same masks but for the hidden units
    torch.manual_seed(0)
    with_hidden = hidden(x, lengths)
    torch.manual_seed(0)
    without = plain(x, lengths)
    torch.manual_seed(0)
    assert torch.equal(plain(x, lengths), without)
    assert not torch.equal(with_hidden, without)


def test_hidden_dropout_needs_the_dense_block() -> None:
    with pytest.raises(UserError, match="hidden_dropout applies to the dense feed-forward block"):
        TransformerClassifierConfig(hidden_dropout=True, ffn="sigma_moe")
