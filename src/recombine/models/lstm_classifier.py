"""LSTM and bidirectional LSTM sequence classifiers (thesis Tab. 5.1 baselines, Tab. D.3).

Reads the final hidden state of the last layer (both directions for the bidirectional model).
RNNs get no begin/end tokens (thesis D.3.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recombine.errors import UserError
from recombine.tasks.base import TaskSpec


@dataclass
class LSTMClassifierConfig:
    d_model: int = 200
    d_embedding: int = 0  # 0: same as d_model
    n_layers: int = 1
    dropout: float = 0.5
    bidirectional: bool = False

    def __post_init__(self) -> None:
        if self.d_model < 1 or self.n_layers < 1:
            raise UserError("model.d_model and model.n_layers must be >= 1")


class LSTMClassifier(nn.Module):
    def __init__(self, spec: TaskSpec, config: LSTMClassifierConfig) -> None:
        super().__init__()
        self.config = config
        d_embedding = config.d_embedding or config.d_model
        self.embedding = nn.Embedding(spec.input_vocab_size, d_embedding)
        self.lstm = nn.LSTM(
            d_embedding,
            config.d_model,
            num_layers=config.n_layers,
            batch_first=True,
            dropout=config.dropout if config.n_layers > 1 else 0.0,
            bidirectional=config.bidirectional,
        )
        self.dropout = nn.Dropout(config.dropout)
        directions = 2 if config.bidirectional else 1
        self.readout = nn.Linear(directions * config.d_model, spec.n_classes)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(
            self.dropout(self.embedding(tokens)), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, (hidden, _) = self.lstm(packed)
        directions = 2 if self.config.bidirectional else 1
        final = hidden[-directions:].transpose(0, 1).reshape(tokens.shape[0], -1)  # last layer, all dirs
        return self.readout(self.dropout(final))
