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

The attention runs in the head-major layout ``[heads, B, N, d_head]`` (:func:`split_heads`), where
every matmul is one batched matmul over ``heads * B`` without a transposing copy, and the weights come
from :func:`attend`. PyTorch's fused ``scaled_dot_product_attention`` was measured slower than this
explicit form on the development CPU for these sizes (forward + backward, 9 to 27 keys, ``d_head`` 16),
so ``need_weights=False`` only drops the weights from the result.
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
    """Bool, broadcastable to the head-major ``[heads, B, n_queries, n_keys]``: True where a query must not
    see a key (a padded key, or with ``causal`` a future one); None when every key is visible."""
    hidden = None if key_padding_mask is None else key_padding_mask[None, :, None, :]
    if causal and n_queries > 1:  # one query is the newest position: it sees every key
        future = causal_mask(n_queries, n_keys, device)
        hidden = future if hidden is None else hidden | future
    return hidden


#: Below this many keys the softmax runs over the keys as the second-to-last axis of a ``[..., keys,
#: queries]`` tensor: PyTorch's CPU softmax over a last axis shorter than 16 is about 10x slower than
#: over an inner one (``[2048, 27, 9]``: 10 ms against 0.9 ms forward; from 16 on the last axis is faster).
SHORT_ROWS = 16


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    hidden: torch.Tensor | None,
    scale: float,
    position: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(softmax(logits) v, softmax(logits))`` with ``logits = (q k^T + position) * scale``, ``-inf`` where
    ``hidden``; ``q [..., N, d]``, ``k``, ``v [..., M, d]``, ``position`` and ``hidden`` broadcastable to
    ``[..., N, M]``. Returns ``([..., N, d], weights [..., N, M])``; with fewer than :data:`SHORT_ROWS`
    keys the logits are computed as their transpose ``k q^T`` and the weights are a transposed view.

    The logits are updated in place, and ``hidden`` is added as a ``0 / -inf`` bias rather than filled
    in: its backward passes the gradient through, where a ``masked_fill`` would zero entries again that
    the softmax backward already leaves at zero."""
    transposed = k.shape[-2] < SHORT_ROWS
    logits = k @ q.transpose(-1, -2) if transposed else q @ k.transpose(-1, -2)
    if position is not None:
        logits += position.transpose(-1, -2) if transposed else position
    logits *= scale
    if hidden is not None:
        bias = torch.zeros(hidden.shape, dtype=logits.dtype, device=logits.device)
        bias.masked_fill_(hidden, float("-inf"))
        logits += bias.transpose(-1, -2) if transposed else bias
    weights = logits.softmax(-2).transpose(-1, -2) if transposed else logits.softmax(-1)
    return weights @ v, weights


def split_heads(x: torch.Tensor, n_heads: int, packing: TokenPacking | None = None) -> torch.Tensor:
    """``[B, N, n_heads * d_head]`` (or ``[n, ...]`` packed by ``packing``, zeros at the padding then) ->
    the head-major ``[n_heads, B, N, d_head]``, contiguous. ``n_heads`` may count stacked projections
    (``3 * heads`` for ``q, k, v``)."""
    if packing is not None:
        return packing.unpack_heads(x, n_heads)
    batch, length, width = x.shape
    return x.view(batch, length, n_heads, width // n_heads).permute(2, 0, 1, 3).contiguous()


def merge_heads(x: torch.Tensor, packing: TokenPacking | None = None) -> torch.Tensor:
    """The inverse of :func:`split_heads`: ``[n_heads, B, N, d_head]`` -> ``[B, N, n_heads * d_head]``, or
    the real positions ``[n, n_heads * d_head]`` with ``packing``."""
    if packing is not None:
        return packing.pack_heads(x)
    n_heads, batch, length, d_head = x.shape
    return x.permute(1, 2, 0, 3).reshape(batch, length, n_heads * d_head)


class SoftmaxSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)  # [W_q; W_k; W_v]
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

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
            need_weights: return the attention weights (False: ``None`` for them).
        Returns:
            ``(out [B, N, d_model] or [n, d_model], attention [B, n_heads, N, M] or None)``.
        """
        d_model, heads = h.shape[-1], self.n_heads
        if memory is None:
            q, k, v = split_heads(self.qkv(h), 3 * heads, packing).unflatten(0, (3, heads)).unbind(0)
            if cache is not None:
                k, v = cache.append(k, v)
        else:  # the same projections: queries from h, keys and values from memory
            w_q, w_kv = self.qkv.weight.split([d_model, 2 * d_model])
            b_q, b_kv = self.qkv.bias.split([d_model, 2 * d_model])
            q = split_heads(F.linear(h, w_q, b_q), heads, packing)
            if cache is not None and cache.keys is not None and cache.values is not None:
                k, v = cache.keys, cache.values  # memory is the same at every decoding step
            else:
                k, v = split_heads(F.linear(memory, w_kv, b_kv), 2 * heads).unflatten(0, (2, heads)).unbind(0)
                if cache is not None:
                    cache.append(k, v)
        q = self.dropout(q)
        hidden = hidden_keys(key_padding_mask, causal, q.shape[2], k.shape[2], h.device)
        mixed, attention = attend(q, k, v, hidden, self.d_head**-0.5)
        out = self.out(merge_heads(mixed, packing))
        return out, attention.transpose(0, 1) if need_weights else None
