"""The Multiplexer (Block-Operations paper, sec. 4 and Fig. 2 left): route M input blocks to N output blocks.

The activations are split into blocks of ``block_size`` neurons. A contained FNN reads the
concatenation of all M input blocks and emits an M*N matrix of routing logits; a softmax over the
M inputs (the paper's "first dimension") turns it into, for every output block n, a convex
combination of the input blocks:

    L = FNN([x_1; ...; x_M])  reshaped to [N, M]          (BLOCK sec. 4, "Multiplexer")
    w_n = softmax_m(L_n)                                  (softmax over the M inputs)
    y_n = sum_m w_{n,m} x_m                               (each output is a weighted average)

So a Multiplexer can copy a block (one-hot ``w_n``) or interpolate blocks, decided per input and for
all outputs at once, and it sees the order of the blocks.

Straight-through Gumbel-softmax variant (BLOCK 5.1 "Variant", citing Jang et al. 2017): forward pass
uses the one-hot argmax of ``(L_n + g) / tau`` with Gumbel noise ``g`` (no noise in eval mode), the
backward pass the gradient of the soft ``softmax((L_n + g) / tau)``. The paper's Gumbel models have
exactly one more parameter per Multiplexer than the softmax ones (BLOCK Tab. 6: 54,966 vs 54,964
with two Multiplexers); we read it as a learned temperature ``tau = exp(log_tau)``, initialised to 1.

External routing bias (SMFR_bias, BLOCK 5.4: "equipped with an artificial bias for the first 300 training
steps only"): :attr:`Multiplexer.logit_bias`, ``None`` by default, is a tensor broadcastable to
``[batch, N, M]`` that is added to ``L`` before the softmax / Gumbel step, in training mode only (never in
eval mode). It is not a parameter or buffer (not saved, never trained); a trainer sets it per batch with
:func:`multiplexer_logit_bias`, which clears it again on exit. ``logits`` in the output are then the biased
ones (what the softmax saw, and what the A.3 regulariser acts on).

Contained FNNs (BLOCK A.2): ``depth`` hidden layers of ``width`` units (100 by default) with
LeakyReLU(0.01). With these choices the parameter counts of BLOCK Tab. 6 are reproduced exactly
(tests/models/test_smfr.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from recombine.errors import UserError

RoutingKind = Literal["softmax", "gumbel"]
ROUTING_KINDS = ("softmax", "gumbel")

#: BLOCK A.2: "LeakyRelu with a negative slope of 0.01 as the activation function"
LEAKY_SLOPE = 0.01


def contained_fnn(n_in: int, n_out: int, width: int, depth: int) -> nn.Sequential:
    """The FNN inside a Multiplexer / FNNR: ``depth`` hidden LeakyReLU layers of ``width`` (BLOCK A.2)."""
    if depth < 1 or width < 1:
        raise UserError(f"a contained FNN needs depth >= 1 and width >= 1 (got depth={depth}, width={width})")
    layers: list[nn.Module] = []
    size = n_in
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.LeakyReLU(LEAKY_SLOPE)]
        size = width
    layers.append(nn.Linear(size, n_out))
    return nn.Sequential(*layers)


def straight_through_gumbel_softmax(
    logits: torch.Tensor, temperature: torch.Tensor, noise: bool
) -> torch.Tensor:
    """One-hot argmax forward, gradient of the (noisy, tempered) softmax backward, over the last dim.

    The forward value is exactly one-hot: ``hard + (soft - soft.detach())`` adds an exact zero.
    """
    if noise:
        uniform = torch.rand_like(logits).clamp_(min=torch.finfo(logits.dtype).tiny, max=1.0)
        logits = logits - torch.log(-torch.log(uniform))
    soft = torch.softmax(logits / temperature, dim=-1)
    hard = F.one_hot(soft.argmax(dim=-1), soft.shape[-1]).to(soft.dtype)
    return hard + (soft - soft.detach())


@dataclass
class MultiplexerOutput:
    """``blocks`` [batch, N, block_size]; ``weights`` (rows sum to 1) and ``logits`` [batch, N, M]."""

    blocks: torch.Tensor
    weights: torch.Tensor
    logits: torch.Tensor


class Multiplexer(nn.Module):
    """M input blocks -> N output blocks, each a routing-weighted average of the inputs (BLOCK sec. 4)."""

    def __init__(
        self,
        n_inputs: int,
        n_outputs: int,
        block_size: int,
        fnn_width: int = 100,
        fnn_depth: int = 1,
        routing: str = "softmax",
    ) -> None:
        super().__init__()
        if routing not in ROUTING_KINDS:
            raise UserError(
                f"unknown Multiplexer routing {routing!r}; valid choices: {', '.join(ROUTING_KINDS)}"
            )
        self.n_inputs, self.n_outputs, self.block_size, self.routing = (
            n_inputs,
            n_outputs,
            block_size,
            routing,
        )
        self.fnn = contained_fnn(n_inputs * block_size, n_outputs * n_inputs, fnn_width, fnn_depth)
        self.log_temperature = nn.Parameter(torch.zeros(())) if routing == "gumbel" else None
        #: added to the routing logits in training mode only (SMFR_bias, BLOCK 5.4); see the module doc
        self.logit_bias: torch.Tensor | None = None

    def forward(self, blocks: torch.Tensor) -> MultiplexerOutput:
        batch = blocks.shape[0]
        logits = self.fnn(blocks.reshape(batch, -1)).reshape(batch, self.n_outputs, self.n_inputs)
        if self.logit_bias is not None and self.training:
            logits = logits + self.logit_bias
        if self.log_temperature is None:
            weights = torch.softmax(logits, dim=-1)  # softmax over the M inputs, per output block
        else:
            weights = straight_through_gumbel_softmax(logits, self.log_temperature.exp(), noise=self.training)
        return MultiplexerOutput(torch.einsum("bnm,bmk->bnk", weights, blocks), weights, logits)


@contextmanager
def multiplexer_logit_bias(multiplexer: Multiplexer, bias: torch.Tensor | None) -> Iterator[Multiplexer]:
    """Set ``multiplexer.logit_bias`` to ``bias`` (``[batch, N, M]`` or broadcastable; ``None``: no bias)
    for the duration of the block, then clear it. The bias only acts in training mode."""
    if bias is not None and tuple(bias.shape[-2:]) != (multiplexer.n_outputs, multiplexer.n_inputs):
        expected = [multiplexer.n_outputs, multiplexer.n_inputs]
        raise ValueError(
            f"a Multiplexer logit bias must end in {expected} (outputs, inputs), got {list(bias.shape)}"
        )
    multiplexer.logit_bias = bias
    try:
        yield multiplexer
    finally:
        multiplexer.logit_bias = None
