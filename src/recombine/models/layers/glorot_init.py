"""The weight initialisation of the authors' released NDR layer (``model.weight_init=glorot``).

The thesis (ch. 5, App. D.3.3) does not state an initialisation; recombine's layers otherwise keep
PyTorch's defaults (``nn.Linear``: uniform in ``±1/sqrt(fan_in)``). The authors' released code
(RobertCsordas/ndr, ``layers/transformer/ndr_geometric.py`` and ``direction_sensitive_geometric.py``)
uses Glorot-uniform weights (1.7-3.3 times PyTorch's standard deviation with d_ff = 2 d_model and one head):

* data FFN (eq. 5.5): first matrix with the ReLU gain ``sqrt(2)``, second with the tanh gain ``5/3``;
* gate FFN (eq. 5.3): first matrix with the ReLU gain, second with gain 1 (its bias stays at -3);
* geometric attention: query, key, value and output projections uniform with standard deviation
  ``sqrt(2 / (d_model + d_head))`` (Glorot with fans ``d_model`` and ``d_head``, per head); the
  content-query bias (the released code's global content bias) and the value and output biases
  (absent there) start at zero.

Biases of the FFNs and the directional projection (eq. 5.9) keep PyTorch's defaults, as there. Only
the weights' scale at step 0 changes: the parameters, the state-dict keys and the forward are those
of the default model.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from recombine.models.layers.encoder_layer import EncoderLayer
from recombine.models.layers.geometric_attention import GeometricSelfAttention

WEIGHT_INITS = ("pytorch", "glorot")


def _uniform_with_std(weight: torch.Tensor, std: float) -> None:
    bound = math.sqrt(3.0) * std  # U(-a, a) has standard deviation a / sqrt(3)
    nn.init.uniform_(weight, -bound, bound)


@torch.no_grad()
def glorot_init_ndr_layer(layer: EncoderLayer) -> None:
    """Re-initialise a geometric-attention layer with a dense FFN (and optionally a copy gate) in place."""
    attention = layer.attention
    if not isinstance(attention, GeometricSelfAttention):
        raise ValueError("the released NDR initialisation is defined for geometric attention only")
    if not isinstance(layer.ffn, nn.Sequential):
        raise ValueError("the released NDR initialisation is defined for the dense feed-forward block only")
    relu_gain = nn.init.calculate_gain("relu")
    nn.init.xavier_uniform_(layer.ffn[0].weight, gain=relu_gain)
    nn.init.xavier_uniform_(layer.ffn[-1].weight, gain=nn.init.calculate_gain("tanh"))
    if layer.copy_gate is not None:
        gate_ffn = layer.copy_gate.ffn
        nn.init.xavier_uniform_(gate_ffn[0].weight, gain=relu_gain)
        nn.init.xavier_uniform_(gate_ffn[-1].weight, gain=nn.init.calculate_gain("sigmoid"))
    std = math.sqrt(2.0 / (attention.d_model + attention.d_head))
    for projection in (attention.query, attention.key, attention.value, attention.out):
        _uniform_with_std(projection.weight, std)
        if projection.bias is not None:
            projection.bias.zero_()
