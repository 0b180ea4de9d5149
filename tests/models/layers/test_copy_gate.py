"""Copy gate (thesis eqs. 5.3-5.4): a closed gate makes the whole layer the identity."""

from __future__ import annotations

import pytest
import torch

from recombine.models.layers.copy_gate import GATE_BIAS_INIT, CopyGate
from recombine.models.layers.encoder_layer import EncoderLayer


@pytest.mark.parametrize("attention", ["softmax", "relative", "gated_absrel", "geometric"])
def test_closed_gate_layer_is_identity(attention: str) -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, attention=attention, copy_gate=True)
    with torch.no_grad():
        layer.copy_gate.ffn[-1].bias.fill_(-1e4)  # sigmoid(-1e4) == 0 exactly in float32
    h = torch.randn(3, 7, 16)
    out, info = layer(h)
    assert torch.equal(info["gate"], torch.zeros_like(info["gate"]))
    torch.testing.assert_close(out, h, rtol=0, atol=0)


def test_open_gate_takes_the_update() -> None:
    torch.manual_seed(0)
    gate = CopyGate(8)
    with torch.no_grad():
        gate.ffn[-1].bias.fill_(1e4)
    attended, update, previous = torch.randn(3, 2, 4, 8).unbind(0)
    out, g = gate(attended, update, previous)
    torch.testing.assert_close(out, update)
    assert torch.all(g == 1)


def test_gate_bias_starts_mostly_closed() -> None:
    gate = CopyGate(32)
    assert torch.all(gate.ffn[-1].bias == GATE_BIAS_INIT)
    with torch.no_grad():
        gate.ffn[-1].weight.zero_()
    g = gate.gate(torch.randn(5, 32))
    torch.testing.assert_close(g, torch.full_like(g, torch.sigmoid(torch.tensor(-3.0)).item()))


def test_gate_dropout_closes_whole_columns_in_training_only() -> None:
    torch.manual_seed(0)
    gate = CopyGate(8, gate_dropout=1.0)
    with torch.no_grad():
        gate.ffn[-1].bias.fill_(1e4)  # open: without gate dropout the output is the update
    attended, update, previous = torch.randn(3, 4, 5, 8).unbind(0)
    out, _ = gate.train()(attended, update, previous)
    torch.testing.assert_close(out, previous)
    out, _ = gate.eval()(attended, update, previous)
    torch.testing.assert_close(out, update)

    gate = CopyGate(8, gate_dropout=0.3).train()
    with torch.no_grad():
        gate.ffn[-1].bias.fill_(1e4)
    attended, update, previous = torch.randn(3, 100, 50, 8).unbind(0)
    out, _ = gate(attended, update, previous)
    kept = (out == previous).all(-1)  # a column is either fully copied or fully updated
    updated = (out == update).all(-1)
    assert torch.all(kept | updated)
    assert abs(kept.float().mean().item() - 0.3) < 0.03
