"""The Transformer feed-forward block and its drop-in approximations (thesis ch. 7).

``ffn`` picks the block of every layer:

==============  ====================================================  ==========================
kind            block                                                 thesis
==============  ====================================================  ==========================
``dense``       ``W_2 ReLU(W_1 x)``, width ``d_ff``                    eqs. 7.1-7.2
``topk``        top-K activation MLP                                  7.2.1, eqs. 7.6-7.7
``pkm``         product-key memory (ReLU or softmax)                  7.2.2, eq. 7.8, F.1.3
``sigma_moe``   sigma-MoE (sigmoid selection, top-K experts)          7.4, eqs. 7.11, 7.19-7.21
``switch``      Switch Transformer (softmax, K = 1): sigma-MoE layer  7.3, eqs. 7.14-7.16
``s_base``      S-BASE (Sinkhorn-balanced routing, sigmoid weights)   7.3, eqs. 7.17-7.18
==============  ====================================================  ==========================

The approximations are sized from ``d_ff`` (MoE: ``N_E * G = d_ff``; PKM: parameter-matched sub-keys),
so switching ``ffn`` keeps the model's parameter count close to the dense one. Each kind has its own
config (``model.topk.*``, ``model.pkm.*``, ``model.sigma_moe.*``, ``model.switch.*``,
``model.s_base.*``). A Transformer config gets ``ffn`` and these fields by deriving from
:class:`FeedForwardChoice`, and builds its blocks with :meth:`FeedForwardChoice.build_block`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recombine.errors import UserError, choices_hint
from recombine.models.layers.pkm import PKMConfig, ProductKeyMemory
from recombine.models.layers.s_base import SBaseConfig, SBaseMoE
from recombine.models.layers.sigma_moe import SigmaMoE, SigmaMoEConfig
from recombine.models.layers.topk_mlp import TopKMLP, TopKMLPConfig

FFN_KINDS = ("dense", "topk", "pkm", "sigma_moe", "switch", "s_base")

FeedForward = TopKMLP | ProductKeyMemory | SigmaMoE


def check_ffn_kind(kind: str) -> None:
    if kind not in FFN_KINDS:
        raise UserError(f"unknown model.ffn {kind!r}; {choices_hint(kind, FFN_KINDS)}")


@dataclass
class FeedForwardChoice:
    """The fields every Transformer config shares for its feed-forward blocks: which kind, and the
    config of each kind (only the chosen one is used)."""

    ffn: str = "dense"
    topk: TopKMLPConfig = field(default_factory=TopKMLPConfig)
    pkm: PKMConfig = field(default_factory=PKMConfig)
    sigma_moe: SigmaMoEConfig = field(default_factory=SigmaMoEConfig)
    switch: SigmaMoEConfig = field(default_factory=SigmaMoEConfig.switch)
    s_base: SBaseConfig = field(default_factory=SBaseConfig)

    def __post_init__(self) -> None:
        check_ffn_kind(self.ffn)

    def build_block(self, d_model: int, d_ff: int, n_layers: int) -> FeedForward | None:
        """The block of the chosen kind (None for ``dense``: the layer's own dense MLP)."""
        return build_feed_forward(
            self.ffn,
            d_model,
            d_ff,
            n_layers,
            topk=self.topk,
            pkm=self.pkm,
            sigma_moe=self.sigma_moe,
            switch=self.switch,
            s_base=self.s_base,
        )


def build_feed_forward(
    kind: str,
    d_model: int,
    d_ff: int,
    n_layers: int,
    *,
    topk: TopKMLPConfig,
    pkm: PKMConfig,
    sigma_moe: SigmaMoEConfig,
    switch: SigmaMoEConfig,
    s_base: SBaseConfig | None = None,
) -> FeedForward | None:
    """The block for ``kind``; None for ``dense`` (the encoder layer's own dense MLP).

    ``n_layers`` is the number of layer applications (the sigma-MoE initialisation, thesis 7.4)."""
    check_ffn_kind(kind)
    if kind == "topk":
        return TopKMLP(d_model, d_ff, topk)
    if kind == "pkm":
        return ProductKeyMemory(d_model, d_ff, pkm)
    if kind == "sigma_moe":
        return SigmaMoE(d_model, d_ff, n_layers, sigma_moe)
    if kind == "switch":
        return SigmaMoE(d_model, d_ff, n_layers, switch)
    if kind == "s_base":
        return SBaseMoE(d_model, d_ff, n_layers, s_base if s_base is not None else SBaseConfig())
    return None
