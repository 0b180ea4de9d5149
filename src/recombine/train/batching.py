"""Padded tensors for a split and random / sequential batches over them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from recombine.tasks.base import ClassificationSplit


@dataclass
class PaddedSplit:
    """A whole split as one right-padded token tensor (pad id 0) plus lengths, labels, depths."""

    tokens: torch.Tensor  # [n, max_len] int64
    lengths: torch.Tensor  # [n] int64
    targets: torch.Tensor  # [n] int64
    depth: torch.Tensor  # [n] int64

    @classmethod
    def from_split(cls, split: ClassificationSplit) -> PaddedSplit:
        lengths = np.array([len(x) for x in split.inputs], dtype=np.int64)
        tokens = np.zeros((len(split.inputs), int(lengths.max())), dtype=np.int64)
        for row, sequence in enumerate(split.inputs):
            tokens[row, : len(sequence)] = sequence
        return cls(
            torch.from_numpy(tokens),
            torch.from_numpy(lengths),
            torch.as_tensor(split.targets, dtype=torch.int64),
            torch.as_tensor(split.depth, dtype=torch.int64),
        )

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens trimmed to the longest sequence in the batch, lengths, targets."""
        lengths = self.lengths[index]
        return self.tokens[index, : int(lengths.max())], lengths, self.targets[index]

    def random_batch(self, size: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        return self.batch(torch.randint(len(self), (size,), generator=generator))

    def sequential_batches(self, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self), size):
            yield self.batch(torch.arange(start, min(start + size, len(self))))
