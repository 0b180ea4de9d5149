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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recombine.models.layers.kv_cache import KeyValueCache


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """Bool ``[n_queries, n_keys]``, True where key ``j`` lies in the future of query ``i``.

    The queries are the *last* ``n_queries`` of the ``n_keys`` positions, so ``n_queries == n_keys`` is
    the usual strict upper triangle."""
    i = torch.arange(n_keys - n_queries, n_keys, device=device)
    return torch.arange(n_keys, device=device)[None, :] > i[:, None]


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
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            h: ``[B, N, d_model]`` states the queries are computed from.
            key_padding_mask: optional bool ``[B, M]``, True marks a padded key.
            causal: hide keys in the future of each query (see :func:`causal_mask`).
            memory: optional ``[B, M, d_model]`` states keys and values are read from (cross-attention).
            cache: keys and values of earlier calls (incremental decoding, see the module docstring).
        Returns:
            ``(out [B, N, d_model], attention [B, n_heads, N, M])``.
        """
        batch, length, d_model = h.shape
        if memory is None:
            q, k, v = self._heads(self.qkv(h), 3)
            if cache is not None:
                k, v = cache.append(k, v)
        else:  # the same projections: queries from h, keys and values from memory
            w_q, w_kv = self.qkv.weight.split([d_model, 2 * d_model])
            b_q, b_kv = self.qkv.bias.split([d_model, 2 * d_model])
            q = self._heads(F.linear(h, w_q, b_q), 1)[0]
            if cache is not None and cache.keys is not None and cache.values is not None:
                k, v = cache.keys, cache.values  # memory is the same at every decoding step
            else:
                k, v = self._heads(F.linear(memory, w_kv, b_kv), 2)
                if cache is not None:
                    cache.append(k, v)
        logits = (self.dropout(q) @ k.transpose(-1, -2)) * self.d_head**-0.5
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if causal:
            logits = logits.masked_fill(causal_mask(length, k.shape[2], h.device), float("-inf"))
        attention = logits.softmax(-1)
        out = (attention @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.out(out), attention
