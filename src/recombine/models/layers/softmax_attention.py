"""Standard multi-head softmax self-attention (content only; absolute PE is added to the input)."""

from __future__ import annotations

import torch
from torch import nn


class SoftmaxSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, h: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = h.shape
        q, k, v = self.qkv(h).view(batch, length, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        logits = (self.dropout(q) @ k.transpose(-1, -2)) * self.d_head**-0.5
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        attention = logits.softmax(-1)
        out = (attention @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.out(out), attention
