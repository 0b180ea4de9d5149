"""The copy gate (thesis 5.1.1, eqs. 5.3-5.5): lets a column skip a whole layer.

``g = sigmoid(FFN_gate(a))`` (eq. 5.3) and ``h_next = g * u + (1 - g) * h`` (eq. 5.4). The final
gate bias starts at -3 so that, initially, layers barely update and gradients flow through the
copy path (thesis 5.1.1).

Gate dropout (thesis E.1, "NDR uses a gate dropout of 0.1"): during training each column's gate is
closed entirely with probability ``gate_dropout``, so the network learns to tolerate a column
waiting one more step.

``activation="gelu"`` is the modified NDR of thesis E.1.1, whose eq. E.1 replaces eq. 5.5 for every
feed-forward block, the gate's included.

``hidden_dropout`` drops the hidden activations of the gate's FFN (between its two linear maps), as the
authors' released NDR layer does with the layer's dropout rate; 0 (the default) drops nothing there.
"""

from __future__ import annotations

import torch
from torch import nn

from recombine.models.layers.activations import activation_with_dropout

GATE_BIAS_INIT = -3.0


class CopyGate(nn.Module):
    def __init__(
        self,
        d_model: int,
        bias_init: float = GATE_BIAS_INIT,
        gate_dropout: float = 0.0,
        activation: str = "relu",
        hidden_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.gate_dropout = gate_dropout
        # eq. 5.5 (eq. E.1 with GELU) with W_1^gate, W_2^gate in R^{d x d}
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_model),
            activation_with_dropout(activation, hidden_dropout),
            nn.Linear(d_model, d_model),
        )
        nn.init.constant_(self.ffn[-1].bias, bias_init)

    def gate(self, attended: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.ffn(attended))  # eq. 5.3

    def forward(
        self, attended: torch.Tensor, update: torch.Tensor, previous: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the gated state (eq. 5.4) and the gate values (for inspection)."""
        g = self.gate(attended)
        if self.training and self.gate_dropout > 0:
            closed = torch.rand(*g.shape[:-1], 1, device=g.device) < self.gate_dropout
            g = g.masked_fill(closed, 0.0)
        return g * update + (1 - g) * previous, g
