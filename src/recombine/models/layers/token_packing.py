"""The real positions of a right-padded batch, so that position-wise work skips the padding.

A teacher-forced decoder batch ``[B, T]`` holds sequences of lengths ``len_b <= T``, right-padded. Every
operation of a Transformer layer except attention acts on each position alone (projections, LayerNorm,
dropout, feed-forward, output layer; Vaswani et al., 2017, sec. 3.3), so it can run on the ``n = sum_b
len_b`` real positions stacked as ``[n, d]`` ("packed") instead of all ``B T``. Attention needs the
``[B, T]`` layout: :meth:`TokenPacking.unpack` scatters packed rows back (zeros at the padding) and
:meth:`TokenPacking.pack` gathers the real rows again.

This changes no real position's value: with causal self-attention a real query ``i < len_b`` only sees
keys ``j <= i``, which are real, and cross-attention reads the encoder only. Padded positions, whose
outputs nobody uses, come back as zeros. On SCAN's length split (targets of 1 to 27 positions) about
half of the decoder positions are padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenPacking:
    index: torch.Tensor  # [n] int64: flat position b * length + t of each real position, in order
    batch: int  # B
    length: int  # T

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
        flat = x.new_zeros((self.batch * self.length, *rest)).index_copy(0, self.index, x)
        return flat.view(self.batch, self.length, *rest)
