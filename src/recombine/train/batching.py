"""Padded tensors for a split and random / sequential batches over them.

:class:`PaddedSplit` holds a classification split, :class:`PaddedSeq2SeqSplit` a seq2seq split. Both
draw random batches the same way: uniformly over examples, or group-balanced (uniformly over the
task-defined groups first, then uniformly within the drawn group; ``train.sampling=depth_balanced``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from recombine.tasks.base import ClassificationSplit, Seq2SeqSplit


def pad_sequences(sequences: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad int sequences with 0: ``(tokens [n, max_len] int64, lengths [n] int64)``."""
    lengths = np.array([len(x) for x in sequences], dtype=np.int64)
    tokens = np.zeros((len(sequences), int(lengths.max(initial=0))), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        tokens[row, : len(sequence)] = sequence
    return torch.from_numpy(tokens), torch.from_numpy(lengths)


def group_index(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices sorted by group, each group's first position in that order, and its size."""
    order = torch.argsort(groups, stable=True)
    _, counts = torch.unique_consecutive(groups[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return order, starts, counts


def random_indices(
    n: int,
    size: int,
    generator: torch.Generator,
    by_group: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``size`` example indices drawn with replacement: uniformly, or uniformly over the groups of
    ``by_group`` (a :func:`group_index`) and then uniformly within the drawn group."""
    if by_group is None:
        return torch.randint(n, (size,), generator=generator)
    order, starts, counts = by_group
    group = torch.randint(len(counts), (size,), generator=generator)
    offset = (torch.rand(size, generator=generator, dtype=torch.float64) * counts[group]).long()
    return order[starts[group] + offset]


@dataclass
class PaddedSplit:
    """A whole split as one right-padded token tensor (pad id 0) plus lengths, labels, depths."""

    tokens: torch.Tensor  # [n, max_len] int64
    lengths: torch.Tensor  # [n] int64
    targets: torch.Tensor  # [n] int64
    depth: torch.Tensor  # [n] int64

    @classmethod
    def from_split(cls, split: ClassificationSplit) -> PaddedSplit:
        tokens, lengths = pad_sequences(split.inputs)
        return cls(
            tokens,
            lengths,
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
        by_group = self._by_depth if depth_balanced else None
        return self.batch(random_indices(len(self), size, generator, by_group))

    @functools.cached_property
    def _by_depth(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return group_index(self.depth)

    def sequential_batches(self, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self), size):
            yield self.batch(torch.arange(start, min(start + size, len(self))))


class Seq2SeqBatch(NamedTuple):
    src: torch.Tensor  # [B, S] input ids, 0-padded
    src_len: torch.Tensor  # [B]
    tgt: torch.Tensor  # [B, T] output ids y (no SOS / EOS), 0-padded
    tgt_len: torch.Tensor  # [B] len(y)
    group: torch.Tensor  # [B]


@dataclass
class PaddedSeq2SeqSplit:
    """A whole seq2seq split: right-padded (pad id 0) inputs and outputs, their lengths, groups."""

    inputs: torch.Tensor  # [n, max_in] int64
    input_lengths: torch.Tensor  # [n] int64
    outputs: torch.Tensor  # [n, max_out] int64
    output_lengths: torch.Tensor  # [n] int64
    group: torch.Tensor  # [n] int64, task-defined (SCAN, PCFG: output length)

    @classmethod
    def from_split(cls, split: Seq2SeqSplit) -> PaddedSeq2SeqSplit:
        inputs, input_lengths = pad_sequences(split.inputs)
        outputs, output_lengths = pad_sequences(split.outputs)
        return cls(
            inputs, input_lengths, outputs, output_lengths, torch.as_tensor(split.group, dtype=torch.int64)
        )

    def __len__(self) -> int:
        return len(self.input_lengths)

    def batch(self, index: torch.Tensor) -> Seq2SeqBatch:
        """The examples at ``index``, inputs and outputs trimmed to the longest in the batch."""
        src_len, tgt_len = self.input_lengths[index], self.output_lengths[index]
        return Seq2SeqBatch(
            self.inputs[index, : int(src_len.max())],
            src_len,
            self.outputs[index, : int(tgt_len.max())],
            tgt_len,
            self.group[index],
        )

    def random_batch(
        self, size: int, generator: torch.Generator, group_balanced: bool = False
    ) -> Seq2SeqBatch:
        """Examples drawn uniformly (with replacement), or uniformly over groups and then within the group."""
        by_group = self._by_group if group_balanced else None
        return self.batch(random_indices(len(self), size, generator, by_group))

    @functools.cached_property
    def _by_group(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return group_index(self.group)

    def sequential_batches(self, size: int) -> Iterator[Seq2SeqBatch]:
        for start in range(0, len(self), size):
            yield self.batch(torch.arange(start, min(start + size, len(self))))

    def length_sorted_batches(self, size: int) -> Iterator[tuple[torch.Tensor, Seq2SeqBatch]]:
        """``(index, batch)`` over every example once, in order of output length (then input length).

        Greedy decoding runs a batch until its longest target is done, so a batch that mixes one long
        output with short ones pays the long one for all of them; with heavy-tailed output lengths (PCFG
        SET, COGS) sorted batches decode several times faster. ``index`` maps the batch's rows back to
        the split."""
        order = torch.argsort(self.output_lengths * (int(self.input_lengths.max()) + 1) + self.input_lengths)
        for start in range(0, len(self), size):
            index = order[start : start + size]
            yield index, self.batch(index)
