"""Relative and gated abs/rel attention logits against a loop over the terms of thesis eq. D.7; the
causal form, key/value caching, and cross-attention."""

from __future__ import annotations

import torch

from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.relative_attention import RelativeSelfAttention, relative_shift
from recombine.models.layers.softmax_attention import SoftmaxSelfAttention


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


def test_causal_relative_attention_matches_masked_loop() -> None:
    """Causal (decoder) form: the loop's logits with keys j > i removed from each query's softmax."""
    torch.manual_seed(3)
    attn = RelativeSelfAttention(8, 2).double()
    torch.nn.init.normal_(attn.content_bias)
    torch.nn.init.normal_(attn.position_bias)
    h = torch.randn(2, 5, 8, dtype=torch.float64)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    expected = naive_logits(attn, h).masked_fill(future, float("-inf")).softmax(-1)
    _, weights = attn(h, causal=True)
    torch.testing.assert_close(weights, expected)


def test_cached_incremental_attention_equals_full_causal_attention() -> None:
    """Feeding positions one at a time with a key/value cache gives the full causal outputs, for the
    relative and the softmax form."""
    torch.manual_seed(4)
    h = torch.randn(2, 6, 8, dtype=torch.float64)
    for attn in (RelativeSelfAttention(8, 2).double(), SoftmaxSelfAttention(8, 2).double()):
        full, _ = attn(h, causal=True)
        cache = KeyValueCache()
        steps = [attn(h[:, t : t + 1], causal=True, cache=cache)[0] for t in range(6)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full)
        assert cache.length == 6


def test_cross_attention_reads_memory_and_reuses_its_cached_keys() -> None:
    torch.manual_seed(5)
    attn = SoftmaxSelfAttention(8, 2).double()
    h, memory = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 4, 8, dtype=torch.float64)
    padding = torch.tensor([[False, False, False, True], [False] * 4])
    w_q, w_k, w_v = attn.qkv.weight.split(8)
    b_q, b_k, b_v = attn.qkv.bias.split(8)
    q = (h @ w_q.T + b_q).view(2, 3, 2, 4).transpose(1, 2)
    k = (memory @ w_k.T + b_k).view(2, 4, 2, 4).transpose(1, 2)
    logits = (q @ k.transpose(-1, -2) / 2.0).masked_fill(padding[:, None, None, :], float("-inf"))
    _, weights = attn(h, padding, memory=memory)
    torch.testing.assert_close(weights, logits.softmax(-1))
    cache = KeyValueCache()
    first, _ = attn(h, padding, memory=memory, cache=cache)
    again, _ = attn(h, padding, memory=torch.zeros_like(memory), cache=cache)  # keys come from the cache
    torch.testing.assert_close(again, first)


def test_relative_shift_places_each_offset_column_at_i_minus_j() -> None:
    """Against an index loop: column (M-1) - (i-j) of row i, for queries that are the last N of M
    positions, with the symmetric width 2M-1 and the causal width M+1 (offsets M-1 .. -1)."""
    for n_queries, n_keys, causal in [(5, 5, False), (5, 5, True), (2, 6, True), (1, 4, True), (1, 1, False)]:
        width = n_keys + 1 if causal else 2 * n_keys - 1
        by_offset = torch.randn(2, 3, n_queries, width, dtype=torch.float64)
        shifted = relative_shift(by_offset, n_keys)
        assert shifted.shape == (2, 3, n_queries, n_keys)
        for r in range(n_queries):
            i = n_keys - n_queries + r
            for j in range(n_keys):
                if causal and j > i:
                    continue  # masked by the caller
                torch.testing.assert_close(shifted[..., r, j], by_offset[..., r, n_keys - 1 - (i - j)])


def test_fused_attention_paths_equal_the_explicit_ones() -> None:
    """``need_weights=False`` gives the same outputs (and no weights), also with key padding, causal
    masking and a cache."""
    torch.manual_seed(6)
    h, memory = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 4, 8, dtype=torch.float64)
    padding = torch.tensor([[False] * 4, [False, False, False, True], [False, True, True, True]])
    softmax, relative = SoftmaxSelfAttention(8, 2).double(), RelativeSelfAttention(8, 2).double()
    for attn, kwargs in [
        (softmax, {"causal": True}),
        (softmax, {"key_padding_mask": padding, "memory": memory}),
        (relative, {"causal": True}),
    ]:
        explicit, weights = attn(h, **kwargs)
        fused, none = attn(h, **kwargs, need_weights=False)
        assert weights is not None and none is None
        torch.testing.assert_close(fused, explicit)
    full, _ = softmax(h, causal=True)
    cache = KeyValueCache()
    steps = [softmax(h[:, :2], causal=True, cache=cache, need_weights=False)[0]]
    steps += [softmax(h[:, t : t + 1], causal=True, cache=cache, need_weights=False)[0] for t in range(2, 5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
