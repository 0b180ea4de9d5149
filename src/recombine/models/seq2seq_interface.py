"""What the seq2seq trainer and every seq2seq model agree on: token ids, teacher forcing, methods.

Target sequences ``y`` use the task's output vocabulary: ids ``1 .. n_classes - 1``, with ``0`` the padding
id, which is never a target and never predicted. A model adds two ids of its own:

* ``EOS = n_classes``: the end of the output. The model predicts ``n_classes + 1`` logits per step
  (pad, the task's tokens, EOS); the pad logit is ignored by the loss and by decoding.
* ``SOS = n_classes + 1``: the first decoder input. It is only ever an input, never a prediction.

Teacher forcing (Sutskever et al., 2014; Vaswani et al., 2017): the decoder input is ``[SOS] + y`` and
the target at the same positions is ``y + [EOS]``, both of length ``len(y) + 1``.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

PAD_ID = 0


def eos_id(n_classes: int) -> int:
    return n_classes


def sos_id(n_classes: int) -> int:
    return n_classes + 1


def teacher_forcing(
    outputs: torch.Tensor, lengths: torch.Tensor, n_classes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``outputs [B, T]`` (0-padded ``y``) and ``lengths [B]`` -> ``(decoder_input [B, T+1], target
    [B, T+1], lengths + 1)``: ``[SOS] + y`` and ``y + [EOS]``, 0 after each sequence's end."""
    decoder_input = F.pad(outputs, (1, 0), value=sos_id(n_classes))
    target = F.pad(outputs, (0, 1), value=PAD_ID)
    target[torch.arange(len(lengths), device=outputs.device), lengths] = eos_id(n_classes)
    return decoder_input, target, lengths + 1


class Seq2SeqModel(Protocol):
    """The methods the seq2seq objective calls (:mod:`recombine.train.objectives`)."""

    def __call__(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, tgt_len: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits ``[B, T, n_classes + 1]`` for the decoder input ``tgt_in [B, T]``."""
        ...

    def greedy_decode(
        self, src: torch.Tensor, src_len: torch.Tensor, max_length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens [B, T'], lengths [B])``: the argmax output up to (without) EOS, 0 from there on;
        a sequence without EOS within ``max_length`` steps has length ``max_length``."""
        ...
