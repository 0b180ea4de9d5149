"""``log_softmax_last`` equals ``F.log_softmax(x, -1)`` in value and gradient, on both of its paths."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from recombine.models.layers.narrow_log_softmax import MIN_ROWS, NARROW_WIDTH, log_softmax_last


@pytest.mark.parametrize(
    "shape",
    [
        (2048, 8),  # narrow, many rows: the transposed path
        (4, 300, 5),  # leading dimensions are kept
        (MIN_ROWS, NARROW_WIDTH),  # the boundary, still transposed
        (100, 8),  # too few rows: the plain call
        (512, 40),  # wide: the plain call
    ],
)
def test_values_and_gradients_equal_log_softmax(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = (3 * torch.randn(shape, dtype=torch.float64)).requires_grad_(True)
    weights = torch.randn(shape, dtype=torch.float64)
    ours = log_softmax_last(x)
    reference = F.log_softmax(x, dim=-1)
    assert ours.shape == x.shape
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-13)
    (g_ours,) = torch.autograd.grad((ours * weights).sum(), x)
    (g_reference,) = torch.autograd.grad((reference * weights).sum(), x)
    torch.testing.assert_close(g_ours, g_reference, rtol=0, atol=1e-12)


def test_rows_are_normalised_probabilities_under_vmap_and_grad() -> None:
    torch.manual_seed(1)
    x = torch.randn(6, 400, 8, dtype=torch.float64)
    torch.testing.assert_close(
        vmap(log_softmax_last)(x).exp().sum(-1), torch.ones(6, 400, dtype=torch.float64)
    )
    target = torch.randn(400, 8, dtype=torch.float64)

    def loss(logits: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return (fn(target).exp() * fn(logits)).sum()

    ours = vmap(grad(lambda z: loss(z, log_softmax_last)))(x)
    reference = vmap(grad(lambda z: loss(z, lambda t: F.log_softmax(t, dim=-1))))(x)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("shape", "transposed"),
    [
        ((2048, 8), True),
        ((MIN_ROWS, NARROW_WIDTH), True),
        ((2048, NARROW_WIDTH + 1), False),  # 16 wide: the plain kernel is faster (one AVX-512 register)
        ((MIN_ROWS - 1, 8), False),
    ],
)
def test_the_path_switches_at_the_documented_thresholds(
    shape: tuple[int, ...], transposed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    dims: list[int] = []
    original = F.log_softmax

    def recording(x: torch.Tensor, dim: int) -> torch.Tensor:
        dims.append(dim)
        return original(x, dim=dim)

    monkeypatch.setattr(F, "log_softmax", recording)
    log_softmax_last(torch.randn(shape))
    assert dims == [0 if transposed else -1]
