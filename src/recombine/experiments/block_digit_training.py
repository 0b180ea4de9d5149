"""Training one block model on a single-digit block task (BLOCK 5.1, 5.2; optimiser from A.2, A.3).

Shared by the double-addition (:mod:`recombine.experiments.smfr_double_add`) and the add/mul
interference (:mod:`recombine.experiments.smfr_interference`) experiments: the model maps the
``[batch, n_operands + 1, 10]`` blocks of :mod:`recombine.tasks.block_digits` to one output block,
whose argmax is the predicted digit.

Optimisation (A.2): Adam, lr 3e-4, gradient-norm clipping at 0.1; for SMFRs the saturation
regulariser of A.3 (threshold 20) on every Multiplexer and gate logit, weight 1 (not stated). The loss
is not stated in the paper; as in our ALGO runs we default to the MSE between the output block and the
one-hot target (``loss="mse"``); ``loss="cross_entropy"`` reads the output block as logits. The choice
matters a lot on double addition: with MSE a depth-1, width-8 SMFR fits the training data and reaches
OOD 1.0 within 1,500 steps, with cross-entropy it had not fit the training data after 8,000 steps
(docs/models/block-operations.md). Batch size 64 (not stated).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from recombine.errors import UserError, choices_hint
from recombine.experiments.progress import trial_done
from recombine.models.layers.saturation_regularizer import SATURATION_THRESHOLD, saturation_loss
from recombine.models.smfr import BLOCK_MODELS, BlockShape, build_block_model
from recombine.tasks.block_digits import BLOCK_SIZE, BlockDigitExamples

LOSSES = ("mse", "cross_entropy")

TrialT = TypeVar("TrialT")


@dataclass
class BlockArchitecture:
    """A block model and its config (``recombine.models.smfr``); ``label`` names it in reports."""

    label: str
    model: str
    model_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model not in BLOCK_MODELS:
            raise UserError(f"unknown block model {self.model!r}; {choices_hint(self.model, BLOCK_MODELS)}")

    @property
    def family(self) -> str:
        """``fnn``, ``transformer``, ``smfr_softmax`` or ``smfr_gumbel`` (the columns of BLOCK Tab. 1)."""
        if self.model != "smfr":
            return self.model
        return f"smfr_{self.model_config.get('routing', 'softmax')}"


@dataclass
class BlockTrainingConfig:
    batch_size: int = 64
    lr: float = 3e-4  # BLOCK A.2
    grad_clip: float = 0.1  # BLOCK A.2
    saturation_weight: float = 1.0  # BLOCK A.3 (weight not stated)
    saturation_threshold: float = SATURATION_THRESHOLD
    loss: str = "mse"

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise UserError(f"loss={self.loss!r} is not valid; {choices_hint(self.loss, LOSSES)}")
        if self.batch_size < 1 or self.lr <= 0 or self.grad_clip <= 0:
            raise UserError("batch_size must be >= 1, lr and grad_clip > 0")


def build_digit_model(architecture: BlockArchitecture, n_input_blocks: int) -> nn.Module:
    return build_block_model(
        architecture.model, BlockShape(n_input_blocks, 1, BLOCK_SIZE), **architecture.model_config
    )


@dataclass
class DigitTensors:
    """An example set as tensors: ``blocks`` [n, n_in, 10] float32, ``target`` [n] int64."""

    blocks: torch.Tensor
    target: torch.Tensor

    @classmethod
    def of(cls, examples: BlockDigitExamples) -> DigitTensors:
        return cls(torch.from_numpy(examples.blocks()), torch.from_numpy(examples.target))


def digit_loss(output: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """``output`` [b, 10] (the output block), ``target`` [b] digits."""
    if kind == "mse":
        return F.mse_loss(output, F.one_hot(target, output.shape[-1]).to(output.dtype))
    return F.cross_entropy(output, target)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: DigitTensors,
    config: BlockTrainingConfig,
) -> float:
    """One Adam step on ``batch``; returns the task loss (without the regulariser)."""
    out = model(batch.blocks)
    task_loss = digit_loss(out.blocks[:, 0], batch.target, config.loss)
    loss = task_loss + config.saturation_weight * saturation_loss(
        out.routing_logits, config.saturation_threshold
    )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    return float(task_loss.detach())


@torch.no_grad()
def digit_accuracy(model: nn.Module, data: DigitTensors) -> float:
    """Fraction of examples whose output block's argmax is the target (eval mode: no Gumbel noise)."""
    was_training = model.training
    model.eval()
    predicted = model(data.blocks).blocks[:, 0].argmax(-1)
    model.train(was_training)
    return float((predicted == data.target).float().mean())


def train_every_trial(
    architectures: Sequence[BlockArchitecture],
    seeds: Sequence[int],
    train: Callable[[BlockArchitecture, int], TrialT],
    on_trial: Callable[[TrialT], None] | None = None,
    headline: Callable[[TrialT], str] | None = None,
) -> list[TrialT]:
    """``train(architecture, seed)`` for every architecture x seed, in that order (one trial at a time).

    Prints one progress line per finished trial to stderr, ending with ``headline(trial)`` if given."""
    trials: list[TrialT] = []
    total = len(architectures) * len(seeds)
    for architecture in architectures:
        for seed in seeds:
            started = time.perf_counter()
            trial = train(architecture, seed)
            trials.append(trial)
            seconds = time.perf_counter() - started
            tail = headline(trial) if headline is not None else ""
            trial_done(len(trials), total, f"{architecture.label} seed {seed}", seconds, tail)
            if on_trial is not None:
                on_trial(trial)
    return trials
