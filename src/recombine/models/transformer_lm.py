"""A pre-LayerNorm causal Transformer language model with relative positional encoding (thesis 7.5, F.2).

The thesis's testbed is Transformer-XL (Dai et al., 2019) with pre-LayerNorm. Per layer ``l``:

    a = h + Drop(Attn_causal(LN(h)))          relative PE of Transformer-XL (thesis eq. D.7), keys j <= i
    h_next = a + Drop(FFN(LN(a)))             FFN = the block chosen by ``ffn`` (thesis ch. 7)

with token embeddings at the input and ``logits = W_out LN(h_L)`` at the output. ``ffn`` is any of
``dense|topk|pkm|sigma_moe|switch|s_base`` (:mod:`recombine.models.layers.feed_forward`). The dense block has
no biases (eq. 7.1) and the initialisation the sigma-MoE copies (thesis 7.4):
``W_1 ~ N(0, sqrt(2 / (d_model n_layers)))``, ``W_2 ~ N(0, sqrt(2 / (d_ff n_layers)))``, so a dense model
of width ``parameter_matched_dense_width`` has exactly the parameters of the sigma-MoE with ``N_E G = d_ff``
(even ``N_E``). Regularisers of the approximations (eqs. 7.16, 7.20) are returned by :meth:`auxiliary_loss`.

Not done (thesis F.2): the Transformer-XL memory of earlier segments (we train on independent windows),
and evaluation with a 4x longer memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError
from recombine.models.layers.auxiliary_loss import discard_auxiliary_losses, pop_auxiliary_loss
from recombine.models.layers.feed_forward import FeedForwardChoice
from recombine.models.layers.relative_attention import RelativeSelfAttention


@dataclass
class TransformerLMConfig(FeedForwardChoice):
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.d_model, self.n_heads, self.n_layers, self.d_ff) < 1:
            raise UserError("d_model, n_heads, n_layers and d_ff must be >= 1")
        if self.d_model % self.n_heads:
            raise UserError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")


class DenseFeedForward(nn.Module):
    """``W_2 Drop(ReLU(W_1 x))`` without biases (thesis eqs. 7.1-7.2), initialised as in thesis 7.4."""

    def __init__(self, d_model: int, d_ff: int, n_layers: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=False)  # W_1
        self.down = nn.Linear(d_ff, d_model, bias=False)  # W_2
        self.dropout = nn.Dropout(dropout)
        nn.init.normal_(self.up.weight, 0.0, math.sqrt(2.0 / (d_model * n_layers)))
        nn.init.normal_(self.down.weight, 0.0, math.sqrt(2.0 / (d_ff * n_layers)))

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.down(self.dropout(F.relu(self.up(x))))


class PreLNDecoderLayer(nn.Module):
    def __init__(self, config: TransformerLMConfig) -> None:
        super().__init__()
        c = config
        self.attention_norm = nn.LayerNorm(c.d_model)
        self.attention = RelativeSelfAttention(c.d_model, c.n_heads, c.attention_dropout)
        self.ffn_norm = nn.LayerNorm(c.d_model)
        block = c.build_block(c.d_model, c.d_ff, c.n_layers)
        self.ffn = block if block is not None else DenseFeedForward(c.d_model, c.d_ff, c.n_layers, c.dropout)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attention(self.attention_norm(h), causal=True)
        a = h + self.dropout(attended)
        return a + self.dropout(self.ffn(self.ffn_norm(a)))


class TransformerLM(nn.Module):
    """``tokens [B, T] -> logits [B, T, vocab]``; position ``t`` predicts token ``t + 1``."""

    def __init__(self, vocab_size: int, config: TransformerLMConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or TransformerLMConfig()
        self.embedding = nn.Embedding(vocab_size, config.d_model)
        self.input_dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(PreLNDecoderLayer(config) for _ in range(config.n_layers))
        self.output_norm = nn.LayerNorm(config.d_model)
        self.readout = nn.Linear(config.d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        discard_auxiliary_losses(self)
        h = self.input_dropout(self.embedding(tokens))
        for layer in self.layers:
            h = layer(h)
        return self.readout(self.output_norm(h))

    def auxiliary_loss(self) -> torch.Tensor | None:
        """The regularisers the feed-forward blocks emitted in the last training forward (or None)."""
        return pop_auxiliary_loss(self)


def bits_per_character(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in bits: ``-mean log2 p(target)`` (the Enwik8 metric, Tab. 7.3)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)) / math.log(2.0)
