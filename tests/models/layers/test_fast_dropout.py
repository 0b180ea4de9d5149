"""FastDropout (mask ``rand < 1 - p``) against the definition of dropout: every output is 0 or x / (1 - p),
the kept share is 1 - p (a binomial test), the mask is independent across elements and calls, the
gradient is the same mask, and evaluation mode or p = 0 is the identity."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from recombine.models.layers.fast_dropout import FastDropout, fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_outputs_are_dropped_or_scaled_with_the_right_keep_rate(p: float) -> None:
    torch.manual_seed(0)
    x = torch.rand(400, 500) + 0.5  # no zeros: a zero output means dropped
    y = FastDropout(p).train()(x)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    n = x.numel()
    # the kept count is Binomial(n, 1 - p): within 5 standard deviations (a false alarm ~ 1e-6)
    assert abs(int(kept.sum()) - n * (1 - p)) < 5 * math.sqrt(n * p * (1 - p))
    # the mean is preserved, E[y] = E[x]: within 5 standard errors
    assert abs(float(y.mean() - x.mean())) < 5 * float(y.std()) / math.sqrt(n)


def test_masks_are_independent_across_elements_and_calls() -> None:
    torch.manual_seed(1)
    p, n = 0.3, 200_000
    x = torch.ones(n)
    first, second = fast_dropout(x, p) != 0, fast_dropout(x, p) != 0
    # P(both kept) = (1 - p)^2 for independent draws, also for neighbouring elements
    for a, b in [(first, second), (first[:-1], first[1:])]:
        both = float((a & b).float().mean())
        assert both == pytest.approx((1 - p) ** 2, abs=5 * math.sqrt((1 - p) ** 2 / n))


def test_gradient_is_the_scaled_mask() -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 32, requires_grad=True)
    y = fast_dropout(x, 0.25)
    (grad,) = torch.autograd.grad(y.sum(), x)
    mask = (y != 0).to(x.dtype) / 0.75
    torch.testing.assert_close(grad, mask)


def test_eval_mode_and_zero_rate_are_the_identity_and_the_module_is_a_dropout() -> None:
    x = torch.randn(10, 7)
    layer = FastDropout(0.4)
    assert isinstance(layer, nn.Dropout) and layer.p == 0.4
    assert layer.eval()(x) is x
    assert FastDropout(0.0).train()(x) is x
    assert (fast_dropout(x, 1.0) == 0).all()


def test_seeded_draws_repeat() -> None:
    x = torch.randn(50, 50)
    torch.manual_seed(3)
    first = fast_dropout(x, 0.5)
    torch.manual_seed(3)
    torch.testing.assert_close(fast_dropout(x, 0.5), first)
