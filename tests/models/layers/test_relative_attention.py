"""Relative and gated abs/rel attention logits against a loop over the terms of thesis eq. D.7."""

from __future__ import annotations

import torch

from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.relative_attention import RelativeSelfAttention


def naive_logits(attn: RelativeSelfAttention, h: torch.Tensor) -> torch.Tensor:
    """Loop over (i, j): (a) + (c) + [(b) + (d)] on r_i p_{i-j} + (1 - r_i) p_j, scaled by 1/sqrt(d_head)."""
    batch, n, d = h.shape
    heads, dh = attn.n_heads, attn.d_head
    w_q, w_k, _ = attn.qkv.weight.split(d, dim=0)
    logits = torch.zeros(batch, heads, n, n, dtype=h.dtype)
    for b in range(batch):
        for head in range(heads):
            rows = slice(head * dh, (head + 1) * dh)
            for i in range(n):
                q = w_q[rows] @ h[b, i]
                if attn.absolute_gate is None:
                    r = torch.tensor(1.0, dtype=h.dtype)
                else:
                    r = torch.sigmoid(
                        attn.absolute_gate.weight[head] @ h[b, i] + attn.absolute_gate.bias[head]
                    )
                for j in range(n):
                    k = w_k[rows] @ h[b, j]
                    p_rel = sinusoidal_embedding(torch.tensor(float(i - j)), d).to(h.dtype)
                    p_abs = sinusoidal_embedding(torch.tensor(float(j)), d).to(h.dtype)
                    kp = attn.position_key.weight[rows] @ (r * p_rel + (1 - r) * p_abs)
                    value = (q + attn.content_bias[head]) @ k + (q + attn.position_bias[head]) @ kp
                    logits[b, head, i, j] = value / dh**0.5
    return logits


def _attention_logits(attn: RelativeSelfAttention, h: torch.Tensor) -> torch.Tensor:
    _, weights = attn(h)
    return weights.log()  # softmax is shift invariant: compare log-weights after centring


def _centre(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(-1, keepdim=True)


def test_relative_attention_matches_loop() -> None:
    torch.manual_seed(0)
    attn = RelativeSelfAttention(8, 2).double()
    torch.nn.init.normal_(attn.content_bias)
    torch.nn.init.normal_(attn.position_bias)
    h = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(_centre(_attention_logits(attn, h)), _centre(naive_logits(attn, h)))


def test_gated_absolute_relative_matches_loop() -> None:
    torch.manual_seed(1)
    attn = RelativeSelfAttention(8, 2, absolute_gate=True).double()
    torch.nn.init.normal_(attn.position_bias)
    torch.nn.init.normal_(attn.absolute_gate.weight)
    h = torch.randn(2, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(_centre(_attention_logits(attn, h)), _centre(naive_logits(attn, h)))


def test_relative_attention_is_translation_invariant_without_padding() -> None:
    """Purely relative positions: the same content at any offset gives the same attention pattern."""
    torch.manual_seed(2)
    attn = RelativeSelfAttention(8, 2).eval()
    h = torch.randn(1, 4, 8)
    _, short = attn(h)
    padded = torch.cat([torch.randn(1, 3, 8), h], dim=1)
    mask = torch.tensor([[True, True, True, False, False, False, False]])
    _, long = attn(padded, key_padding_mask=mask)
    torch.testing.assert_close(long[:, :, 3:, 3:], short, atol=1e-6, rtol=1e-5)
