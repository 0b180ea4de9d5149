"""Keys and values an attention layer keeps between the steps of incremental (autoregressive) decoding.

Greedy decoding feeds the decoder one new position per step. Without a cache every step would recompute
the keys and values of all earlier positions (and of the encoder output), making decoding quadratic in
the output length for the projections alone. With causal self-attention the keys and values of a
position never change once computed, so each step computes them for the new position only and appends
them here; cross-attention computes the encoder output's keys and values once and reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KeyValueCache:
    keys: torch.Tensor | None = None  # [n_heads, B, positions so far, d_head] (head-major)
    values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """How many positions are cached."""
        return 0 if self.keys is None else self.keys.shape[2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the keys and values of new positions after the cached ones; return all of them."""
        if self.keys is not None and self.values is not None:
            keys, values = torch.cat([self.keys, keys], dim=2), torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values
