"""Algorithmic memory tasks for the DNC: copy, repeated copy, associative recall, key-value retrieval.

Thesis sec. 2.3 ("Copy Task", "Associative Recall Task", "Key-Value Retrieval Task") and appendix A.2
(sizes); CATALOG §1.9. Every task is a sequence of bit vectors with a target bit vector per step and
a loss mask marking the steps where an answer is expected (the other steps have all-zero targets).
Pure numpy; a sequence is a deterministic function of the ``numpy.random.Generator`` it is drawn
from. These tasks have per-step targets, a kind the task registry does not have, so they are not
registered; :mod:`recombine.experiments.dnc_memory` trains the DNC on them.

Encodings (``W`` = ``width`` data bits; extra channels are delimiters):

* **copy** (thesis 2.3, A.2: "W is 8, with the 9th bit indicating the start of the repeat phase"):
  ``W + 1`` input channels. ``L`` random words, then one delimiter step (channel ``W``), then ``L``
  blank steps during which the target is the ``L`` words in order (the loss steps).
* **repeated copy** (thesis 2.3): ``N`` independent copy instances, each with its own length, are
  concatenated; with ``exceed_memory = n_cells`` every sequence stores more than ``n_cells`` words in
  total, so the memory must be reused (de-allocated).
* **associative recall** (thesis 2.3, Graves et al. 2014): ``W + 2`` channels. ``B`` blocks of ``W_b``
  words, each preceded by a block-start step (channel ``W``); then a recall step (channel ``W + 1``),
  a copy of a randomly chosen block (never the last one), a second recall step, and ``W_b`` blank
  steps whose target is the block that followed the query block in the input (the loss steps).
  Blocks within a sequence are distinct, so the answer is unique.
* **key-value retrieval** (thesis 2.3): words of ``2W`` bits, halves ``w1 | w2``, ``2W + 2`` channels,
  ``W`` output channels. Phase *in*: the ``L`` words. A marker step (channel ``2W``), then phase
  *q1*: the ``w1`` halves in a random order (in channels ``0..W-1``, the rest zero), target the
  matching ``w2``. A marker step (channel ``2W + 1``), then phase *q2*: the ``w2`` halves in another
  random order (in channels ``W..2W-1``), target the matching ``w1``. Within a sequence all ``w1``
  are distinct and all ``w2`` are distinct, so both completions are unique.

Differences from Csordás's reference code (``RobertCsordas/dnc``, ``Dataset/Bitmap``), where the thesis
text is silent: there, copy also echoes the delimiter as an extra output step, associative recall
separates blocks by an end-of-block step instead of a start-of-block step, key-value retrieval
presents ``w2`` in the ``w1`` channels, and the loss covers every step (targets are zero outside the
answers); :class:`~recombine.experiments.dnc_memory.MemoryTrainConfig` ``loss_on="all_steps"`` gives
the latter. A.2 gives copy ``L in [1, 8]``, ``N in [2, 14]``; the reference profile ``repeat_copy``
uses lengths 2-14 and 1-8 repeats instead.

Curriculum: :func:`grown` narrows every ``*_range`` field to the lower part of its range, growing
linearly with training progress (:class:`Curriculum`), so training can start on short sequences.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from recombine.errors import UserError, choices_hint

IntRange = tuple[int, int]


def _check_range(name: str, value: IntRange, minimum: int) -> None:
    low, high = value
    if not minimum <= low <= high:
        raise UserError(f"{name} must be (low, high) with {minimum} <= low <= high; got {value}")


class _MemoryTaskBase:
    """What the task configs share: the target of an answer step is one word of ``width`` bits."""

    width: int

    @property
    def output_size(self) -> int:
        return self.width


@dataclass(frozen=True)
class CopyConfig(_MemoryTaskBase):
    """Copy (thesis 2.3): ``length_range`` words of ``width`` bits, then repeat them."""

    width: int = 8  # W (A.2)
    length_range: IntRange = (1, 8)  # L (A.2)

    def __post_init__(self) -> None:
        if self.width < 1:
            raise UserError(f"copy width must be >= 1; got {self.width}")
        _check_range("copy length_range", self.length_range, 1)

    @property
    def input_size(self) -> int:
        return self.width + 1


@dataclass(frozen=True)
class RepeatedCopyConfig(_MemoryTaskBase):
    """Repeated copy (thesis 2.3): ``repeats_range`` copy instances, each of ``length_range`` words."""

    width: int = 8  # W (A.2)
    length_range: IntRange = (1, 8)  # L of each instance (A.2)
    repeats_range: IntRange = (2, 14)  # N (A.2)
    exceed_memory: int = 0  # > 0: every sequence stores more than this many words (set to n_cells)

    def __post_init__(self) -> None:
        if self.width < 1:
            raise UserError(f"repeated copy width must be >= 1; got {self.width}")
        _check_range("repeated copy length_range", self.length_range, 1)
        _check_range("repeated copy repeats_range", self.repeats_range, 1)
        if self.exceed_memory < 0:
            raise UserError(f"repeated copy exceed_memory must be >= 0; got {self.exceed_memory}")
        if self.repeats_range[1] * self.length_range[1] <= self.exceed_memory:
            raise UserError(
                f"repeated copy can store at most {self.repeats_range[1] * self.length_range[1]} words, "
                f"never more than exceed_memory={self.exceed_memory}; raise length_range or repeats_range"
            )

    @property
    def input_size(self) -> int:
        return self.width + 1


@dataclass(frozen=True)
class AssociativeRecallConfig(_MemoryTaskBase):
    """Associative recall (thesis 2.3): ``blocks_range`` blocks of ``block_words`` words of ``width`` bits."""

    width: int = 8  # W (A.2)
    block_words: int = 3  # W_b (A.2)
    blocks_range: IntRange = (2, 16)  # B (A.2)

    def __post_init__(self) -> None:
        if self.width < 1 or self.block_words < 1:
            raise UserError("associative recall width and block_words must be >= 1")
        _check_range("associative recall blocks_range", self.blocks_range, 2)
        if 2 ** (self.width * self.block_words) < self.blocks_range[1]:
            raise UserError("associative recall needs 2**(width*block_words) >= the number of blocks")

    @property
    def input_size(self) -> int:
        return self.width + 2


@dataclass(frozen=True)
class KeyValueConfig(_MemoryTaskBase):
    """Key-value retrieval (thesis 2.3): ``length_range`` words of ``2 * width`` bits, completed both ways."""

    width: int = 8  # W: each half w1, w2 has W bits (A.2)
    length_range: IntRange = (2, 16)  # L (A.2)

    def __post_init__(self) -> None:
        if self.width < 1:
            raise UserError(f"key-value width must be >= 1; got {self.width}")
        _check_range("key-value length_range", self.length_range, 1)
        if self.length_range[1] > 2**self.width:
            raise UserError(f"key-value needs length <= 2**width = {2**self.width} (distinct halves)")

    @property
    def input_size(self) -> int:
        return 2 * self.width + 2


MemoryTaskConfig = CopyConfig | RepeatedCopyConfig | AssociativeRecallConfig | KeyValueConfig

#: task name -> config class (for recipes and error messages)
MEMORY_TASKS: dict[str, type[MemoryTaskConfig]] = {
    "copy": CopyConfig,
    "repeated_copy": RepeatedCopyConfig,
    "associative_recall": AssociativeRecallConfig,
    "key_value": KeyValueConfig,
}


def memory_task_config(name: str, **fields: object) -> MemoryTaskConfig:
    """The config of the task ``name`` with ``fields`` overriding its defaults."""
    if name not in MEMORY_TASKS:
        raise UserError(f"unknown memory task {name!r}; {choices_hint(name, MEMORY_TASKS)}")
    cls = MEMORY_TASKS[name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UserError(f"{name} has no field {unknown[0]!r}; valid choices: {', '.join(sorted(known))}")
    return cls(**fields)  # type: ignore[arg-type]


@dataclass
class MemorySequence:
    """One sequence: inputs ``[T, input_size]``, targets ``[T, output_size]`` (both 0/1 float32) and
    ``loss_mask [T]`` (True on the steps that carry an answer)."""

    inputs: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray

    def __len__(self) -> int:
        return len(self.inputs)


@dataclass
class MemoryTaskBatch:
    """Right-padded sequences: ``inputs [B, T, X]``, ``targets [B, T, Y]``, ``loss_mask [B, T]`` (False on
    padding), ``lengths [B]``."""

    inputs: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.inputs)


# --- generators ---------------------------------------------------------------------------------


def _bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(0, 2, size=shape).astype(np.float32)


def _distinct_bit_rows(rng: np.random.Generator, n_rows: int, n_bits: int) -> np.ndarray:
    """``n_rows`` distinct random bit vectors of ``n_bits`` bits (redraws duplicates)."""
    rows = _bits(rng, n_rows, n_bits)
    while True:
        _, first = np.unique(rows, axis=0, return_index=True)
        duplicates = np.setdiff1d(np.arange(n_rows), first)
        if duplicates.size == 0:
            return rows
        rows[duplicates] = _bits(rng, duplicates.size, n_bits)


def _with_answers(
    inputs: np.ndarray, output_size: int, answers: list[tuple[slice, np.ndarray]]
) -> MemorySequence:
    """The sequence of ``inputs`` whose targets are ``words`` on the ``steps`` of each ``(steps, words)``
    of ``answers`` (the loss steps) and zero on every other step."""
    targets = np.zeros((len(inputs), output_size), dtype=np.float32)
    loss_mask = np.zeros(len(inputs), dtype=bool)
    for steps, words in answers:
        targets[steps] = words
        loss_mask[steps] = True
    return MemorySequence(inputs, targets, loss_mask)


def _copy_instance(width: int, words: np.ndarray) -> MemorySequence:
    length = len(words)
    inputs = np.zeros((2 * length + 1, width + 1), dtype=np.float32)
    inputs[:length, :width] = words
    inputs[length, width] = 1.0  # start of the repeat phase
    return _with_answers(inputs, width, [(slice(length + 1, None), words)])


def _concatenate(parts: list[MemorySequence]) -> MemorySequence:
    return MemorySequence(
        np.concatenate([p.inputs for p in parts]),
        np.concatenate([p.targets for p in parts]),
        np.concatenate([p.loss_mask for p in parts]),
    )


def _uniform(rng: np.random.Generator, value_range: IntRange) -> int:
    return int(rng.integers(value_range[0], value_range[1] + 1))


def sample_copy(config: CopyConfig, rng: np.random.Generator) -> MemorySequence:
    length = _uniform(rng, config.length_range)
    return _copy_instance(config.width, _bits(rng, length, config.width))


def sample_repeated_copy(config: RepeatedCopyConfig, rng: np.random.Generator) -> MemorySequence:
    while True:  # rejection sampling of the structure when the total must exceed the memory
        repeats = _uniform(rng, config.repeats_range)
        lengths = [_uniform(rng, config.length_range) for _ in range(repeats)]
        if sum(lengths) > config.exceed_memory:
            break
    return _concatenate([_copy_instance(config.width, _bits(rng, n, config.width)) for n in lengths])


def sample_associative_recall(config: AssociativeRecallConfig, rng: np.random.Generator) -> MemorySequence:
    width, words = config.width, config.block_words
    n_blocks = _uniform(rng, config.blocks_range)
    blocks = _distinct_bit_rows(rng, n_blocks, words * width).reshape(n_blocks, words, width)
    query = int(rng.integers(0, n_blocks - 1))  # never the last block: it has no successor
    stride = words + 1
    n_steps = n_blocks * stride + 1 + words + 1 + words
    inputs = np.zeros((n_steps, width + 2), dtype=np.float32)
    for b in range(n_blocks):
        inputs[b * stride, width] = 1.0  # block start
        inputs[b * stride + 1 : (b + 1) * stride, :width] = blocks[b]
    recall = n_blocks * stride
    inputs[recall, width + 1] = 1.0  # recall phase starts
    inputs[recall + 1 : recall + 1 + words, :width] = blocks[query]
    inputs[recall + 1 + words, width + 1] = 1.0  # query ends, answer follows
    return _with_answers(inputs, width, [(slice(-words, None), blocks[query + 1])])  # the last W_b steps


def sample_key_value(config: KeyValueConfig, rng: np.random.Generator) -> MemorySequence:
    width = config.width
    length = _uniform(rng, config.length_range)
    first = _distinct_bit_rows(rng, length, width)  # w1 halves
    second = _distinct_bit_rows(rng, length, width)  # w2 halves
    n_steps = 3 * length + 2
    inputs = np.zeros((n_steps, 2 * width + 2), dtype=np.float32)
    inputs[:length, :width] = first
    inputs[:length, width : 2 * width] = second
    q1, q2 = slice(length + 1, 2 * length + 1), slice(2 * length + 2, None)
    inputs[length, 2 * width] = 1.0  # phase q1: given w1, complete w2
    order1 = rng.permutation(length)
    inputs[q1, :width] = first[order1]
    inputs[2 * length + 1, 2 * width + 1] = 1.0  # phase q2: given w2, complete w1
    order2 = rng.permutation(length)
    inputs[q2, width : 2 * width] = second[order2]
    return _with_answers(inputs, width, [(q1, second[order1]), (q2, first[order2])])


def sample_sequence(config: MemoryTaskConfig, rng: np.random.Generator) -> MemorySequence:
    """One sequence of the task that ``config`` configures."""
    if isinstance(config, CopyConfig):
        return sample_copy(config, rng)
    if isinstance(config, RepeatedCopyConfig):
        return sample_repeated_copy(config, rng)
    if isinstance(config, AssociativeRecallConfig):
        return sample_associative_recall(config, rng)
    if isinstance(config, KeyValueConfig):
        return sample_key_value(config, rng)
    raise TypeError(f"not a memory task config: {type(config).__name__}")


def pad_batch(sequences: list[MemorySequence]) -> MemoryTaskBatch:
    """Right-pad with zeros (loss mask False); the DNC is causal, so padding never changes an answer."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    n_steps = int(lengths.max())
    first = sequences[0]
    inputs = np.zeros((len(sequences), n_steps, first.inputs.shape[1]), dtype=np.float32)
    targets = np.zeros((len(sequences), n_steps, first.targets.shape[1]), dtype=np.float32)
    loss_mask = np.zeros((len(sequences), n_steps), dtype=bool)
    for i, s in enumerate(sequences):
        inputs[i, : len(s)] = s.inputs
        targets[i, : len(s)] = s.targets
        loss_mask[i, : len(s)] = s.loss_mask
    return MemoryTaskBatch(inputs, targets, loss_mask, lengths)


