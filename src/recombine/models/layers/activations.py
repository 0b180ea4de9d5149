"""The hidden activation of the Transformer family's dense feed-forward blocks.

ReLU is eq. 5.5 of the thesis (the NDR paper's eq. 5); GELU is the modified NDR of thesis E.1.1
(eq. E.1: ``FFN(x) = W_2 GELU(W_1 x + b_1) + b_2``), which converged faster and more stably on CTL++.
"""

from __future__ import annotations

from torch import nn

ACTIVATIONS = ("relu", "gelu")


def build_activation(name: str) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU()
    raise ValueError(f"unknown activation {name!r}; valid choices: {', '.join(ACTIVATIONS)}")


def activation_with_dropout(name: str, hidden_dropout: float) -> nn.Module:
    """The activation, followed by dropout on the hidden units when ``hidden_dropout > 0``.

    Both are parameter-free, so a feed-forward block ``Sequential(Linear, this, Linear)`` keeps the
    same state-dict keys with and without hidden dropout (checkpoints and warm starts carry over).
    """
    activation = build_activation(name)
    if hidden_dropout <= 0.0:
        return activation
    return nn.Sequential(activation, nn.Dropout(hidden_dropout))
