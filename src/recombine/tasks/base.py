"""What every task yields: a vocabulary, named splits with roles, and a kind.

Tasks are pure data (numpy, no ``torch.nn``): a model never needs to know which task it is
trained on beyond the :class:`TaskSpec` (vocabulary sizes, number of classes, kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

TaskKind = Literal["classify", "seq2seq", "regress", "meta", "dynamics"]

#: Split roles every task states (DESIGN.md, "Tasks"). ``valid_ood`` drives model selection
#: (thesis 4.2.2: IID validation accuracy does not predict generalization).
SPLIT_ROLES = ("train", "valid_iid", "valid_ood", "test_iid", "test_ood")


@dataclass(frozen=True)
class Vocabulary:
    """An ordered set of string tokens; index 0 is always ``<pad>``."""

    tokens: tuple[str, ...]

    PAD = "<pad>"

    @classmethod
    def build(cls, tokens: list[str] | tuple[str, ...]) -> Vocabulary:
        return cls((cls.PAD, *[t for t in tokens if t != cls.PAD]))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return 0

    def index(self, token: str) -> int:
        return self._lookup[token]

    def encode(self, tokens: list[str]) -> np.ndarray:
        return np.array([self._lookup[t] for t in tokens], dtype=np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> list[str]:
        return [self.tokens[int(i)] for i in ids if int(i) != self.pad_id]

    @property
    def _lookup(self) -> dict[str, int]:
        cached = self.__dict__.get("_lookup_cache")
        if cached is None:
            cached = {t: i for i, t in enumerate(self.tokens)}
            object.__setattr__(self, "_lookup_cache", cached)
        return cached


@dataclass
class ClassificationSplit:
    """Variable-length token sequences, each with one class label.

    ``inputs[i]`` is an int64 array of token ids (no padding, no begin/end tokens: models add
    their own), ``targets[i]`` the class id. ``depth[i]`` is a task-defined difficulty (number of
    function applications, tree depth) used for per-depth breakdowns; -1 where meaningless.
    """

    inputs: list[np.ndarray]
    targets: np.ndarray
    depth: np.ndarray

    def __len__(self) -> int:
        return len(self.inputs)

    def __post_init__(self) -> None:
        if not (len(self.inputs) == len(self.targets) == len(self.depth)):
            raise ValueError("inputs, targets and depth must have the same length")

    def take(self, index: np.ndarray) -> ClassificationSplit:
        """The examples at ``index``, in that order."""
        return ClassificationSplit([self.inputs[i] for i in index], self.targets[index], self.depth[index])


@dataclass
class Seq2SeqSplit:
    """Variable-length input and output token sequences (no padding, no begin/end tokens).

    ``inputs[i]`` and ``outputs[i]`` are int64 id arrays in the task's input / output vocabulary.
    ``group[i]`` is a task-defined integer for per-group breakdowns (e.g. output length); -1 where
    meaningless.
    """

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    group: np.ndarray

    def __len__(self) -> int:
        return len(self.inputs)

    def __post_init__(self) -> None:
        if not (len(self.inputs) == len(self.outputs) == len(self.group)):
            raise ValueError("inputs, outputs and group must have the same length")

    def take(self, index: np.ndarray) -> Seq2SeqSplit:
        """The examples at ``index``, in that order."""
        return Seq2SeqSplit(
            [self.inputs[i] for i in index], [self.outputs[i] for i in index], self.group[index]
        )


Split = ClassificationSplit | Seq2SeqSplit


@dataclass(frozen=True)
class TaskSpec:
    """What a model needs to know about a task to be built for it."""

    kind: TaskKind
    input_vocab_size: int
    n_classes: int  # output vocabulary size (classes for classification, tokens for seq2seq)
    max_input_length: int
    max_output_length: int = 1


@dataclass
class TaskData:
    """A built task: its splits (by role name), vocabularies, and description."""

    name: str
    kind: TaskKind
    input_vocab: Vocabulary
    output_vocab: Vocabulary
    splits: dict[str, Split]
    description: str = ""
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            kind=self.kind,
            input_vocab_size=len(self.input_vocab),
            n_classes=len(self.output_vocab),
            max_input_length=max(len(x) for s in self.splits.values() for x in s.inputs),
            max_output_length=max(
                (len(y) for s in self.splits.values() if isinstance(s, Seq2SeqSplit) for y in s.outputs),
                default=1,
            ),
        )

    @property
    def selection_split(self) -> str:
        """The split used for model selection: ``valid_ood`` when the task has one."""
        return "valid_ood" if "valid_ood" in self.splits else "valid_iid"

    @property
    def evaluation_splits(self) -> list[str]:
        return [name for name in self.splits if name != "train"]