def sample_batch(config: MemoryTaskConfig, batch_size: int, rng: np.random.Generator) -> MemoryTaskBatch:
    """``batch_size`` independent sequences, right-padded."""
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1; got {batch_size}")
    return pad_batch([sample_sequence(config, rng) for _ in range(batch_size)])


# --- curriculum ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Curriculum:
    """Grow the tasks' ranges with training: at step ``s`` every ``*_range = (low, high)`` becomes
    ``(low, low + round(f * (high - low)))`` with ``f = start + (1 - start) * min(1, s / steps)``.
    ``steps = 0`` disables it (the full ranges from the first step)."""

    steps: int = 0
    start: float = 0.0  # fraction of each range available at step 0

    def __post_init__(self) -> None:
        if self.steps < 0 or not 0.0 <= self.start <= 1.0:
            raise UserError(f"curriculum needs steps >= 0 and start in [0, 1]; got {self}")

    def fraction(self, step: int) -> float:
        if self.steps == 0:
            return 1.0
        return self.start + (1.0 - self.start) * min(1.0, max(step, 0) / self.steps)

    def config_at(self, config: MemoryTaskConfig, step: int) -> MemoryTaskConfig:
        return grown(config, self.fraction(step))


def grown(config: MemoryTaskConfig, fraction: float) -> MemoryTaskConfig:
    """``config`` with every ``*_range`` cut to the first ``fraction`` of its span (rounded).

    ``exceed_memory`` of repeated copy is kept only while the shortened ranges can still exceed it.
    """
    if not 0.0 <= fraction <= 1.0:
        raise UserError(f"curriculum fraction must be in [0, 1]; got {fraction}")
    changes: dict[str, object] = {}
    for field in dataclasses.fields(config):
        if field.name.endswith("_range"):
            low, high = getattr(config, field.name)
            changes[field.name] = (low, low + round(fraction * (high - low)))
    if isinstance(config, RepeatedCopyConfig):
        capacity = changes["repeats_range"][1] * changes["length_range"][1]  # type: ignore[index]
        changes["exceed_memory"] = config.exceed_memory if capacity > config.exceed_memory else 0
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
