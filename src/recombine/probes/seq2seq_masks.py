"""Weight masks on seq2seq models: teacher-forced mask training, greedy-decoding evaluation (thesis 3.3).

:mod:`recombine.probes.weight_masks` trains a mask on any model whose positional inputs all carry the
batch on dim 0. A seq2seq model (:mod:`recombine.models.seq2seq_interface`) is such a model in its
teacher-forced form ``model(src, src_len, tgt_in, tgt_len) -> logits [B, T, n_classes + 1]``, so the
mask trains with the seq2seq objective's loss, the token cross-entropy of ``y + [EOS]`` given
``[SOS] + y`` (:func:`recombine.train.objectives.token_cross_entropy`), through the unchanged
:func:`~recombine.probes.weight_masks.train_weight_mask`. Each of the ``n_samples`` mask samples sees
one slice of the batch (thesis B.3.2). ``nn.LSTM`` has no vmap batching rule, and the Transformer's
token packing uses ``nonzero`` (a dynamic shape), so both models take the per-sample loop
(``application="loop"``): the same numbers as vmap would give.

Evaluation is greedy decoding and sequence exact match (thesis C.1), the seq2seq objective's own
:meth:`~recombine.train.objectives.Seq2SeqObjective.evaluate`, run on a :class:`MaskedSeq2Seq`. That
wrapper applies a fixed binary mask ``w' = w * M`` (thesis 3.1) to *both* of the model's entry points:
the teacher-forced ``forward`` and ``greedy_decode``. Each call goes through
``torch.func.functional_call`` with the masked parameters (via
:class:`~recombine.probes.weight_masks.MaskedModel`), so the model itself is never modified.

:func:`removed_per_output_token` counts, per output token, the share of its output-layer weights a
mask removes (thesis Fig. 3.5b: "almost half of the weights corresponding to I_JUMP are removed").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import torch
from torch import nn

from recombine.errors import UserError
from recombine.models.seq2seq_interface import teacher_forcing
from recombine.probes.mask_analysis_common import train_model
from recombine.probes.mask_sets import MaskSet
from recombine.probes.weight_masks import (
    MaskedModel,
    MaskTrainingConfig,
    MaskTrainingResult,
    train_weight_mask,
)
from recombine.train.batching import PaddedSeq2SeqSplit
from recombine.train.objectives import Seq2SeqObjective, token_cross_entropy

#: the label of the end-of-sequence row of a seq2seq output layer (id ``n_classes``)
EOS_LABEL = "EOS"

Seq2SeqMaskBatch = tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class _GreedyDecoding(nn.Module):
    """``forward(src, src_len, max_length)`` is ``model.greedy_decode``, so that ``functional_call``
    (which calls ``forward``) can run the decoding loop under substituted parameters."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, max_length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.greedy_decode(src, src_len, max_length)  # type: ignore[operator]


class MaskedSeq2Seq(nn.Module):
    """A seq2seq ``model`` under a fixed binary ``mask`` (thesis 3.1: ``w' = w * M``), for evaluation.

    ``forward`` gives the masked teacher-forced logits and ``greedy_decode`` the masked greedy decoding,
    so the object can stand in for the model in
    :meth:`~recombine.train.objectives.Seq2SeqObjective.evaluate`. The model is not changed."""

    def __init__(self, model: nn.Module, mask: MaskSet) -> None:
        super().__init__()
        self.model = model
        self.mask = mask
        self._teacher_forced = MaskedModel(model, mask)
        decoding = MaskSet({f"model.{name}": m for name, m in mask.masks.items()})
        self._decoding = MaskedModel(_GreedyDecoding(model), decoding)
        self.train(model.training)  # evaluate() restores this mode, on the wrapped model too

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, tgt_len: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits ``[B, T, n_classes + 1]`` of the masked model."""
        return self._teacher_forced(src, src_len, tgt_in, tgt_len)  # type: ignore[return-value]

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_len: torch.Tensor, max_length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens [B, T], lengths [B])``: the model's own greedy decoding with the masked weights."""
        return self._decoding(src, src_len, max_length)  # type: ignore[return-value]


def teacher_forced_batches(
    split: PaddedSeq2SeqSplit, batch_size: int, n_classes: int, seed: int, device: str = "cpu"
) -> Iterator[Seq2SeqMaskBatch]:
    """Endless uniformly drawn batches ``((src, src_len, [SOS] + y, len(y) + 1), y + [EOS])``.

    The form :func:`~recombine.probes.weight_masks.train_weight_mask` reads (positional model inputs,
    then the targets of :func:`~recombine.train.objectives.token_cross_entropy`); the draws depend only
    on ``seed``."""
    if len(split) == 0:
        raise UserError("cannot draw batches from an empty split")
    generator = torch.Generator().manual_seed(seed)
    while True:
        batch = split.random_batch(batch_size, generator)
        decoder_input, target, lengths = teacher_forcing(batch.tgt, batch.tgt_len, n_classes)
        inputs = (batch.src, batch.src_len, decoder_input, lengths)
        yield tuple(x.to(device) for x in inputs), target.to(device)  # type: ignore[misc]


