"""sigma-MoE: a mixture-of-experts replacement for the Transformer MLP block (thesis 7.2.3-7.4, App. F).

The dense MLP's ``d_ff`` key-value pairs are split into ``N_E`` experts of ``G`` pairs each (eqs. 7.9-7.10,
``W_1^e``, ``W_2^e``). Each token is routed to its top-K experts (eq. 7.11):

    s = sel(x),  E_x = arg topk(s, K),  y_hat = sum_{e in E_x} W_2^e s[e] ReLU(W_1^e x)     (eq. 7.11)

Selection functions (``selection``; the rows of thesis Tab. 7.4 / F.4):

* ``sigmoid`` (sigma-MoE, eq. 7.17 activation): ``s = sigmoid(W_3 x)``, no competition between experts;
* ``softmax``: ``s = softmax(W_3 x)``, top-K after the softmax without renormalisation (Switch
  Transformer; the "softmax (before top-k)" ablation);
* ``softmax_renorm``: ``norm topk(softmax(W_3 x))`` (eqs. F.1-F.3; the "softmax (after top-k)" ablation
  and Shazeer et al.'s MoE, equivalent to top-K on the logits before the softmax).

Expert dropout (eq. 7.21): in training, ``sel(x) = act(W_3 x) * m`` with ``m ~ Bernoulli(1 - delta)`` per
token and expert, without rescaling; a dropped expert scores 0 and is not selected while ``K`` experts
with positive scores remain.

Regularisers (``regularizer``, weight ``gamma = regularizer_weight``, added to the training loss through
:mod:`recombine.models.layers.auxiliary_loss`):

* ``entropy`` (sigma-MoE, eqs. 7.19-7.20): ``p = mean_{x in B} softmax(W_3 x)``, ``L = sum_e p[e] log p[e]``
  (the negative entropy of the batch's selection distribution; minimising it balances the experts);
* ``switch`` (eqs. 7.14-7.16): ``L = N_E f . p`` with ``f`` the fraction of tokens routed to each
  expert and ``p`` the mean softmax selection probability;
* ``none``.

Both are computed over the real tokens of the batch (batch and time dimensions, padding excluded).

Initialisation (``init``, thesis 7.4): ``sigma`` initialises the experts like the pre-LN dense baseline
of width ``d_ff = N_E * G``: ``W_1^e ~ N(0, sqrt(2 / (d_model n_layers)))``,
``W_2^e ~ N(0, sqrt(2 / (d_ff n_layers)))``, and ``W_3`` with the std of ``W_1^e`` but rows of equal
norm (sample N(0, 1), normalise rows, rescale the matrix to the std). ``standard`` treats experts as
independent MLPs of width ``G`` (``W_2^e`` std from ``G``; ``W_3`` plain normal) - the "standard init"
ablation.

Switch Transformer (Fedus et al. 2022, thesis 7.3) is this layer with :meth:`SigmaMoEConfig.switch`:
K = 1, softmax selection, the ``switch`` regulariser with gamma = 0.01 (App. F.2), no expert dropout, 4x
larger and 4x fewer experts than the default sigma-MoE (same parameter count). Its hard capacity factor
is not used (as in the thesis's reimplementation, footnote 5). Biases are omitted as in eq. 7.11.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.models.layers.auxiliary_loss import EmitsAuxiliaryLoss
from recombine.models.layers.expert_matmul import expert_mlp

SELECTIONS = ("sigmoid", "softmax", "softmax_renorm")
REGULARIZERS = ("entropy", "switch", "none")
INITS = ("sigma", "standard")


@dataclass
class SigmaMoEConfig:
    n_experts: int = 16  # N_E (thesis Tab. F.3)
    expert_size: int = 0  # G; 0: d_ff // n_experts, the dense MLP's parameter count
    k: int = 4  # experts per token
    selection: str = "sigmoid"
    expert_dropout: float = 0.0  # delta, eq. 7.21
    dropout: float = 0.0  # standard dropout on the expert units (Switch; "standard dropout" ablation)
    regularizer: str = "entropy"
    regularizer_weight: float = 0.001  # gamma (Tab. F.3)
    init: str = "sigma"

    def __post_init__(self) -> None:
        for name, value, valid in (
            ("selection", self.selection, SELECTIONS),
            ("regularizer", self.regularizer, REGULARIZERS),
            ("init", self.init, INITS),
        ):
            if value not in valid:
                raise UserError(f"unknown moe {name} {value!r}; {choices_hint(value, valid)}")
        if self.n_experts < 1:
            raise UserError(f"moe n_experts must be >= 1, got {self.n_experts}")
        if not 1 <= self.k <= self.n_experts:
            raise UserError(f"moe k must be in [1, n_experts={self.n_experts}], got {self.k}")
        if self.expert_size < 0:
            raise UserError(f"moe expert_size must be >= 0 (0: d_ff // n_experts), got {self.expert_size}")
        for name, p in (("expert_dropout", self.expert_dropout), ("dropout", self.dropout)):
            if not 0.0 <= p < 1.0:
                raise UserError(f"moe {name} must be in [0, 1), got {p}")

    @classmethod
    def switch(cls) -> SigmaMoEConfig:
        """The Switch-Transformer baseline (thesis 7.3, Tab. 7.4 "Switch, K = 1, G = 512, no dropout"),
        parameter-equal to the default sigma-MoE: 4 experts of 4x the size."""
        return cls(n_experts=4, k=1, selection="softmax", regularizer="switch", regularizer_weight=0.01)

    def resolved_expert_size(self, d_ff: int) -> int:
        size = self.expert_size or d_ff // self.n_experts
        if size < 1:
            raise UserError(f"moe expert_size resolves to 0: d_ff={d_ff} < n_experts={self.n_experts}")
        return size


def entropy_regularizer(logits: torch.Tensor) -> torch.Tensor:
    """Eqs. 7.19-7.20 on selection logits ``W_3 x`` of the batch's tokens ``[N, N_E]``, in log space:
    ``log p = logsumexp_x log_softmax(W_3 x) - log N``, ``L = sum_e p[e] log p[e]``."""
    log_p = torch.logsumexp(F.log_softmax(logits, dim=-1), dim=0) - math.log(logits.shape[0])
    return (log_p.exp() * log_p).sum()


def switch_balancing_loss(logits: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    """Eqs. 7.14-7.16: ``N_E f . p``, ``f[i]`` the fraction of tokens with ``i`` among their selected
    experts ``expert_index [N, K]``, ``p`` the mean of ``softmax(W_3 x)`` over the tokens."""
    n_experts = logits.shape[-1]
    f = F.one_hot(expert_index, n_experts).sum(-2).to(logits.dtype).mean(0)
    p = torch.softmax(logits, dim=-1).mean(0)
    return n_experts * (f * p).sum()


def sigma_moe_init_(
    keys: torch.Tensor, values: torch.Tensor, selection: torch.Tensor, n_layers: int, standard: bool = False
) -> None:
    """Thesis 7.4 initialisation in place (``standard=True``: the "standard init" ablation)."""
    n_experts, d_model, expert_size = keys.shape
    d_ff = n_experts * expert_size
    key_std = math.sqrt(2.0 / (d_model * n_layers))
    value_std = math.sqrt(2.0 / ((expert_size if standard else d_ff) * n_layers))
    with torch.no_grad():
        keys.normal_(0.0, key_std)
        values.normal_(0.0, value_std)
        if standard:
            selection.normal_(0.0, key_std)
        else:  # equal row norms, then the whole matrix rescaled to the std of W_1^e
            selection.normal_(0.0, 1.0)
            selection.div_(selection.norm(dim=1, keepdim=True))
            selection.mul_(key_std / selection.std())


class SigmaMoE(EmitsAuxiliaryLoss):
    """``x [..., d_model] -> [..., d_model]``; in training, emits ``gamma * L`` as an auxiliary loss."""

    def __init__(self, d_model: int, d_ff: int, n_layers: int, config: SigmaMoEConfig) -> None:
        super().__init__()
        self.config = config
        n_experts, expert_size = config.n_experts, config.resolved_expert_size(d_ff)
        self.keys = nn.Parameter(torch.empty(n_experts, d_model, expert_size))  # W_1^e transposed
        self.values = nn.Parameter(torch.empty(n_experts, expert_size, d_model))  # W_2^e transposed
        self.expert_selection = nn.Parameter(torch.empty(n_experts, d_model))  # W_3
        sigma_moe_init_(
            self.keys, self.values, self.expert_selection, n_layers, standard=config.init == "standard"
        )

    def select(
        self, logits: torch.Tensor, real: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(expert_index [N, K], score [N, K])`` from the selection logits ``W_3 x [N, N_E]``; ``real``
        (True = real token, ``[N]``) is for routings that depend on the whole batch (S-BASE)."""
        config = self.config
        s = torch.sigmoid(logits) if config.selection == "sigmoid" else torch.softmax(logits, dim=-1)
        if self.training and config.expert_dropout > 0:  # eq. 7.21
            keep = torch.rand_like(s) >= config.expert_dropout
            s = s * keep
        score, index = s.topk(config.k, dim=-1, sorted=False)
        if config.selection == "softmax_renorm":  # eq. F.3
            score = score / score.sum(-1, keepdim=True).clamp_min(torch.finfo(score.dtype).tiny)
        return index, score

    def regularizer(self, logits: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
        """The unweighted regulariser ``L`` on the logits and routing of the batch's real tokens."""
        if self.config.regularizer == "entropy":
            return entropy_regularizer(logits)
        if self.config.regularizer == "switch":
            return switch_balancing_loss(logits, expert_index)
        return logits.new_zeros(())

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``token_mask`` (True = real token, shape ``x.shape[:-1]``) restricts the regulariser to real
        tokens; the output is computed for every position."""
        flat = x.reshape(-1, x.shape[-1])
        logits = F.linear(flat, self.expert_selection)
        real = None if token_mask is None else token_mask.reshape(-1)
        expert_index, score = self.select(logits, real)
        config = self.config
        regularized = config.regularizer != "none" and config.regularizer_weight > 0
        if regularized and self.training and torch.is_grad_enabled():
            rows = slice(None) if real is None else real
            real_logits = logits[rows]
            if real_logits.shape[0] > 0:
                term = self.regularizer(real_logits, expert_index[rows])
                self.add_auxiliary_loss(config.regularizer_weight * term)
        y = expert_mlp(flat, expert_index, score, self.keys, self.values, config.dropout, self.training)
        return y.reshape(x.shape)


def parameter_matched_dense_width(d_model: int, n_experts: int, expert_size: int) -> int:
    """The dense MLP width (no biases) with the MoE's parameter count ``2 d_model N_E G + N_E d_model``,
    rounded up: the extra units compensate for the selection matrix ``W_3`` (thesis 7.5)."""
    return n_experts * expert_size + math.ceil(n_experts / 2)
