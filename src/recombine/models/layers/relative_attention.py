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
"""

from __future__ import annotations

import torch
from torch import nn

from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.softmax_attention import causal_mask


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
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``h [B, N, d_model]``, optional bool ``key_padding_mask [B, M]`` (True = padded key), ``causal``
        hides keys ``j > i``, ``cache`` holds earlier positions (``M = N`` without one).
        Returns ``(out [B, N, d_model], attention [B, n_heads, N, M])``."""
        batch, length, _ = h.shape
        q, k, v = self.qkv(h).view(batch, length, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.append(k, v)
        n_keys = k.shape[2]
        # thesis D.3.3: dropout on the content and position query components
        content = (self.dropout(q) + self.content_bias[:, None]) @ k.transpose(-1, -2)  # (a) + (c)
        position_query = self.dropout(q) + self.position_bias[:, None]  # queries of (b) + (d)

        # i - j from M-1 down to -(M-1) (symmetric, thesis C.3), or down to 0 (causal)
        offsets = torch.arange(n_keys - 1, -1 if causal else -n_keys, -1, device=h.device)
        by_offset = position_query @ self._position_keys(offsets).transpose(-1, -2)  # [B, H, N, 2M-1 or M]
        i = torch.arange(n_keys - length, n_keys, device=h.device)  # the queries are the last positions
        j = torch.arange(n_keys, device=h.device)
        offset_index = (n_keys - 1) - (i[:, None] - j[None, :])  # column of offset i - j
        if causal:
            offset_index = offset_index.clamp(max=n_keys - 1)  # j > i: any column, masked below
        relative = by_offset.gather(-1, offset_index.expand(batch, self.n_heads, length, n_keys))
        if self.absolute_gate is None:
            position = relative
        else:  # term (e): r_i p_{i-j} + (1 - r_i) p_j, linear in p so the logits mix the same way
            absolute = position_query @ self._position_keys(j).transpose(-1, -2)
            r = torch.sigmoid(self.absolute_gate(h)).transpose(1, 2).unsqueeze(-1)  # [B, H, N, 1]
            position = r * relative + (1 - r) * absolute

        logits = (content + position) * self.d_head**-0.5
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if causal:
            logits = logits.masked_fill(causal_mask(length, n_keys, h.device), float("-inf"))
        attention = logits.softmax(-1)
        out = (attention @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.out(out), attention
