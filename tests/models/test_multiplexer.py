"""Multiplexer (BLOCK sec. 4), straight-through Gumbel routing (BLOCK 5.1) and the saturation
regulariser (BLOCK A.3), checked against hand computations and naive loops."""

from __future__ import annotations

import math

import pytest
import torch

from recombine.errors import UserError
from recombine.models.layers.multiplexer import (
    Multiplexer,
    multiplexer_logit_bias,
    straight_through_gumbel_softmax,
)
from recombine.models.layers.saturation_regularizer import saturation_loss


def _force_routing(mux: Multiplexer, choice: list[int], strength: float = 1e4) -> None:
    """Make the routing input-independent: output n takes input ``choice[n]``."""
    last = mux.fnn[-1]
    with torch.no_grad():
        last.weight.zero_()
        bias = torch.zeros(mux.n_outputs, mux.n_inputs, dtype=last.bias.dtype)
        bias[torch.arange(mux.n_outputs), torch.tensor(choice)] = strength
        last.bias.copy_(bias.reshape(-1))


@pytest.mark.parametrize("routing", ["softmax", "gumbel"])
def test_one_hot_routing_copies_blocks_exactly(routing: str) -> None:
    torch.manual_seed(0)
    mux = Multiplexer(n_inputs=4, n_outputs=3, block_size=5, fnn_width=16, routing=routing)
    choice = [2, 0, 2]
    _force_routing(mux, choice)
    x = torch.randn(7, 4, 5)
    for mode in (mux.train, mux.eval):
        mode()
        out = mux(x)
        assert torch.equal(out.blocks, x[:, choice])
        expected = torch.zeros(7, 3, 4)
        expected[:, torch.arange(3), torch.tensor(choice)] = 1.0
        assert torch.equal(out.weights, expected)


def test_softmax_routing_is_a_convex_combination_over_inputs() -> None:
    torch.manual_seed(1)
    mux = Multiplexer(n_inputs=3, n_outputs=2, block_size=4, fnn_width=8, fnn_depth=2).double()
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    out = mux(x)
    # naive reference: logits from the FNN on the flat input, reshaped [N, M], softmax over M
    with torch.no_grad():
        flat_logits = mux.fnn(x.reshape(5, -1))
    for b in range(5):
        for n in range(2):
            logits = [float(flat_logits[b, n * 3 + m]) for m in range(3)]
            exps = [math.exp(v) for v in logits]
            weights = [e / sum(exps) for e in exps]
            expected = sum(w * x[b, m] for m, w in enumerate(weights))
            torch.testing.assert_close(out.blocks[b, n], expected)
            torch.testing.assert_close(out.weights[b, n].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_gumbel_routing_is_one_hot_forward_with_soft_gradients_backward() -> None:
    torch.manual_seed(2)
    mux = Multiplexer(n_inputs=4, n_outputs=3, block_size=6, fnn_width=16, routing="gumbel").train()
    x = torch.randn(32, 4, 6, requires_grad=True)
    out = mux(x)
    w = out.weights
    assert torch.all((w == 0) | (w == 1)) and torch.all(w.sum(-1) == 1)
    # forward output is exactly the selected input block
    picked = w.argmax(-1)
    assert torch.equal(out.blocks, torch.gather(x, 1, picked[..., None].expand(-1, -1, 6)))
    out.blocks.square().sum().backward()
    routing_grads = [p.grad for p in mux.fnn.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in routing_grads)
    assert mux.log_temperature.grad is not None and mux.log_temperature.grad != 0


def test_gumbel_eval_mode_is_deterministic_argmax_of_the_logits() -> None:
    torch.manual_seed(3)
    mux = Multiplexer(n_inputs=5, n_outputs=2, block_size=3, fnn_width=8, routing="gumbel").eval()
    x = torch.randn(50, 5, 3)
    out = mux(x)
    assert torch.equal(out.weights.argmax(-1), out.logits.argmax(-1))
    assert torch.equal(mux(x).blocks, out.blocks)


def test_straight_through_gradient_equals_the_softmax_gradient() -> None:
    logits = torch.tensor([[0.3, -1.2, 2.0, 0.5]], dtype=torch.float64, requires_grad=True)
    upstream = torch.tensor([[1.0, -2.0, 0.5, 3.0]], dtype=torch.float64)
    tau = torch.tensor(0.7, dtype=torch.float64)
    (straight_through_gumbel_softmax(logits, tau, noise=False) * upstream).sum().backward()
    # closed form: d softmax(l/tau)_i / d l_j = s_i (delta_ij - s_j) / tau
    s = torch.softmax(logits.detach() / tau, -1)[0]
    expected = torch.tensor(
        [sum(upstream[0, i] * s[i] * (float(i == j) - s[j]) / tau for i in range(4)) for j in range(4)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(logits.grad[0], expected)


def test_logit_bias_is_added_in_training_mode_only_and_cleared_on_exit() -> None:
    """The external routing bias of SMFR_bias (BLOCK 5.4): logits + bias while training, untouched in eval."""
    torch.manual_seed(0)
    mux = Multiplexer(n_inputs=4, n_outputs=3, block_size=5, fnn_width=16)
    x = torch.randn(6, 4, 5)
    plain = mux(x).logits
    bias = torch.zeros(6, 3, 4)
    bias[:, 0, 2] = 5.0
    with multiplexer_logit_bias(mux, bias):
        biased = mux(x)
        assert torch.equal(biased.logits, plain + bias)
        assert torch.equal(biased.weights, torch.softmax(plain + bias, dim=-1))
        mux.eval()
        assert torch.equal(mux(x).logits, plain)
        mux.train()
    assert mux.logit_bias is None
    assert torch.equal(mux(x).logits, plain)
    assert "logit_bias" not in mux.state_dict()
    with pytest.raises(ValueError, match=r"must end in \[3, 4\]"), multiplexer_logit_bias(mux, bias[..., :3]):
        pass


def test_unknown_routing_is_a_user_error() -> None:
    with pytest.raises(UserError, match="softmax, gumbel"):
        Multiplexer(2, 2, 3, routing="hard")


def test_saturation_loss_is_zero_inside_the_threshold() -> None:
    z = torch.tensor([-20.0, -3.0, 0.0, 19.9, 20.0], requires_grad=True)
    loss = saturation_loss([z])
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(z.grad, torch.zeros(5))


def test_saturation_loss_value_and_gradient_outside_the_threshold() -> None:
    z = torch.tensor([[25.0, 1.0], [-23.0, -20.0]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([30.0], dtype=torch.float64, requires_grad=True)
    loss = saturation_loss([z, g], threshold=20.0)
    # by hand: z: mean(5^2, 0, (-3)^2, 0) = 34 / 4 = 8.5; g: (30 - 20)^2 = 100
    assert loss.item() == pytest.approx(8.5 + 100.0)
    loss.backward()
    # d/dz mean((z - clamp(z))^2) = 2 (z - clamp(z)) / numel: positive above +20, negative below -20
    torch.testing.assert_close(
        z.grad, torch.tensor([[2 * 5 / 4, 0.0], [2 * -3 / 4, 0.0]], dtype=torch.float64)
    )
    torch.testing.assert_close(g.grad, torch.tensor([20.0], dtype=torch.float64))
    # a gradient step moves every saturated logit back towards the threshold
    with torch.no_grad():
        stepped = z - 0.1 * z.grad
    assert stepped[0, 0] < 25.0 and stepped[1, 0] > -23.0
