"""Standard multi-head softmax attention (Vaswani et al., 2017, eq. 1; content only: an absolute PE,
if any, is added to the input).

Three uses, one module:

* self-attention: queries, keys and values all come from ``h``;
* causal self-attention (``causal=True``): query ``i`` sees keys ``j <= i`` only (a decoder);
* cross-attention (``memory`` given): queries from ``h``, keys and values from ``memory`` (the
  decoder reading the encoder; thesis C.3: "standard attention without any positional embedding").

With a :class:`~recombine.models.layers.kv_cache.KeyValueCache` (incremental decoding), self-attention
appends the keys and values of the new positions to those of earlier calls, and the queries are the
last positions; cross-attention computes those of ``memory`` in the first call and reuses them.

With a :class:`~recombine.models.layers.token_packing.TokenPacking` the projections run on the real
positions only (``h`` is ``[n, d_model]``); only the attention itself sees the padded ``[B, N]`` layout.
Without ``need_weights`` the attention is PyTorch's fused ``scaled_dot_product_attention`` (same
equation, no ``[B, heads, N, M]`` weights kept for the backward pass).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.token_packing import TokenPacking


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """Bool ``[n_queries, n_keys]``, True where key ``j`` lies in the future of query ``i``.

    The queries are the *last* ``n_queries`` of the ``n_keys`` positions, so ``n_queries == n_keys`` is
    the usual strict upper triangle."""
    i = torch.arange(n_keys - n_queries, n_keys, device=device)
    return torch.arange(n_keys, device=device)[None, :] > i[:, None]


def hidden_keys(
    key_padding_mask: torch.Tensor | None, causal: bool, n_queries: int, n_keys: int, device: torch.device
) -> torch.Tensor | None:
    """Bool, broadcastable to ``[B, heads, n_queries, n_keys]``: True where a query must not see a key
    (a padded key, or with ``causal`` a future one); None when every key is visible."""
    hidden = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if causal and n_queries > 1:  # one query is the newest position: it sees every key
        future = causal_mask(n_queries, n_keys, device)
        hidden = future if hidden is None else hidden | future
    return hidden


class SoftmaxSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)  # [W_q; W_k; W_v]
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """``[B, L, n * d_model]`` -> ``n`` tensors stacked as ``[n, B, n_heads, L, d_head]``."""
        return x.view(x.shape[0], x.shape[1], n, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)

    def forward(
        self,
        h: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        causal: bool = False,
        memory: torch.Tensor | None = None,
        cache: KeyValueCache | None = None,
        packing: TokenPacking | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args:
            h: ``[B, N, d_model]`` states the queries are computed from, or ``[n, d_model]`` real positions
                packed by ``packing`` (:mod:`~recombine.models.layers.token_packing`).
            key_padding_mask: optional bool ``[B, M]``, True marks a padded key.
            causal: hide keys in the future of each query (see :func:`causal_mask`).
            memory: optional ``[B, M, d_model]`` states keys and values are read from (cross-attention).
            cache: keys and values of earlier calls (incremental decoding, see the module docstring).
            packing: ``h`` holds only the real positions; the output is packed the same way.
            need_weights: return the attention weights; False computes the same output with the fused
                ``F.scaled_dot_product_attention`` and returns ``None`` for them.
        Returns:
            ``(out [B, N, d_model] or [n, d_model], attention [B, n_heads, N, M] or None)``.
        """
        d_model = h.shape[-1]
        if memory is None:
            q, k, v = self._heads(_unpacked(self.qkv(h), packing), 3)
            if cache is not None:
                k, v = cache.append(k, v)
        else:  # the same projections: queries from h, keys and values from memory
            w_q, w_kv = self.qkv.weight.split([d_model, 2 * d_model])
            b_q, b_kv = self.qkv.bias.split([d_model, 2 * d_model])
            q = self._heads(_unpacked(F.linear(h, w_q, b_q), packing), 1)[0]
            if cache is not None and cache.keys is not None and cache.values is not None:
                k, v = cache.keys, cache.values  # memory is the same at every decoding step
            else:
                k, v = self._heads(F.linear(memory, w_kv, b_kv), 2)
                if cache is not None:
                    cache.append(k, v)
        batch, _, length, _ = q.shape
        q = self.dropout(q)
        hidden = hidden_keys(key_padding_mask, causal, length, k.shape[2], h.device)
        if need_weights:
            logits = (q @ k.transpose(-1, -2)) * self.d_head**-0.5
            if hidden is not None:
                logits = logits.masked_fill(hidden, float("-inf"))
            attention: torch.Tensor | None = logits.softmax(-1)
            mixed = attention @ v
        else:  # the same softmax(q k^T / sqrt(d_head)) v, fused
            attention = None
            if causal and key_padding_mask is None and length == k.shape[2]:  # the plain lower triangle
                mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                allowed = None if hidden is None else ~hidden
                mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        out = mixed.transpose(1, 2).reshape(batch, length, -1)
        return self.out(out if packing is None else packing.pack(out)), attention


def _unpacked(x: torch.Tensor, packing: TokenPacking | None) -> torch.Tensor:
    """``x`` in the ``[B, N, ...]`` layout attention needs."""
    return x if packing is None else packing.unpack(x)
