"""LSTMs on the fixed-size add/mul and double-addition inputs of the mask analyses (thesis 3.2.1, 3.2.2).

The thesis runs its LSTM on these vector tasks by showing the input for a fixed number of time steps
and reading the answer from the output at a chosen step; "no loss is applied in intermediate steps"
(3.2.1). Both models here map ``[B, n_inputs] -> [B, n_outputs]`` logits like the FNN
(:mod:`recombine.models.fnn`), so the mask analyses train, mask and evaluate them with the same code:

* :class:`RepeatedInputLSTM`, the add/mul LSTM and the double-addition "LSTM" of Tab. 3.1: the whole
  input at every one of ``n_steps`` steps, the answer read at the last step. B.3.4: "For the LSTM we
  use 3 time steps where the input is repeated for every step"; B.3.5: "In the full input case, both
  tuples are presented for all 6 steps and the output is read from the last step."
* :class:`PairByPairLSTM`, "LSTM (forced)" of Tab. 3.1: the input's first half (pair 1) for
  ``steps_per_pair`` steps with the second half zeroed, then the second half (pair 2) with the first
  zeroed, without resetting the state. Pair 1's answer is the first half of the outputs at step
  ``steps_per_pair``, pair 2's the second half at the last step. B.3.5: "the first tuple is shown for
  the first 3 steps, resulting in an output at the 3rd step, the second tuple is presented for the next
  3 steps, resulting in an output at the 6th step."

Parameters: ``lstm.weight_ih_l<k>`` / ``lstm.weight_hh_l<k>`` (``nn.LSTM``, biases
``lstm.bias_*``) and ``output.weight`` / ``output.bias``: the rows of the per-layer sharing figures,
input layer ``lstm.weight_ih_l0`` first and the output layer last. Thesis size (B.3.4): a hidden state
of 256; the number of layers is not given (the authors' public code uses 2; 1 is the default here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recombine.errors import UserError


@dataclass
class ArithmeticLSTMConfig:
    hidden_size: int = 256  # B.3.4
    n_layers: int = 1
    steps: int = 3  # B.3.4 / B.3.5: 3 steps per input (add/mul) or per pair (double addition)

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.n_layers < 1 or self.steps < 1:
            raise UserError("lstm.hidden_size, lstm.n_layers and lstm.steps must be >= 1")


class _StepLSTM(nn.Module):
    def __init__(self, n_inputs: int, n_outputs: int, config: ArithmeticLSTMConfig) -> None:
        super().__init__()
        self.config = config
        self.lstm = nn.LSTM(n_inputs, config.hidden_size, num_layers=config.n_layers, batch_first=True)
        self.output = nn.Linear(config.hidden_size, n_outputs)

    def step_logits(self, sequence: torch.Tensor) -> torch.Tensor:
        """``[B, T, n_inputs] -> [B, T, n_outputs]``: the output layer at every step."""
        hidden, _ = self.lstm(sequence)
        return self.output(hidden)


class RepeatedInputLSTM(_StepLSTM):
    """The input repeated for ``n_steps`` steps; the logits of the last step (thesis B.3.4, B.3.5)."""

    def __init__(self, n_inputs: int, n_outputs: int, config: ArithmeticLSTMConfig, n_steps: int) -> None:
        super().__init__(n_inputs, n_outputs, config)
        if n_steps < 1:
            raise UserError(f"n_steps must be >= 1, got {n_steps}")
        self.n_steps = n_steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_inputs] -> [B, n_outputs]``."""
        sequence = x.unsqueeze(1).expand(-1, self.n_steps, -1)
        return self.step_logits(sequence)[:, -1]


class PairByPairLSTM(_StepLSTM):
    """The "LSTM (forced)": pair 1 alone for ``config.steps`` steps, then pair 2 (thesis 3.2.2, B.3.5).

    The input's halves are the pairs (``[a, b | c, d]`` digits), as are the output's."""

    def __init__(self, n_inputs: int, n_outputs: int, config: ArithmeticLSTMConfig) -> None:
        if n_inputs % 2 or n_outputs % 2:
            raise UserError(
                f"pair-by-pair inputs and outputs must split in halves, got {n_inputs}, {n_outputs}"
            )
        super().__init__(n_inputs, n_outputs, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, n_inputs] -> [B, n_outputs]``: pair 1's logits at step ``steps``, pair 2's at ``2 steps``."""
        steps, half = self.config.steps, x.shape[1] // 2
        zeros = torch.zeros_like(x[:, :half])
        first = torch.cat([x[:, :half], zeros], dim=1)
        second = torch.cat([zeros, x[:, half:]], dim=1)
        sequence = torch.cat(
            [first.unsqueeze(1).expand(-1, steps, -1), second.unsqueeze(1).expand(-1, steps, -1)], dim=1
        )
        logits = self.step_logits(sequence)
        n_half = logits.shape[-1] // 2
        return torch.cat([logits[:, steps - 1, :n_half], logits[:, -1, n_half:]], dim=1)
