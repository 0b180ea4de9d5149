"""One post-LayerNorm Transformer decoder layer (Vaswani et al., 2017, sec. 3.1; post-LN as in thesis C.2):

    a      = LN(h + Dropout(SelfAttn_causal(h)))          masked: position i sees positions <= i
    c      = LN(a + Dropout(CrossAttn(a, memory)))        queries from a, keys/values from the encoder
    h_next = LN(c + Dropout(FFN(c)))                      FFN(c) = W_2 ReLU(W_1 c)

The self-attention is ``softmax`` (positions come from an absolute PE added to the input) or ``relative``
(Transformer-XL, causal). The cross-attention is always plain softmax attention without any positional
term (thesis C.3: "at the interface between encoder and decoder ... the standard formulation").

For incremental decoding, ``cache`` holds the keys and values of both attentions from earlier steps
(:mod:`recombine.models.layers.kv_cache`); ``h`` then holds only the newest positions. For teacher
forcing, ``packing`` (:mod:`recombine.models.layers.token_packing`) lets every position-wise operation
run on the real target positions only. The dropout is
:class:`~recombine.models.layers.fast_dropout.FastDropout` (``nn.Dropout``'s distribution, faster on CPU).
"""

from __future__ import annotations

import torch
from torch import nn

from recombine.models.layers.fast_dropout import FastDropout
from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.relative_attention import RelativeSelfAttention
from recombine.models.layers.softmax_attention import SoftmaxSelfAttention
from recombine.models.layers.token_packing import TokenPacking

DECODER_ATTENTION_KINDS = ("softmax", "relative")


class DecoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention: str,
        attention_dropout: float = 0.0,
        ffn: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if attention not in DECODER_ATTENTION_KINDS:
            choices = ", ".join(DECODER_ATTENTION_KINDS)
            raise ValueError(f"unknown decoder attention {attention!r}; valid choices: {choices}")
        self.self_attention: nn.Module = (
            SoftmaxSelfAttention(d_model, n_heads, attention_dropout)
            if attention == "softmax"
            else RelativeSelfAttention(d_model, n_heads, attention_dropout)
        )
        self.self_attention_norm = nn.LayerNorm(d_model)
        self.cross_attention = SoftmaxSelfAttention(d_model, n_heads, attention_dropout)
        self.cross_attention_norm = nn.LayerNorm(d_model)
        self.ffn = (  # the dense MLP, or a thesis ch. 7 block (recombine.models.layers.feed_forward)
            ffn
            if ffn is not None
            else nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        )
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = FastDropout(dropout)

    def forward(
        self,
        h: torch.Tensor,
        memory: torch.Tensor,
        memory_padding_mask: torch.Tensor | None = None,
        cache: tuple[KeyValueCache | None, KeyValueCache | None] | None = None,
        packing: TokenPacking | None = None,
    ) -> torch.Tensor:
        """``h [B, T, d]`` decoder states (or ``[n, d]``, the real positions packed by ``packing``),
        ``memory [B, S, d]`` encoder output, ``memory_padding_mask [B, S]`` (True = padded source
        position), optional ``(self-attention, cross-attention)`` caches (either may be None: a
        cross-attention cache alone reuses the keys and values of ``memory`` across calls). Returns the
        next states, shaped like ``h``."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        attended, _ = self.self_attention(
            h, causal=True, cache=self_cache, packing=packing, need_weights=False
        )
        a = self.self_attention_norm(h + self.dropout(attended))
        read, _ = self.cross_attention(
            a, memory_padding_mask, memory=memory, cache=cross_cache, packing=packing, need_weights=False
        )
        c = self.cross_attention_norm(a + self.dropout(read))
        return self.ffn_norm(c + self.dropout(self.ffn(c)))
