"""Padded tensors for a split and random / sequential batches over them."""

from __future__ import annotations

import functools
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

    def random_batch(
        self, size: int, generator: torch.Generator, depth_balanced: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """Examples drawn uniformly (with replacement), or uniformly over depths first and then
        uniformly within the drawn depth (``depth_balanced``)."""
        if not depth_balanced:
            return self.batch(torch.randint(len(self), (size,), generator=generator))
        order, starts, counts = self._by_depth
        group = torch.randint(len(counts), (size,), generator=generator)
        offset = (torch.rand(size, generator=generator, dtype=torch.float64) * counts[group]).long()
        return self.batch(order[starts[group] + offset])

    @functools.cached_property
    def _by_depth(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Indices sorted by depth, each depth's first position in that order, and its size."""
        order = torch.argsort(self.depth, stable=True)
        _, counts = torch.unique_consecutive(self.depth[order], return_counts=True)
        starts = torch.cumsum(counts, 0) - counts
        return order, starts, counts

    def sequential_batches(self, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self), size):
            yield self.batch(torch.arange(start, min(start + size, len(self))))
