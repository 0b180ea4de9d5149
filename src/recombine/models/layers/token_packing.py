"""The real positions of a right-padded batch, so that position-wise work skips the padding.

A teacher-forced decoder batch ``[B, T]`` holds sequences of lengths ``len_b <= T``, right-padded. Every
operation of a Transformer layer except attention acts on each position alone (projections, LayerNorm,
dropout, feed-forward, output layer; Vaswani et al., 2017, sec. 3.3), so it can run on the ``n = sum_b
len_b`` real positions stacked as ``[n, d]`` ("packed") instead of all ``B T``. Attention needs the
``[B, T]`` layout: :meth:`TokenPacking.unpack` scatters packed rows back (zeros at the padding) and
:meth:`TokenPacking.pack` gathers the real rows again. :meth:`TokenPacking.unpack_heads` and
:meth:`TokenPacking.pack_heads` do the same for projections split into attention heads, straight into and
out of the head-major ``[heads, B, T, d_head]`` layout the attention matmuls run on, one ``d_head`` row
per head and position (no separate transposing copy, forward or backward).

This changes no real position's value: with causal self-attention a real query ``i < len_b`` only sees
keys ``j <= i``, which are real, and cross-attention reads the encoder only. Padded positions, whose
outputs nobody uses, come back as zeros. On SCAN's length split (targets of 1 to 27 positions) about
half of the decoder positions are padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TokenPacking:
    index: torch.Tensor  # [n] int64: flat position b * length + t of each real position, in order
    batch: int  # B
    length: int  # T
    # row indices of unpack_heads / pack_heads by number of heads, computed once per packing
    _head_rows: dict[int, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor, length: int) -> TokenPacking:
        """Positions ``t < lengths[b]`` of a ``[len(lengths), length]`` batch are real."""
        real = torch.arange(length, device=lengths.device)[None, :] < lengths[:, None]
        return cls(real.flatten().nonzero().squeeze(1), len(lengths), length)

    @property
    def positions(self) -> torch.Tensor:
        """``[n]``: the time step ``t`` of each real position."""
        return self.index % self.length

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, ...]`` -> ``[n, ...]``: the real positions."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, ...]`` -> ``[B, T, ...]``: the real positions in place, zeros at the padding."""
        rest = x.shape[1:]
        flat = x.new_zeros((self.batch * self.length, *rest)).index_copy_(0, self.index, x)
        return flat.view(self.batch, self.length, *rest)

    def _rows(self, n_heads: int) -> torch.Tensor:
        """``[n * n_heads]``: row ``h B T + b T + t`` of a ``[n_heads, B, T, d_head]`` tensor for each real
        position ``(b, t)`` (outer) and head ``h`` (inner), the order of a packed ``[n, n_heads, d_head]``."""
        if n_heads not in self._head_rows:
            heads = torch.arange(n_heads, device=self.index.device) * (self.batch * self.length)
            self._head_rows[n_heads] = (self.index[:, None] + heads[None, :]).flatten()
        return self._head_rows[n_heads]

    def unpack_heads(self, x: torch.Tensor, n_heads: int) -> torch.Tensor:
        """``[n, n_heads * d_head]`` -> ``[n_heads, B, T, d_head]`` (contiguous): the real positions of each
        head in place, zeros at the padding. ``n_heads`` may count several projections stacked on the
        last axis (``q``, ``k``, ``v``: ``3 * heads``); split the result along dim 0."""
        d_head = x.shape[1] // n_heads
        flat = x.new_zeros(n_heads * self.batch * self.length, d_head)
        flat.index_copy_(0, self._rows(n_heads), x.reshape(-1, d_head))
        return flat.view(n_heads, self.batch, self.length, d_head)

    def pack_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[n_heads, B, T, d_head]`` -> ``[n, n_heads * d_head]``: the real positions, heads concatenated
        on the last axis (the inverse of :meth:`unpack_heads` there)."""
        n_heads, _, _, d_head = x.shape
        rows = x.reshape(-1, d_head).index_select(0, self._rows(n_heads))
        return rows.view(-1, n_heads * d_head)
