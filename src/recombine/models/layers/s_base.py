"""S-BASE: BASE layers with Sinkhorn-balanced routing, a baseline of thesis 7.3 (Tab. 7.4, F.4; CATALOG §2).

BASE layers (Lewis et al., 2021) score the experts with a sigmoid, ``sel(x) = sigmoid(W_3 x)`` (eq. 7.17), and
route each token of the batch ``B`` by solving the balanced linear assignment problem (eq. 7.18)

    maximise  sum_{x in B} sel(x)[e_x]   s.t.  every expert receives |B| / N_E tokens.

S-BASE (Clark et al., 2022), which the thesis reimplements, approximates the assignment with a few Sinkhorn
iterations (Sinkhorn 1964; Sinkhorn and Knopp 1967): the matrix ``exp(W_3 x)`` of the batch's ``N`` tokens
and ``N_E`` experts is rescaled, rows and columns in turn, towards the transport plan ``P`` with row sums 1
(each token routes one unit) and column sums ``N / N_E`` (each expert receives an equal share):

    P[n, e] = exp(W_3 x_n [e] + r[n] + c[e])
    r[n] = -log sum_e exp(W_3 x_n [e] + c[e])                    (rows sum to 1)
    c[e] = log(N / N_E) - log sum_n exp(W_3 x_n [e] + r[n])      (columns sum to N / N_E)

computed in log space, ending with the column step, so after the last iteration the expert loads are exact
and the row sums approximate. In training, each token goes to the top-K experts of its row of ``P``
(no gradient flows through the routing); in evaluation the batch is not available token by token (causal
decoding), so each token goes to ``arg topk sigmoid(W_3 x)`` instead (thesis 7.3). Either way the expert
outputs are weighted by ``sigmoid(W_3 x)[e]`` ("sigmoid activation is always applied to compute the
weighting score", thesis 7.3), through which ``W_3`` is trained, and the output is eq. 7.11.

The thesis's S-BASE uses K = 1 with 4x larger, 4x fewer experts than sigma-MoE (parameter-equal; Tab. 7.4
"S-BASE, K = 1, G = 512"), also K = 4 (Tab. F.4), no expert dropout, and the entropy regulariser of
eq. 7.20 (App. F.2: "The other variants, including S-BASE, use the regularizer proposed by us"). As for
Switch, no hard capacity factor is enforced (thesis footnote 5). The Sinkhorn balancing is over all real
tokens of the batch (batch and time dimensions), so in training a token's routing depends on the other
tokens of the batch, which is why evaluation falls back to the per-token top-K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from recombine.errors import UserError
from recombine.models.layers.sigma_moe import SigmaMoE, SigmaMoEConfig


@dataclass
class SBaseConfig(SigmaMoEConfig):
    """The S-BASE baseline: the defaults are the thesis's parameter-equal K = 1 row (4 experts of 4x the
    sigma-MoE's expert size at the same ``d_ff``); ``k=4, n_experts=16`` is its "S-BASE, K = 4" row."""

    n_experts: int = 4
    k: int = 1
    selection: str = "sigmoid"  # the weighting score (eq. 7.17); the routing is Sinkhorn in training
    regularizer: str = "entropy"  # eq. 7.20 (App. F.2)
    regularizer_weight: float = 0.001
    sinkhorn_iterations: int = 3  # as in the thesis's reference implementation

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.selection != "sigmoid":
            raise UserError(
                "s_base scores experts with a sigmoid (eq. 7.17); selection must be 'sigmoid', "
                f"got {self.selection!r}"
            )
        if self.expert_dropout:
            raise UserError("s_base uses no expert dropout (thesis 7.5); set expert_dropout=0")
        if self.sinkhorn_iterations < 1:
            raise UserError(f"s_base sinkhorn_iterations must be >= 1, got {self.sinkhorn_iterations}")


def sinkhorn_log_plan(logits: torch.Tensor, iterations: int) -> torch.Tensor:
    """``log P [N, N_E]`` after ``iterations`` Sinkhorn row/column rescalings of ``exp(logits)`` towards row
    sums 1 and column sums ``N / N_E`` (the balanced transport plan; the last step fixes the columns)."""
    n_tokens, n_experts = logits.shape
    column_target = math.log(n_tokens / n_experts)
    column = logits.new_zeros(n_experts)
    row = logits.new_zeros(n_tokens)
    for _ in range(iterations):
        row = -torch.logsumexp(logits + column, dim=1)
        column = column_target - torch.logsumexp(logits + row[:, None], dim=0)
    return logits + row[:, None] + column


class SBaseMoE(SigmaMoE):
    """``x [..., d_model] -> [..., d_model]``: eq. 7.11 with Sinkhorn-balanced top-K routing in training and
    sigmoid top-K routing in evaluation, expert weights ``sigmoid(W_3 x)``."""

    config: SBaseConfig

    def __init__(self, d_model: int, d_ff: int, n_layers: int, config: SBaseConfig) -> None:
        super().__init__(d_model, d_ff, n_layers, config)

    def routing_keys(self, logits: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
        """The matrix whose row-wise top-K routes the tokens: the Sinkhorn plan of the real tokens in
        training (logits of padding rows, which are routed but never balanced), the logits otherwise."""
        if not self.training:
            return logits.detach()
        with torch.no_grad():
            if real is None:
                return sinkhorn_log_plan(logits, self.config.sinkhorn_iterations)
            keys = logits.detach().clone()
            if bool(real.any()):
                keys[real] = sinkhorn_log_plan(logits[real], self.config.sinkhorn_iterations)
            return keys

    def select(
        self, logits: torch.Tensor, real: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        index = self.routing_keys(logits, real).topk(self.config.k, dim=-1, sorted=False).indices
        return index, torch.sigmoid(logits).gather(-1, index)
