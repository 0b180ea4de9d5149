"""The concept DDPM (Ho et al. 2020, as used for SIM seed §5): forward process against its closed form.

References: ``abar_t`` by a naive product loop; ``q(x_t | x_0)`` by iterating the one-step kernel
``q(x_t | x_{t-1})`` from ``x_0`` (Monte Carlo, float64) and comparing mean and variance with
``sqrt(abar_t) x_0`` and ``1 - abar_t``; the sampler's update on a hand-computed one-step case.
"""

from __future__ import annotations

import math

import pytest
import torch

from recombine.errors import UserError
from recombine.models.concept_diffusion import (
    ConceptDenoiser,
    ConceptDiffusionConfig,
    denoising_loss,
    linear_betas,
    noise_level,
    q_sample,
    sample,
)


def test_noise_level_is_the_running_product_of_one_minus_beta() -> None:
    config = ConceptDiffusionConfig(timesteps=7, beta_start=0.01, beta_end=0.3)
    betas = linear_betas(config)
    assert betas[0].item() == pytest.approx(0.01) and betas[-1].item() == pytest.approx(0.3)
    product = 1.0
    for t in range(7):
        product *= 1.0 - (0.01 + (0.3 - 0.01) * t / 6)
        assert noise_level(betas)[t].item() == pytest.approx(product, rel=1e-12)


def test_closed_form_q_matches_iterating_the_one_step_kernel() -> None:
    config = ConceptDiffusionConfig(timesteps=12, beta_start=0.02, beta_end=0.3)
    betas, abar = linear_betas(config), noise_level(linear_betas(config))
    generator = torch.Generator().manual_seed(0)
    x0 = torch.tensor([1.5, -0.5, 0.0], dtype=torch.float64)
    n = 200_000
    x = x0.expand(n, 3).clone()
    for t in range(1, 13):  # x_t = sqrt(1 - beta_t) x_{t-1} + sqrt(beta_t) z
        x = (1 - betas[t - 1]).sqrt() * x + betas[t - 1].sqrt() * torch.randn(
            x.shape, generator=generator, dtype=torch.float64
        )
        if t in (1, 5, 12):
            closed = q_sample(
                x0.expand(n, 3),
                torch.full((n,), t),
                torch.randn((n, 3), generator=generator, dtype=torch.float64),
                abar,
            )
            for draws in (x, closed):
                torch.testing.assert_close(
                    draws.mean(0), math.sqrt(abar[t - 1]) * x0, atol=1e-2, rtol=0
                )  # ~5 standard errors
                torch.testing.assert_close(
                    draws.var(0),
                    torch.full((3,), 1 - abar[t - 1].item(), dtype=torch.float64),
                    atol=1.6e-2,  # ~5 standard errors of a variance estimate from n draws
                    rtol=0,
                )


def test_q_sample_uses_each_rows_own_time() -> None:
    abar = torch.tensor([0.9, 0.5, 0.1], dtype=torch.float64)
    x0 = torch.ones(2, 1, 2, 2)
    noise = torch.full((2, 1, 2, 2), 2.0)
    out = q_sample(x0, torch.tensor([1, 3]), noise, abar)
    torch.testing.assert_close(out[0], torch.full((1, 2, 2), math.sqrt(0.9) + 2 * math.sqrt(0.1)))
    torch.testing.assert_close(out[1], torch.full((1, 2, 2), math.sqrt(0.1) + 2 * math.sqrt(0.9)))


class ConstantNoise(ConceptDenoiser):
    """A denoiser that always predicts eps = 1 (for a hand-computed sampler step)."""

    def forward(self, x_t, t, concepts, drop=None):  # type: ignore[no-untyped-def]
        return torch.ones_like(x_t)


def test_one_sampler_step_is_ho_algorithm_2() -> None:
    config = ConceptDiffusionConfig(timesteps=1, beta_start=0.19, beta_end=0.19)
    model = ConstantNoise(config, (1, 1, 1), 2)
    x_T = torch.randn((3, 1, 1, 1), generator=torch.Generator().manual_seed(5))
    out = sample(model, torch.zeros(3, 2), torch.Generator().manual_seed(5))  # t = 1: no noise added
    expected = (x_T - 0.19 / math.sqrt(0.19) * 1.0) / math.sqrt(0.81)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("architecture", ["conv", "mlp"])
def test_sampler_runs_is_reproducible_and_training_lowers_the_loss(architecture: str) -> None:
    torch.manual_seed(0)
    config = ConceptDiffusionConfig(
        architecture=architecture, timesteps=10, hidden=32, channels=8, blocks=2, condition_dropout=0.2
    )
    model = ConceptDenoiser(config, (3, 4, 4), 2)
    concepts = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    a = sample(model, concepts, torch.Generator().manual_seed(1), guidance=1.0)
    b = sample(model, concepts, torch.Generator().manual_seed(1), guidance=1.0)
    assert a.shape == (2, 3, 4, 4) and torch.isfinite(a).all()
    torch.testing.assert_close(a, b)
    x0 = torch.rand((8, 3, 4, 4)) * 2 - 1
    labels = torch.randint(0, 2, (8, 2)).float()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def fixed_loss() -> float:  # 32 fixed (t, noise) draws per image
        repeated = denoising_loss(
            model, x0.repeat(32, 1, 1, 1), labels.repeat(32, 1), torch.Generator().manual_seed(9)
        )
        return repeated.item()

    before = fixed_loss()
    generator = torch.Generator().manual_seed(1)
    for _ in range(100):
        loss = denoising_loss(model, x0, labels, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert fixed_loss() < before


def test_conv_dilations_widen_then_narrow() -> None:
    model = ConceptDenoiser(ConceptDiffusionConfig(blocks=5, hidden=8, channels=8), (3, 12, 12), 2)
    assert [block.conv.dilation[0] for block in model.body.blocks] == [1, 2, 4, 2, 1]


def test_bad_architecture_names_the_valid_choices() -> None:
    with pytest.raises(UserError, match="valid choices: conv, mlp"):
        ConceptDiffusionConfig(architecture="unet")


def test_guidance_without_a_null_condition_is_a_user_error() -> None:
    model = ConceptDenoiser(ConceptDiffusionConfig(timesteps=2, hidden=8, blocks=0), (1, 2, 2), 1)
    with pytest.raises(UserError, match="condition_dropout"):
        sample(model, torch.zeros(1, 1), torch.Generator(), guidance=1.0)