def pretrain_teacher_forced(
    model: nn.Module,
    train: PaddedSeq2SeqSplit,
    n_classes: int,
    *,
    batch_size: int,
    steps: int,
    learning_rate: float,
    grad_clip: float,
    seed: int,
    description: str,
    device: str = "cpu",
) -> list[float]:
    """The weight training before a seq2seq mask analysis (thesis 3.3, B.3.7): teacher-forced token
    cross-entropy on uniformly drawn batches of ``train``, Adam, gradient clipping; the loss per step.
    Leaves the model in eval mode, ready to be frozen and masked."""
    batches = teacher_forced_batches(train, batch_size, n_classes, seed, device)
    return train_model(
        model,
        batches,
        token_cross_entropy,  # type: ignore[arg-type]
        steps,
        learning_rate,
        grad_clip,
        description,
    )


def train_seq2seq_mask(
    model: nn.Module,
    split: PaddedSeq2SeqSplit,
    n_classes: int,
    config: MaskTrainingConfig,
    batch_size: int,
    seed: int = 0,
    device: str = "cpu",
    description: str = "weight mask",
) -> MaskTrainingResult:
    """A mask for the frozen seq2seq ``model`` trained on ``split`` (thesis 3.1, 3.3): token
    cross-entropy of the teacher-forced outputs plus ``alpha * sum_i l_i``; ``batch_size`` examples per
    step, shared between the ``config.n_samples`` mask samples (thesis B.3.2). ``application="auto"``
    means the per-sample loop here: no seq2seq model can be vmapped (module docstring), so trying
    vmap first would only fail."""
    if config.application == "auto":
        config = replace(config, application="loop")
    batches = teacher_forced_batches(split, batch_size, n_classes, seed * 7919 + 1, device)
    return train_weight_mask(model, batches, token_cross_entropy, config, seed=seed, description=description)


def exact_match_accuracy(
    model: nn.Module, split: PaddedSeq2SeqSplit, n_classes: int, batch_size: int = 512
) -> float:
    """Sequence exact match of greedy decoding on ``split`` (thesis C.1; the objective's evaluation).

    ``model`` is a seq2seq model or a :class:`MaskedSeq2Seq`; batches go to the device of its parameters."""
    device = next(model.parameters()).device
    return float(Seq2SeqObjective(n_classes, device=device).evaluate(model, split, batch_size)["accuracy"])


def subset(split: PaddedSeq2SeqSplit, n: int, seed: int) -> PaddedSeq2SeqSplit:
    """``n`` examples of ``split`` drawn without replacement (seeded; all of them when ``n`` is 0 or
    at least the split's size), in their original order."""
    if n < 0:
        raise UserError(f"the number of examples must be >= 0, got {n}")
    if n == 0 or n >= len(split):
        return split
    generator = torch.Generator().manual_seed(seed)
    index = torch.randperm(len(split), generator=generator)[:n].sort().values
    return PaddedSeq2SeqSplit(
        split.inputs[index],
        split.input_lengths[index],
        split.outputs[index],
        split.output_lengths[index],
        split.group[index],
    )


def output_token_labels(output_tokens: Sequence[str]) -> list[str]:
    """Labels of the rows of a seq2seq output layer: row 0 the pad logit (never predicted), rows
    ``1 .. n_classes - 1`` the task's tokens, row ``n_classes`` EOS (``seq2seq_interface``).

    ``output_tokens`` is the task's output vocabulary, pad first."""
    return [*output_tokens, EOS_LABEL]


def removed_per_output_token(
    mask: MaskSet, labels: Sequence[str], name: str = "output.weight", skip: Sequence[int] = (0,)
) -> dict[str, float]:
    """Per output token, the fraction of its output-layer weights the mask removes (thesis Fig. 3.5b).

    Row ``i`` of the ``[n_out, n_in]`` weight ``name`` holds the weights into output ``i``, labelled
    ``labels[i]``; rows in ``skip`` are left out (by default row 0, the pad logit, which is never
    predicted). Returns ``{}`` when the mask does not cover ``name`` (e.g. a Transformer whose output
    layer is tied to its unmasked embedding)."""
    if name not in mask.masks:
        return {}
    weight = mask[name]
    if weight.ndim != 2 or weight.shape[0] != len(labels):
        raise UserError(
            f"{name} has shape {tuple(weight.shape)}; expected {len(labels)} rows, one per output token"
        )
    removed = (~weight).float().mean(dim=1)
    return {label: float(removed[row]) for row, label in enumerate(labels) if row not in skip}
