"""Objectives: what the supervised loop needs to know about a task kind.

The loop in :mod:`recombine.train.supervised` is the same for every kind; an objective supplies the
four kind-specific pieces:

* ``prepare(split)``: the split as padded tensors, once per run;
* ``batch(prepared, size, generator, balanced)``: a random training batch (``balanced``: uniform over the
  task's groups first; ``train.sampling=depth_balanced``);
* ``loss(model, batch) -> (loss, n_correct, n)``: the mean training loss of the batch (a scalar tensor to
  back-propagate; it includes the model's ``auxiliary_loss()`` when the model has one, e.g. the sigma-MoE
  entropy regulariser, thesis eq. 7.20), and how many of its ``n`` examples are right (logged as
  training accuracy);
* ``evaluate(model, prepared, batch_size) -> {"accuracy", "loss", "per_depth"}`` on a whole split.
  ``accuracy`` drives model selection (thesis 4.2.2: accuracy, not loss); ``per_depth`` breaks it down by
  the task's difficulty group (the depth for classification tasks, the group of a seq2seq split, e.g.
  the output length for SCAN and PCFG).

:func:`objective_for` picks the objective for a task kind.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError
from recombine.models.seq2seq_interface import PAD_ID, teacher_forcing
from recombine.tasks.base import ClassificationSplit, Seq2SeqSplit, Split, TaskSpec
from recombine.train.batching import PaddedSeq2SeqSplit, PaddedSplit, Seq2SeqBatch
from recombine.train.device import CPU, to_device

Prepared = TypeVar("Prepared")
Batch = TypeVar("Batch")


class Objective(Protocol[Prepared, Batch]):
    def prepare(self, split: Split) -> Prepared: ...

    def batch(self, prepared: Prepared, size: int, generator: torch.Generator, balanced: bool) -> Batch: ...

    def loss(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, int, int]: ...

    def evaluate(self, model: nn.Module, prepared: Prepared, batch_size: int) -> dict[str, Any]: ...


def objective_for(
    spec: TaskSpec, label_smoothing: float = 0.0, device: torch.device = CPU
) -> Objective[Any, Any]:
    """The objective for ``spec.kind`` (a one-line UserError for kinds without a trainer yet).

    Prepared splits stay on the CPU; ``loss`` and ``evaluate`` move each batch to ``device`` (where the
    model is) and bring the per-example results back."""
    if spec.kind == "classify":
        return ClassificationObjective(label_smoothing, device)
    if spec.kind == "seq2seq":
        return Seq2SeqObjective(spec.n_classes, label_smoothing, device)
    raise UserError(f"training {spec.kind} tasks is not supported yet")


def with_auxiliary_loss(model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    """``loss`` plus the model's ``auxiliary_loss()`` of the forward just run, if it has one."""
    auxiliary = getattr(model, "auxiliary_loss", None)
    extra = auxiliary() if callable(auxiliary) else None
    return loss if extra is None else loss + extra


def _accuracy_per_group(correct: torch.Tensor, group: torch.Tensor) -> dict[str, float]:
    return {str(int(g)): correct[group == g].float().mean().item() for g in torch.unique(group)}


class ClassificationObjective:
    """One label per sequence: cross-entropy on the model's logits ``[B, n_classes]``."""

    def __init__(self, label_smoothing: float = 0.0, device: torch.device = CPU) -> None:
        self.label_smoothing = label_smoothing
        self.device = device

    def prepare(self, split: Split) -> PaddedSplit:
        if not isinstance(split, ClassificationSplit):
            raise TypeError(
                f"a classification objective needs a ClassificationSplit, got {type(split).__name__}"
            )
        return PaddedSplit.from_split(split)

    def batch(
        self, prepared: PaddedSplit, size: int, generator: torch.Generator, balanced: bool
    ) -> tuple[torch.Tensor, ...]:
        return prepared.random_batch(size, generator, depth_balanced=balanced)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, int, int]:
        tokens, lengths, targets = to_device(batch, self.device)
        logits = model(tokens, lengths)
        loss = F.cross_entropy(logits, targets, label_smoothing=self.label_smoothing)
        loss = with_auxiliary_loss(model, loss)
        return loss, int((logits.argmax(-1) == targets).sum()), len(targets)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, prepared: PaddedSplit, batch_size: int) -> dict[str, Any]:
        """Accuracy, mean loss, and accuracy per depth (task-defined difficulty) on a whole split."""
        correct, total_loss = self._judge(model, prepared, batch_size)
        return {
            "accuracy": correct.float().mean().item(),
            "loss": total_loss / len(prepared),
            "per_depth": _accuracy_per_group(correct, prepared.depth),
        }

    @torch.no_grad()
    def correct_per_example(self, model: nn.Module, prepared: PaddedSplit, batch_size: int) -> torch.Tensor:
        """Whether the model's prediction (the arg-max class) is right, per example of a split, as in
        :meth:`evaluate` (a bool tensor in split order, on the CPU)."""
        return self._judge(model, prepared, batch_size)[0]

    def _judge(self, model: nn.Module, prepared: PaddedSplit, batch_size: int) -> tuple[torch.Tensor, float]:
        """Per-example correctness and the summed cross-entropy over a whole split, in evaluation mode."""
        was_training = model.training
        model.eval()
        correct = torch.zeros(len(prepared), dtype=torch.bool)
        total_loss, start = 0.0, 0
        for batch in prepared.sequential_batches(batch_size):
            tokens, lengths, targets = to_device(batch, self.device)
            logits = model(tokens, lengths)
            total_loss += F.cross_entropy(logits, targets, reduction="sum").item()
            correct[start : start + len(targets)] = (logits.argmax(-1) == targets).cpu()
            start += len(targets)
        model.train(was_training)
        return correct, total_loss


