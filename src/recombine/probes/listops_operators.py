"""ListOps accuracy by the operator at the root of each example and by dependency depth.

A ListOps run's one accuracy (or its accuracy per dependency depth) does not say *which* operation a
model has not learned. The four differ a lot in what they ask (thesis 5.2.3, D.3.2): ``MIN`` and ``MAX``
select one operand, ``MED`` sorts, ``SM`` (sum modulo 10) needs every operand and a modular sum. At the
CPU scale of ``ndr-listops`` every row fits MIN/MAX and misses SM almost entirely, which caps a depth-1
accuracy near 0.75 and, through every SM on a deeper problem's path, the deeper ones too
(docs/reproductions/ndr-listops.md). ``recombine probe listops-operators RUN`` makes that visible: one
row per root operator, one column per dependency depth of the split, each cell the accuracy of the run's
checkpoint and its number of examples.

The root operator is the example's first token (a ListOps example is ``[OP ... ]``); predictions are
those of the run's own evaluation (:meth:`ClassificationObjective.correct_per_example`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.probes.attention_maps import load_run_model_and_step
from recombine.runs.text_table import aligned_columns
from recombine.tasks.base import ClassificationSplit, Vocabulary
from recombine.tasks.listops import OPEN_TOKENS
from recombine.train.objectives import ClassificationObjective

#: examples per forward pass (the trainer's default ``train.eval_batch_size``)
BATCH_SIZE = 1024


@dataclass
class OperatorAccuracy:
    """Correct and total examples per (root operator, dependency depth) of one split."""

    run: Path
    checkpoint: str
    step: int
    split: str
    operators: list[str]  # rows, in the task's operator order
    depths: list[int]  # columns, ascending
    correct: np.ndarray  # [operators, depths]
    total: np.ndarray  # [operators, depths]

    def accuracy(self) -> np.ndarray:
        """[operators, depths], NaN where a cell has no example."""
        return np.where(self.total > 0, self.correct / np.maximum(self.total, 1), np.nan)

    def to_dict(self) -> dict[str, object]:
        accuracy = self.accuracy()
        return {
            "run": str(self.run),
            "checkpoint": self.checkpoint,
            "step": self.step,
            "split": self.split,
            "cells": [
                {
                    "operator": operator,
                    "depth": depth,
                    "correct": int(self.correct[i, j]),
                    "total": int(self.total[i, j]),
                    "accuracy": None if np.isnan(accuracy[i, j]) else float(accuracy[i, j]),
                }
                for i, operator in enumerate(self.operators)
                for j, depth in enumerate(self.depths)
            ],
        }


def root_operators(split: ClassificationSplit, vocab: Vocabulary) -> list[str]:
    """The operator (``MIN`` ...) at the root of each example, read from its first token."""
    names = []
    for tokens in split.inputs:
        first = vocab.tokens[int(tokens[0])] if len(tokens) else ""
        if first not in OPEN_TOKENS:
            raise ValueError(f"a ListOps example starts with an operator, not {first!r}")
        names.append(first[1:])
    return names


def operator_accuracy(
    run_path: str | Path, split: str = "valid_iid", checkpoint: str = "best"
) -> OperatorAccuracy:
    """Accuracy of ``checkpoint`` of the ListOps run at ``run_path`` on ``split``, by root operator and
    dependency depth."""
    model, task, step = load_run_model_and_step(run_path, checkpoint)  # a UserError for no run directory
    if task.name != "listops":
        raise UserError(f"{run_path} is a {task.name} run; listops-operators reads ListOps runs")
    if split not in task.splits:
        raise UserError(f"the run's task has no split {split!r}; {choices_hint(split, list(task.splits))}")
    data = task.splits[split]
    assert isinstance(data, ClassificationSplit)
    objective = ClassificationObjective()
    correct = objective.correct_per_example(model, objective.prepare(data), BATCH_SIZE)
    roots = root_operators(data, task.input_vocab)
    operators = [name[1:] for name in OPEN_TOKENS]
    depths = sorted({int(depth) for depth in data.depth})
    hits = np.zeros((len(operators), len(depths)), dtype=np.int64)
    total = np.zeros_like(hits)
    for root, depth, right in zip(roots, data.depth, correct.numpy(), strict=True):
        row, column = operators.index(root), depths.index(int(depth))
        total[row, column] += 1
        hits[row, column] += int(right)
    return OperatorAccuracy(Path(run_path), checkpoint, step, split, operators, depths, hits, total)


def format_operator_accuracy(result: OperatorAccuracy) -> str:
    """A text table: one row per root operator, one column per depth and one for all depths; each cell
    ``accuracy (examples)``."""
    header = ["operator", *(f"depth {depth}" for depth in result.depths), "all"]
    rows = [header]
    accuracy = result.accuracy()
    for i, operator in enumerate(result.operators):
        cells = [
            "-" if result.total[i, j] == 0 else f"{accuracy[i, j]:.2f} ({result.total[i, j]})"
            for j in range(len(result.depths))
        ]
        n = int(result.total[i].sum())
        cells.append("-" if n == 0 else f"{result.correct[i].sum() / n:.2f} ({n})")
        rows.append([operator, *cells])
    title = f"{result.run} ({result.checkpoint}.pt, step {result.step}), {result.split}: accuracy (examples)"
    return title + "\n" + aligned_columns(rows)


def save_operator_accuracy(result: OperatorAccuracy, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_dict(), indent=2))
    return out
