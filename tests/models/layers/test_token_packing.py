"""Packing the real positions of a right-padded batch: pack/unpack against a loop, and packed decoder and
encoder layers equal to the padded ones at every real position (values and gradients)."""

from __future__ import annotations

import torch

from recombine.models.layers.decoder_layer import DecoderLayer
from recombine.models.layers.encoder_layer import EncoderLayer
from recombine.models.layers.token_packing import TokenPacking


def test_pack_and_unpack_match_a_loop_over_real_positions() -> None:
    lengths = torch.tensor([2, 0, 4, 1])
    x = torch.randn(4, 4, 3, dtype=torch.float64)
    packing = TokenPacking.from_lengths(lengths, 4)
    expected_rows = [x[b, t] for b in range(4) for t in range(int(lengths[b]))]
    packed = packing.pack(x)
    torch.testing.assert_close(packed, torch.stack(expected_rows))
    assert packing.positions.tolist() == [t for b in range(4) for t in range(int(lengths[b]))]
    unpacked = packing.unpack(packed)
    real = torch.arange(4)[None, :] < lengths[:, None]
    torch.testing.assert_close(unpacked[real], x[real])
    assert (unpacked[~real] == 0).all()


def test_packed_decoder_layer_equals_padded_layer_at_real_positions() -> None:
    for attention in ("softmax", "relative"):
        torch.manual_seed(0)
        layer = DecoderLayer(16, 2, 32, dropout=0.0, attention=attention).double()
        lengths = torch.tensor([5, 2, 3])
        h = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
        memory = torch.randn(3, 4, 16, dtype=torch.float64)
        memory_padding = torch.tensor([[False] * 4, [False, False, True, True], [False, False, False, True]])
        packing = TokenPacking.from_lengths(lengths, 5)
        real = torch.arange(5)[None, :] < lengths[:, None]

        padded = layer(h, memory, memory_padding)[real]
        packed = layer(packing.pack(h), memory, memory_padding, packing=packing)
        torch.testing.assert_close(packed, padded)

        weights = torch.randn_like(padded)
        (grad_padded,) = torch.autograd.grad((padded * weights).sum(), h)
        (grad_packed,) = torch.autograd.grad((packed * weights).sum(), h)
        torch.testing.assert_close(grad_packed, grad_padded)
        assert (
            grad_padded[~real] == 0
        ).all()  # in the padded layer, too, padding influences no real position


def test_packed_encoder_layer_equals_padded_layer_at_real_positions() -> None:
    """The seq2seq encoder's form: key padding hides the padded positions, which are not computed."""
    for attention in ("softmax", "relative"):
        torch.manual_seed(1)
        layer = EncoderLayer(16, 2, 32, dropout=0.0, attention=attention, copy_gate=False).double()
        lengths = torch.tensor([5, 2, 3])
        padding = torch.arange(5)[None, :] >= lengths[:, None]
        real = ~padding
        h = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
        packing = TokenPacking.from_lengths(lengths, 5)

        padded, padded_info = layer(h, padding)
        packed, packed_info = layer(packing.pack(h), padding, packing)
        torch.testing.assert_close(packed, padded[real])
        by_query = [info["attention"].transpose(1, 2)[real] for info in (packed_info, padded_info)]
        torch.testing.assert_close(*by_query)  # [B, N, heads, M] at the real queries

        weights = torch.randn_like(packed)
        params = [h, *layer.parameters()]
        grads_padded = torch.autograd.grad((padded[real] * weights).sum(), params)
        grads_packed = torch.autograd.grad((packed * weights).sum(), params)
        for packed_grad, padded_grad in zip(grads_packed, grads_padded, strict=True):
            torch.testing.assert_close(packed_grad, padded_grad)