def token_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of ``logits [B, T, n_classes + 1]`` against ``target [B, T]`` over the real target
    positions (``target != 0``). Column 0 (pad) is never a target, so it is left out of the softmax (and
    of label smoothing)."""
    return F.cross_entropy(
        logits[..., PAD_ID + 1 :].flatten(0, 1),
        (target - (PAD_ID + 1)).flatten(),
        ignore_index=-1,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


def exact_match(
    tokens: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor, target_lengths: torch.Tensor
) -> torch.Tensor:
    """Bool ``[B]``: the output equals the target token for token, and has its length (thesis C.1)."""
    width = max(tokens.shape[1], target.shape[1])
    same = F.pad(tokens, (0, width - tokens.shape[1])) == F.pad(target, (0, width - target.shape[1]))
    return same.all(-1) & (lengths == target_lengths)


class Seq2SeqObjective:
    """Output sequences: teacher-forced token cross-entropy for training; batched greedy decoding and
    sequence exact match for evaluation (thesis C.1). Conventions: :mod:`recombine.models.seq2seq_interface`.
    """

    def __init__(self, n_classes: int, label_smoothing: float = 0.0, device: torch.device = CPU) -> None:
        self.n_classes = n_classes
        self.label_smoothing = label_smoothing
        self.device = device

    def prepare(self, split: Split) -> PaddedSeq2SeqSplit:
        if not isinstance(split, Seq2SeqSplit):
            raise TypeError(f"a seq2seq objective needs a Seq2SeqSplit, got {type(split).__name__}")
        return PaddedSeq2SeqSplit.from_split(split)

    def batch(
        self, prepared: PaddedSeq2SeqSplit, size: int, generator: torch.Generator, balanced: bool
    ) -> Seq2SeqBatch:
        return prepared.random_batch(size, generator, group_balanced=balanced)

    def _teacher_forced(
        self, model: nn.Module, batch: Seq2SeqBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits [B, T+1, n_classes + 1], target [B, T+1], lengths)``, ``target = y + [EOS]``
        (``batch`` already on the objective's device)."""
        decoder_input, target, length = teacher_forcing(batch.tgt, batch.tgt_len, self.n_classes)
        return model(batch.src, batch.src_len, decoder_input, length), target, length

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> tuple[torch.Tensor, int, int]:
        """Mean token cross-entropy; ``n_correct`` counts teacher-forced sequence exact matches."""
        logits, target, _ = self._teacher_forced(model, to_device(batch, self.device))
        loss = with_auxiliary_loss(model, token_cross_entropy(logits, target, self.label_smoothing))
        predicted = logits[..., PAD_ID + 1 :].argmax(-1) + PAD_ID + 1
        all_right = ((predicted == target) | (target == PAD_ID)).all(-1)
        return loss, int(all_right.sum()), len(target)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, prepared: PaddedSeq2SeqSplit, batch_size: int) -> dict[str, Any]:
        """Exact-match accuracy of greedy decoding, mean teacher-forced token cross-entropy (thesis C.1),
        and accuracy per group (``per_depth``)."""
        was_training = model.training
        model.eval()
        correct = torch.zeros(len(prepared), dtype=torch.bool)
        total_loss, total_tokens = 0.0, 0
        # batches of similar output length: decoding runs until a batch's longest target is done
        for index, cpu_batch in prepared.length_sorted_batches(batch_size):
            batch = to_device(cpu_batch, self.device)
            logits, target, length = self._teacher_forced(model, batch)
            total_loss += token_cross_entropy(logits, target, reduction="sum").item()
            total_tokens += int(length.sum())
            # len(y) + 1 steps (tokens + EOS) suffice: an output still running after the longest target's
            # steps is wrong whatever comes next, so decoding further cannot change the accuracy.
            tokens, lengths = model.greedy_decode(batch.src, batch.src_len, max_length=int(length.max()))
            correct[index] = exact_match(tokens, lengths, batch.tgt, batch.tgt_len).cpu()
        model.train(was_training)
        return {
            "accuracy": correct.float().mean().item(),
            "loss": total_loss / max(total_tokens, 1),
            "per_depth": _accuracy_per_group(correct, prepared.group),
        }
