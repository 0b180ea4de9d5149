"""Relative positional self-attention (Transformer-XL form) and its gated absolute/relative variant.

Thesis eq. D.7 (Dai et al., 2019, extended in thesis D.2): the attention logit between target
``i`` and source ``j`` is

    (a) content:   q_i^T  W_kE h_j          (c) global content bias:  b_qE^T W_kE h_j
    (b) position:  q_i^T  W_kP p            (d) global position bias: b_qP^T W_kP p

with ``p = p_{i-j}`` (relative). The gated variant (term (e)) mixes ``p = r_i p_{i-j} + (1 - r_i) p_j``
with a gate ``r_i = sigmoid(W_ar h_i + b_ar)`` (eq. D.6) computed per head from the target state.
The encoder uses the symmetric variant: offsets ``i - j`` in ``[-(N-1), N-1]`` (thesis C.3). With
``causal=True`` (a decoder, as in Transformer-XL itself) query ``i`` sees keys ``j <= i`` only, so only
the offsets ``i - j`` in ``[0, N-1]`` occur.

With a :class:`~recombine.models.layers.kv_cache.KeyValueCache` (incremental decoding) the keys and
values of the new positions are appended to those of earlier calls, and the queries are the last
positions: ``i`` runs over the newest ``N`` of all ``M`` positions.

The position terms are computed once per offset, ``[N, 2M-1]`` (``[N, M+1]`` causal), and moved to their
``(i, j)`` places by one strided view (:func:`relative_shift`). With a
:class:`~recombine.models.layers.token_packing.TokenPacking` the projections run on the real positions
only. As in :mod:`~recombine.models.layers.softmax_attention`, the attention runs in the head-major
``[heads, B, N, d_head]`` layout (``split_heads``, ``attend``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.softmax_attention import attend, hidden_keys, merge_heads, split_heads
from recombine.models.layers.token_packing import TokenPacking


class RelativeSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, absolute_gate: bool = False) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.position_key = nn.Linear(d_model, d_model, bias=False)  # W_kP
        self.content_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))  # b_qE, term (c)
        self.position_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))  # b_qP, term (d)
        self.absolute_gate = nn.Linear(d_model, n_heads) if absolute_gate else None  # eq. D.6
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _position_keys(self, positions: torch.Tensor) -> torch.Tensor:
        """``W_kP p`` for each position: ``[n_heads, len(positions), d_head]``."""
        weight = self.position_key.weight
        keys = self.position_key(sinusoidal_embedding(positions, self.d_model).to(weight.dtype))
        return keys.view(len(positions), self.n_heads, self.d_head).transpose(0, 1)

    def forward(
        self,
        h: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        causal: bool = False,
        cache: KeyValueCache | None = None,
        packing: TokenPacking | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``h [B, N, d_model]`` (or ``[n, d_model]``, the real positions packed by ``packing``), optional
        bool ``key_padding_mask [B, M]`` (True = padded key), ``causal`` hides keys ``j > i``, ``cache``
        holds earlier positions (``M = N`` without one). ``need_weights=False`` returns ``None`` for the
        weights (the fused ``F.scaled_dot_product_attention`` with terms (b) + (d) as its additive mask
        was measured slower on CPU than this explicit form, so both compute the same way).
        Returns ``(out [B, N, d_model] or [n, d_model], attention [B, n_heads, N, M] or None)``."""
        heads = self.n_heads
        # [heads, B, N, d_head] each (softmax_attention.split_heads; zeros at the padding with packing)
        q, k, v = split_heads(self.qkv(h), 3 * heads, packing).unflatten(0, (3, heads)).unbind(0)
        _, batch, length, _ = q.shape
        if cache is not None:
            k, v = cache.append(k, v)
        n_keys = k.shape[2]
        # thesis D.3.3: dropout on the content and position query components
        content_query = self.dropout(q) + self.content_bias[:, None, None]  # queries of (a) + (c)
        position_query = self.dropout(q) + self.position_bias[:, None, None]  # queries of (b) + (d)

        # i - j from M-1 down to -(M-1) (symmetric, thesis C.3), or down to -1 (causal: offset -1 is never
        # attended to; its column gives relative_shift the width M + 1 it needs without a padding copy)
        offsets = torch.arange(n_keys - 1, -2 if causal else -n_keys, -1, device=q.device)
        # [heads, B, N, 2M-1 or M+1]: one matmul per head over all (b, i), no transposing copy
        by_offset = self._by_position(position_query, self._position_keys(offsets))
        position = relative_shift(by_offset, n_keys)  # [heads, B, N, M]: p_{i-j} (causal: j > i arbitrary)
        if self.absolute_gate is not None:  # term (e): r_i p_{i-j} + (1 - r_i) p_j, linear in p
            j = torch.arange(n_keys, device=q.device)
            absolute = self._by_position(position_query, self._position_keys(j))
            gate = self.absolute_gate(h)
            if packing is not None:
                gate = packing.unpack(gate)
            r = torch.sigmoid(gate).permute(2, 0, 1).unsqueeze(-1)  # [heads, B, N, 1]
            position = r * position + (1 - r) * absolute

        hidden = hidden_keys(key_padding_mask, causal, length, n_keys, q.device)
        mixed, attention = attend(content_query, k, v, hidden, self.d_head**-0.5, position)
        out = self.out(merge_heads(mixed, packing))
        return out, attention.transpose(0, 1) if need_weights else None

    @staticmethod
    def _by_position(query: torch.Tensor, position_keys: torch.Tensor) -> torch.Tensor:
        """``query [heads, B, N, d_head]`` times ``position_keys [heads, W, d_head]``: ``[heads, B, N, W]``
        (one matmul per head over all ``(b, i)``)."""
        heads, batch, length, d_head = query.shape
        products = query.reshape(heads, batch * length, d_head) @ position_keys.transpose(-1, -2)
        return products.view(heads, batch, length, -1)


def relative_shift(by_offset: torch.Tensor, n_keys: int) -> torch.Tensor:
    """``[..., N, M]`` with entry ``(i, j)`` the column for offset ``i - j`` of ``by_offset [..., N, W]``,
    whose column ``c`` holds offset ``(M - 1) - c`` and whose rows are the last ``N`` of ``M`` positions.

    Row ``r`` (position ``i = M - N + r``) reads columns ``N - 1 - r + j``: in the row-major layout of a
    ``[N, W']`` tensor that is flat index ``r (W' - 1) + j + N - 1``, so one strided view does the shift
    (Transformer-XL's trick, Dai et al., 2019, App. B), without a gather or a copy. ``W' >= M + 1`` keeps
    the ``M`` entries of a row inside the row's stride; columns beyond ``W`` (causal ``j > i``) read
    other entries or zero padding and must be masked by the caller."""
    n_queries, width = by_offset.shape[-2:]
    if width < n_keys + 1:
        by_offset = F.pad(by_offset, (0, n_keys + 1 - width))
        width = n_keys + 1
    flat = by_offset.contiguous().flatten(-2)[..., n_queries - 1 : n_queries - 1 + n_queries * (width - 1)]
    return flat.unflatten(-1, (n_queries, width - 1))[..., :n_keys]
