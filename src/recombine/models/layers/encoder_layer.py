"""One Transformer encoder layer, optionally with the copy gate (thesis Fig. 5.1).

Without a gate this is the standard post-LayerNorm layer:
    a = LN(h + Attn(h));  h_next = LN(a + FFN(a)).
With the copy gate (eqs. 5.1-5.4) the feed-forward block has no residual and its output is gated:
    a = LN(Attn(h) + h)                       (eq. 5.1)
    u = LN(FFN_data(a))                       (eq. 5.2; tanh instead of LN for non-geometric
                                               attention, thesis D.3.3)
    h_next = g * u + (1 - g) * h,  g = sigmoid(FFN_gate(a))   (eqs. 5.3-5.4)

FFN is the dense two-layer MLP (eq. 5.5) unless another feed-forward block is passed as ``ffn``
(top-K MLP, PKM, sigma-MoE; thesis ch. 7, :mod:`recombine.models.layers.feed_forward`); such a block
also receives the mask of real tokens (for its regulariser).

The modified NDR of thesis E.1.1 is three switches: ``activation="gelu"`` (eq. E.1 for the data and gate
FFNs), ``data_residual=True`` (eq. E.2 replaces eq. 5.2: ``u = LN(FFN_data(a) + a)``) and
``ffn_dropout=False`` ("We do not use any dropout in Eq. E.1": the FFN output is not dropped).

``hidden_dropout=True`` also drops the hidden activations of the dense data FFN and of the copy gate's
FFN (between their two linear maps) at the layer's dropout rate, as the authors' released NDR layer does;
with ``ffn_dropout=False`` it is that layer's placement (the FFN output is not dropped).

``fast_dropout=True`` draws the dropout masks of the layer's own dropout (after attention and FFN) with
:class:`~recombine.models.layers.fast_dropout.FastDropout`: the same distribution, faster on CPU, a
different random stream (the seq2seq Transformer uses it; the classifiers keep ``nn.Dropout``). The hidden
dropout of ``hidden_dropout=True`` is always ``nn.Dropout``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from recombine.models.layers.activations import activation_with_dropout
from recombine.models.layers.copy_gate import CopyGate
from recombine.models.layers.fast_dropout import FastDropout
from recombine.models.layers.geometric_attention import GeometricSelfAttention
from recombine.models.layers.relative_attention import RelativeSelfAttention
from recombine.models.layers.softmax_attention import SoftmaxSelfAttention
from recombine.models.layers.token_packing import TokenPacking

AttentionKind = Literal["softmax", "relative", "gated_absrel", "geometric"]
ATTENTION_KINDS = ("softmax", "relative", "gated_absrel", "geometric")


def build_attention(
    kind: str, d_model: int, n_heads: int, dropout: float, geometric_normalize: bool = False
) -> nn.Module:
    if kind == "softmax":
        return SoftmaxSelfAttention(d_model, n_heads, dropout)
    if kind == "relative":
        return RelativeSelfAttention(d_model, n_heads, dropout)
    if kind == "gated_absrel":
        return RelativeSelfAttention(d_model, n_heads, dropout, absolute_gate=True)
    if kind == "geometric":
        return GeometricSelfAttention(d_model, n_heads, dropout, normalize=geometric_normalize)
    raise ValueError(f"unknown attention {kind!r}; valid choices: {', '.join(ATTENTION_KINDS)}")


class EncoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention: str,
        copy_gate: bool,
        attention_dropout: float = 0.0,
        gate_dropout: float = 0.0,
        ffn: nn.Module | None = None,
        activation: str = "relu",
        data_residual: bool = False,
        ffn_dropout: bool = True,
        fast_dropout: bool = False,
        hidden_dropout: bool = False,
        geometric_normalize: bool = False,
    ) -> None:
        super().__init__()
        if data_residual and not copy_gate:
            raise ValueError("data_residual (thesis eq. E.2) is a change to the gated layer; set copy_gate")
        if hidden_dropout and ffn is not None:
            raise ValueError("hidden_dropout applies to the dense feed-forward block, not to a custom ffn")
        hidden_rate = dropout if hidden_dropout else 0.0
        if geometric_normalize and attention != "geometric":
            raise ValueError("geometric_normalize applies to geometric attention")
        self.attention = build_attention(attention, d_model, n_heads, attention_dropout, geometric_normalize)
        self.attention_norm = nn.LayerNorm(d_model)
        self.ffn_takes_mask = ffn is not None
        self.ffn = (  # eq. 5.5, or a thesis ch. 7 approximation of it
            ffn
            if ffn is not None
            else nn.Sequential(
                nn.Linear(d_model, d_ff),
                activation_with_dropout(activation, hidden_rate),
                nn.Linear(d_ff, d_model),
            )
        )
        dropout_kind = FastDropout if fast_dropout else nn.Dropout
        self.dropout = dropout_kind(dropout)
        self.ffn_dropout = dropout_kind(dropout) if ffn_dropout else nn.Identity()
        self.data_residual = data_residual
        self.copy_gate = (
            CopyGate(d_model, gate_dropout=gate_dropout, activation=activation, hidden_dropout=hidden_rate)
            if copy_gate
            else None
        )
        # thesis D.3.3: gated models without geometric attention use tanh instead of LN in eq. 5.2
        self.update_norm: nn.Module = (
            nn.Tanh() if copy_gate and attention != "geometric" else nn.LayerNorm(d_model)
        )

    def forward(
        self,
        h: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        packing: TokenPacking | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``h [B, N, d_model]``, or with ``packing`` (softmax and relative attention only) the real
        positions ``[n, d_model]`` of a right-padded batch (:mod:`~recombine.models.layers.token_packing`):
        every operation but the attention then runs on those only. Returns the next states shaped like
        ``h`` and ``{"attention": [B, heads, N, N], "gate": ...}``."""
        if packing is None:
            attended, attention = self.attention(h, key_padding_mask)
        else:
            attended, attention = self.attention(h, key_padding_mask, packing=packing)
        a = self.attention_norm(h + self.dropout(attended))  # eq. 5.1
        if self.ffn_takes_mask:  # packed: every row is a real token
            token_mask = None if key_padding_mask is None or packing is not None else ~key_padding_mask
            transformed = self.ffn(a, token_mask)
        else:
            transformed = self.ffn(a)
        transformed = self.ffn_dropout(transformed)
        if self.copy_gate is None:
            return self.update_norm(a + transformed), {"attention": attention}
        # eq. 5.2, or eq. E.2 with the residual connection of the modified NDR (thesis E.1.1)
        u = self.update_norm(transformed + a if self.data_residual else transformed)
        h_next, gate = self.copy_gate(a, u, h)  # eqs. 5.3-5.4
        return h_next, {"attention": attention, "gate": gate}
