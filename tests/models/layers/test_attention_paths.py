"""The attention core and layouts against naive loops, values and gradients: ``attend`` with few keys
(logits computed transposed, softmax over the second-to-last axis) and with many, the head-major
``split_heads`` / ``merge_heads`` with and without token packing, and whole softmax and relative attention
layers (self, causal, cross, packed) against a loop over batch, head and query."""

from __future__ import annotations

import pytest
import torch

from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.relative_attention import RelativeSelfAttention
from recombine.models.layers.softmax_attention import (
    SHORT_ROWS,
    SoftmaxSelfAttention,
    attend,
    merge_heads,
    split_heads,
)
from recombine.models.layers.token_packing import TokenPacking

DOUBLE = torch.float64


def loop_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    hidden: torch.Tensor,
    scale: float,
    position: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One softmax per (batch entry, query) over the visible keys, written out."""
    *lead, n, _ = q.shape
    m = k.shape[-2]
    q, k, v = q.reshape(-1, n, q.shape[-1]), k.reshape(-1, m, k.shape[-1]), v.reshape(-1, m, v.shape[-1])
    hidden, position = (
        hidden.expand(*lead, n, m).reshape(-1, n, m),
        position.expand(*lead, n, m).reshape(-1, n, m),
    )
    outs, weights = [], []
    for b in range(q.shape[0]):
        for i in range(n):
            logits = torch.stack([(q[b, i] @ k[b, j] + position[b, i, j]) * scale for j in range(m)])
            visible = ~hidden[b, i]
            w = torch.zeros(m, dtype=q.dtype)
            w[visible] = torch.softmax(logits[visible], 0)
            weights.append(w)
            outs.append(w @ v[b])
    return torch.stack(outs).view(*lead, n, -1), torch.stack(weights).view(*lead, n, m)


@pytest.mark.parametrize("n_keys", [5, SHORT_ROWS - 1, SHORT_ROWS, 21])
def test_attend_equals_a_loop_for_short_and_long_key_rows(n_keys: int) -> None:
    torch.manual_seed(n_keys)
    n = 4
    q = torch.randn(2, 3, n, 4, dtype=DOUBLE, requires_grad=True)
    k = torch.randn(2, 3, n_keys, 4, dtype=DOUBLE, requires_grad=True)
    v = torch.randn(2, 3, n_keys, 4, dtype=DOUBLE, requires_grad=True)
    position = torch.randn(2, 3, n, n_keys, dtype=DOUBLE, requires_grad=True)
    hidden = torch.zeros(1, 3, n, n_keys, dtype=torch.bool)
    hidden[0, 1, :, 2:] = True  # a padded batch entry (batch on dim 1, as in the head-major layout)
    hidden[0, 2, 1, 0] = True  # one hidden pair
    mixed, weights = attend(q, k, v, hidden, 0.5, position)
    expected_mixed, expected_weights = loop_attention(q, k, v, hidden, 0.5, position)
    torch.testing.assert_close(mixed, expected_mixed)
    torch.testing.assert_close(weights, expected_weights)
    grad_out = torch.randn_like(mixed)
    inputs = (q, k, v, position)
    grads = torch.autograd.grad((mixed * grad_out).sum() + weights.pow(2).sum(), inputs)
    expected = torch.autograd.grad((expected_mixed * grad_out).sum() + expected_weights.pow(2).sum(), inputs)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_split_and_merge_heads_match_a_loop_with_and_without_packing() -> None:
    torch.manual_seed(0)
    lengths = torch.tensor([3, 1, 4])
    packing = TokenPacking.from_lengths(lengths, 4)
    x = torch.randn(3, 4, 2 * 3 * 5, dtype=DOUBLE)  # 2 stacked projections, 3 heads, d_head 5
    heads = split_heads(x, 6)
    for h in range(6):
        torch.testing.assert_close(heads[h], x[..., h * 5 : (h + 1) * 5])
    torch.testing.assert_close(merge_heads(heads), x)
    packed_heads = split_heads(packing.pack(x), 6, packing)
    real = torch.arange(4)[None, :] < lengths[:, None]
    torch.testing.assert_close(packed_heads[:, real], heads[:, real])
    assert (packed_heads[:, ~real] == 0).all()
    assert packed_heads.is_contiguous() and heads.is_contiguous()
    torch.testing.assert_close(merge_heads(packed_heads, packing), packing.pack(x))


def loop_softmax_layer(
    attn: SoftmaxSelfAttention, h: torch.Tensor, memory: torch.Tensor, padding: torch.Tensor, causal: bool
) -> torch.Tensor:
    """Vaswani et al. eq. 1 per batch entry, head and query, from the weight matrices."""
    d = h.shape[-1]
    heads, dh = attn.n_heads, attn.d_head
    w_q, w_k, w_v = attn.qkv.weight.split(d)
    b_q, b_k, b_v = attn.qkv.bias.split(d)
    rows = []
    for b in range(h.shape[0]):
        out = []
        for i in range(h.shape[1]):
            mixed = []
            for head in range(heads):
                part = slice(head * dh, (head + 1) * dh)
                q = h[b, i] @ w_q[part].T + b_q[part]
                keys = [j for j in range(memory.shape[1]) if not padding[b, j] and not (causal and j > i)]
                logits = torch.stack([q @ (memory[b, j] @ w_k[part].T + b_k[part]) for j in keys]) / dh**0.5
                values = torch.stack([memory[b, j] @ w_v[part].T + b_v[part] for j in keys])
                mixed.append(torch.softmax(logits, 0) @ values)
            out.append(attn.out(torch.cat(mixed)))
        rows.append(torch.stack(out))
    return torch.stack(rows)


@pytest.mark.parametrize("n_keys", [6, 17])  # below and above SHORT_ROWS
def test_softmax_attention_layer_equals_a_loop_values_and_gradients(n_keys: int) -> None:
    torch.manual_seed(1)
    attn = SoftmaxSelfAttention(8, 2).double()
    lengths = torch.tensor([n_keys, 2, n_keys - 3])
    padding = torch.arange(n_keys)[None, :] >= lengths[:, None]
    h = torch.randn(3, n_keys, 8, dtype=DOUBLE, requires_grad=True)
    memory = torch.randn(3, n_keys, 8, dtype=DOUBLE, requires_grad=True)
    queries = h[:, :4]
    packing = TokenPacking.from_lengths(lengths, n_keys)
    real = ~padding
    cases = [  # (computed, expected); a real query of a padded sequence only
        (attn(h, padding)[0][real], loop_softmax_layer(attn, h, h, padding, False)[real]),
        (attn(h, causal=True)[0], loop_softmax_layer(attn, h, h, torch.zeros_like(padding), True)),
        (attn(queries, padding, memory=memory)[0], loop_softmax_layer(attn, queries, memory, padding, False)),
        (  # packed causal self-attention: the real positions only
            attn(packing.pack(h), causal=True, packing=packing)[0],
            loop_softmax_layer(attn, h, h, padding, True)[real],
        ),
    ]
    params = [h, memory, *attn.parameters()]
    for computed, expected in cases:
        torch.testing.assert_close(computed, expected)
        grad_out = torch.randn_like(computed)
        got = torch.autograd.grad((computed * grad_out).sum(), params, allow_unused=True)
        want = torch.autograd.grad((expected * grad_out).sum(), params, allow_unused=True)
        for g, w in zip(got, want, strict=True):
            if w is None:
                assert g is None or (g == 0).all()
            else:
                torch.testing.assert_close(g, w)


def loop_relative_layer(
    attn: RelativeSelfAttention, h: torch.Tensor, padding: torch.Tensor, causal: bool
) -> torch.Tensor:
    """Thesis eq. D.7 terms (a)-(d) per batch entry, head, query and visible key, then softmax and output."""
    d = h.shape[-1]
    heads, dh = attn.n_heads, attn.d_head
    w_q, w_k, w_v = attn.qkv.weight.split(d)
    rows = []
    for b in range(h.shape[0]):
        out = []
        for i in range(h.shape[1]):
            mixed = []
            for head in range(heads):
                part = slice(head * dh, (head + 1) * dh)
                q = w_q[part] @ h[b, i]
                keys = [j for j in range(h.shape[1]) if not padding[b, j] and not (causal and j > i)]
                logits = []
                for j in keys:
                    p = sinusoidal_embedding(torch.tensor(float(i - j)), d).to(h.dtype)
                    content = (q + attn.content_bias[head]) @ (w_k[part] @ h[b, j])
                    position = (q + attn.position_bias[head]) @ (attn.position_key.weight[part] @ p)
                    logits.append((content + position) / dh**0.5)
                values = torch.stack([w_v[part] @ h[b, j] for j in keys])
                mixed.append(torch.softmax(torch.stack(logits), 0) @ values)
            out.append(attn.out(torch.cat(mixed)))
        rows.append(torch.stack(out))
    return torch.stack(rows)


@pytest.mark.parametrize("length", [5, 17])  # below and above SHORT_ROWS
def test_relative_attention_layer_equals_a_loop_values_and_gradients(length: int) -> None:
    torch.manual_seed(2)
    attn = RelativeSelfAttention(8, 2).double()
    torch.nn.init.normal_(attn.content_bias)
    torch.nn.init.normal_(attn.position_bias)
    lengths = torch.tensor([length, 2, length - 1])
    padding = torch.arange(length)[None, :] >= lengths[:, None]
    real = ~padding
    packing = TokenPacking.from_lengths(lengths, length)
    h = torch.randn(3, length, 8, dtype=DOUBLE, requires_grad=True)
    cases = [
        (attn(h, padding)[0][real], loop_relative_layer(attn, h, padding, False)[real]),
        (
            attn(packing.pack(h), padding, packing=packing)[0],
            loop_relative_layer(attn, h, padding, False)[real],
        ),
        (
            attn(packing.pack(h), causal=True, packing=packing)[0],
            loop_relative_layer(attn, h, padding, True)[real],
        ),
    ]
    params = [h, *attn.parameters()]
    for computed, expected in cases:
        torch.testing.assert_close(computed, expected)
        grad_out = torch.randn_like(computed)
        got = torch.autograd.grad((computed * grad_out).sum(), params)
        want = torch.autograd.grad((expected * grad_out).sum(), params)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
