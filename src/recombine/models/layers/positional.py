"""Sinusoidal positional embeddings (Vaswani et al., 2017), used absolutely or relatively."""

from __future__ import annotations

import math

import torch


def sinusoidal_embedding(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """``[..., d_model]`` embeddings of (possibly negative) integer or float ``positions``."""
    half = d_model // 2
    frequencies = torch.exp(
        torch.arange(half, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / half)
    )
    angles = positions.to(torch.float32).unsqueeze(-1) * frequencies
    embedding = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if d_model % 2:
        embedding = torch.nn.functional.pad(embedding, (0, 1))
    return embedding
