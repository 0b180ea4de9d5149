"""A small concept-conditioned DDPM on pixels, CPU-sized (SIM seed §5 / Fig. 6; CATALOG §1.14).

The SIM seed trains a text-conditioned diffusion model on synthetic concept images and follows its samples
in concept space. Its architecture is not in the seeds (App. G is not included); ours is the standard DDPM
of Ho et al. (2020) with a small denoiser, trainable in minutes on a CPU: ``architecture="conv"`` (default),
residual 3x3 convolutions with dilations 1, 2, 4, 2, 1 and FiLM conditioning (the embedding of ``t`` and the
concepts sets a per-channel scale and shift, as in the UNets of Dhariwal & Nichol, 2021), or
``architecture="mlp"``, a residual MLP on flattened pixels with a linear pixel-to-pixel skip.

Forward process (Ho et al. eqs. 2 and 4), linear ``beta_t`` for ``t = 1..T``::

    q(x_t | x_{t-1}) = N(sqrt(1 - beta_t) x_{t-1}, beta_t I)
    q(x_t | x_0)     = N(sqrt(abar_t) x_0, (1 - abar_t) I),      abar_t = prod_{s<=t} (1 - beta_s)

Training (Ho et al. eq. 14, "L_simple"): ``E_{t, x_0, eps} ||eps - eps_theta(x_t, t, c)||^2`` with ``t``
uniform on ``1..T`` (we average over pixels). Sampling (Ho et al. Alg. 2)::

    x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps_theta(x_t, t, c)) / sqrt(1 - beta_t) + sqrt(beta_t) z

The condition ``c`` is the concept vector (one 0/1 entry per concept), embedded linearly, the analogue of
a prompt built from concept words: the held-out combination is a new *combination* of inputs the model has
seen, so compositional generalization is possible. Optional classifier-free guidance (Ho & Salimans,
2022): with probability ``condition_dropout`` the condition is replaced by a learnt null embedding during
training, and sampling uses ``(1 + w) eps(x, c) - w eps(x, null)`` with ``w = guidance``.

Samples are drawn from a ``torch.Generator`` the caller seeds, so the same seed gives the same initial
noise and the same per-step noise at every checkpoint (the trajectories then differ only by the weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from recombine.errors import UserError

ARCHITECTURES = ("conv", "mlp")


@dataclass
class ConceptDiffusionConfig:
    timesteps: int = 100  # T
    beta_start: float = 1e-3
    beta_end: float = 0.2  # linear schedule; Ho et al.'s (1e-4, 0.02) at T=1000, rescaled to T=100
    architecture: str = "conv"  # "conv": dilated residual convolutions with FiLM; "mlp": MLP on pixels
    hidden: int = 256  # width of the MLP and of the time / concept embedding
    channels: int = 16  # conv only
    blocks: int = 4  # residual blocks (conv dilations 1, 2, 2, 1 for 4; 1, 2, 4, 2, 1 for 5)
    time_embedding: int = 64  # sinusoidal features of t
    condition_dropout: float = 0.0  # > 0 trains a null condition for classifier-free guidance

    def __post_init__(self) -> None:
        if self.timesteps < 1:
            raise UserError(f"model.timesteps must be >= 1, got {self.timesteps}")
        if not 0.0 < self.beta_start <= self.beta_end < 1.0:
            raise UserError(
                f"model.beta_start and model.beta_end need 0 < start <= end < 1, got "
                f"{self.beta_start} and {self.beta_end}"
            )
        if self.architecture not in ARCHITECTURES:
            raise UserError(
                f"unknown model.architecture {self.architecture!r}; valid choices: {', '.join(ARCHITECTURES)}"
            )
        if self.channels < 1:
            raise UserError(f"model.channels must be >= 1, got {self.channels}")
        if self.hidden < 1 or self.blocks < 0 or self.time_embedding < 2 or self.time_embedding % 2:
            raise UserError(
                "model.hidden must be >= 1, model.blocks >= 0, model.time_embedding even and >= 2"
            )
        if not 0.0 <= self.condition_dropout < 1.0:
            raise UserError(f"model.condition_dropout must be in [0, 1), got {self.condition_dropout}")


def linear_betas(config: ConceptDiffusionConfig) -> torch.Tensor:
    """``[T]`` float64: ``beta_1..beta_T``, linear from ``beta_start`` to ``beta_end``."""
    return torch.linspace(config.beta_start, config.beta_end, config.timesteps, dtype=torch.float64)


def noise_level(betas: torch.Tensor) -> torch.Tensor:
    """``[T]``: ``abar_t = prod_{s<=t} (1 - beta_s)``."""
    return torch.cumprod(1.0 - betas, dim=0)


def q_sample(x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor, abar: torch.Tensor) -> torch.Tensor:
    """A draw of ``q(x_t | x_0)``: ``sqrt(abar_t) x_0 + sqrt(1 - abar_t) noise``; ``t`` in ``1..T``."""
    level = abar.to(x0.dtype)[t - 1].view(-1, *([1] * (x0.dim() - 1)))
    return level.sqrt() * x0 + (1.0 - level).sqrt() * noise


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``[n, dim]``: ``sin`` and ``cos`` of ``t`` at ``dim / 2`` geometric frequencies (Vaswani et al.)."""
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))
    angles = t.float()[:, None] * frequencies[None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class ResidualBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.inner = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.condition = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        return h + self.inner(self.norm(h) + self.condition(embedding))


class MLPBody(nn.Module):
    """Residual MLP on flattened pixels, plus a linear skip from ``x_t`` to the output."""

    def __init__(self, config: ConceptDiffusionConfig, image_shape: tuple[int, ...]) -> None:
        super().__init__()
        pixels, hidden = math.prod(image_shape), config.hidden
        self.input = nn.Linear(pixels, hidden)
        self.blocks = nn.ModuleList(ResidualBlock(hidden) for _ in range(config.blocks))
        self.output = nn.Sequential(nn.LayerNorm(hidden), nn.SiLU(), nn.Linear(hidden, pixels))
        # a linear pixel-to-pixel path: at large t the answer is close to x_t itself, a full-rank map that a
        # hidden layer narrower than the image could not carry
        self.skip = nn.Linear(pixels, pixels)

    def forward(self, x_t: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        h = self.input(x_t.flatten(1)) + embedding
        for block in self.blocks:
            h = block(h, embedding)
        return (self.output(h) + self.skip(x_t.flatten(1))).view_as(x_t)


class ConvBlock(nn.Module):
    """``h + conv(SiLU(GroupNorm(h) (1 + scale) + shift))``, scale and shift from the embedding (FiLM)."""

    def __init__(self, channels: int, hidden: int, dilation: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(min(8, channels), channels)
        self.film = nn.Linear(hidden, 2 * channels)
        self.conv = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation)

    def forward(self, h: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(embedding)[:, :, None, None].chunk(2, dim=1)
        return h + self.conv(nn.functional.silu(self.norm(h) * (1 + scale) + shift))


class ConvBody(nn.Module):
    """Residual 3x3 convolutions with dilations 1, 2, 4, ... (a receptive field over the whole image)."""

    def __init__(self, config: ConceptDiffusionConfig, image_shape: tuple[int, ...]) -> None:
        super().__init__()
        channels = config.channels
        self.input = nn.Conv2d(image_shape[0], channels, 3, padding=1)
        dilations = [2 ** min(i, config.blocks - 1 - i) for i in range(config.blocks)]  # 1, 2, 4, 2, 1
        self.blocks = nn.ModuleList(ConvBlock(channels, config.hidden, d) for d in dilations)
        self.output = nn.Sequential(
            nn.GroupNorm(min(8, channels), channels),
            nn.SiLU(),
            nn.Conv2d(channels, image_shape[0], 3, padding=1),
        )

    def forward(self, x_t: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        h = self.input(x_t)
        for block in self.blocks:
            h = block(h, embedding)
        return self.output(h)


class ConceptDenoiser(nn.Module):
    """``eps_theta(x_t, t, c)``: an MLP or convolutional body conditioned on ``t`` and the concepts."""

    def __init__(self, config: ConceptDiffusionConfig, image_shape: tuple[int, ...], n_concepts: int) -> None:
        super().__init__()
        self.config = config
        self.image_shape = tuple(image_shape)
        self.n_concepts = n_concepts
        hidden = config.hidden
        self.time = nn.Sequential(
            nn.Linear(config.time_embedding, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )
        self.concepts = nn.Linear(n_concepts, hidden)
        self.null_condition = nn.Parameter(torch.zeros(hidden))
        body = MLPBody if config.architecture == "mlp" else ConvBody
        self.body = body(config, self.image_shape)
        self.register_buffer("betas", linear_betas(config), persistent=False)
        self.register_buffer("abar", noise_level(linear_betas(config)), persistent=False)

    def forward(
        self, x_t: torch.Tensor, t: torch.Tensor, concepts: torch.Tensor, drop: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``eps`` of the shape of ``x_t``; ``drop`` (``[n]`` bool) replaces the condition by the null one."""
        condition = self.concepts(concepts.to(x_t.dtype))
        if drop is not None:
            condition = torch.where(drop[:, None], self.null_condition.expand_as(condition), condition)
        embedding = self.time(sinusoidal_embedding(t, self.config.time_embedding).to(x_t.dtype)) + condition
        return self.body(x_t, embedding)


def denoising_loss(
    model: ConceptDenoiser, x0: torch.Tensor, concepts: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Ho et al. eq. 14: the mean over pixels and samples of ``(eps - eps_theta(x_t, t, c))^2``.

    ``t`` is uniform on ``1..T``."""
    n = len(x0)
    t = torch.randint(1, model.config.timesteps + 1, (n,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype)
    drop = None
    if model.config.condition_dropout > 0:
        drop = torch.rand(n, generator=generator) < model.config.condition_dropout
    return (model(q_sample(x0, t, noise, model.abar), t, concepts, drop) - noise).pow(2).mean()


@torch.no_grad()
def sample(
    model: ConceptDenoiser, concepts: torch.Tensor, generator: torch.Generator, guidance: float = 0.0
) -> torch.Tensor:
    """Ho et al. Alg. 2 for every row of ``concepts`` (``[n, s]``).

    ``guidance`` > 0 needs a model trained with a null condition."""
    if guidance > 0 and model.config.condition_dropout == 0:
        raise UserError("guidance > 0 needs a model trained with model.condition_dropout > 0")
    n = len(concepts)
    x = torch.randn((n, *model.image_shape), generator=generator)
    betas, abar = model.betas.float(), model.abar.float()
    for t in range(model.config.timesteps, 0, -1):
        steps = torch.full((n,), t, dtype=torch.long)
        eps = model(x, steps, concepts)
        if guidance > 0:
            unconditional = model(x, steps, concepts, torch.ones(n, dtype=torch.bool))
            eps = (1 + guidance) * eps - guidance * unconditional
        beta = betas[t - 1]
        x = (x - beta / (1 - abar[t - 1]).sqrt() * eps) / (1 - beta).sqrt()
        if t > 1:
            x = x + beta.sqrt() * torch.randn(x.shape, generator=generator)
    return x
