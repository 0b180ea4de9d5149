"""A concept classifier: generated images -> concept space (SIM seed, L86 of the reviews; CATALOG §1.14).

SIM seed: "The model output is then passed through a classifier which produces a vector indicating how
accurately the corresponding concepts are generated (e.g. a generated image of big blue triangle might be
classified as (0.8, 0.1, 0.9)). In this way, the process of generation becomes a vector mapping". Ours is a
small CNN with one sigmoid output per concept (``P(concept p = 1 | image)``), trained with binary
cross-entropy on the *full* concept grid, held-out combinations included: the image generator is known
(:mod:`recombine.tasks.concept_images`), so the classifier is an instrument, not part of the model under
study. Gaussian pixel noise is added in training so that imperfect samples are still read sensibly.

Our choice (not in the seeds): a fraction ``null_fraction`` of every batch is pure noise (uniform pixels)
with the target 1/2 on every concept, so an image without evidence for a concept (an untrained
generator's output) is read at the centre of concept space instead of at an arbitrary corner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from recombine.errors import UserError
from recombine.tasks.concept_images import ConceptImageData


@dataclass
class ConceptClassifierConfig:
    steps: int = 300
    batch_size: int = 128
    lr: float = 3e-3
    channels: int = 16
    pixel_noise: float = 0.1  # std of the Gaussian noise added to training images
    null_fraction: float = 0.25  # share of each batch that is pure noise with target 1/2 on every concept

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0 or self.channels < 1 or self.pixel_noise < 0:
            raise UserError("classifier steps, batch_size, channels must be >= 1, lr > 0, pixel_noise >= 0")
        if not 0.0 <= self.null_fraction < 1.0:
            raise UserError(f"classifier.null_fraction must be in [0, 1), got {self.null_fraction}")


class ConceptClassifier(nn.Module):
    """Two conv layers, global average pooling, one logit per concept."""

    def __init__(self, n_concepts: int, channels: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
        )
        # mean and max pooling: colour reads off the mean, size off the covered area, shape off the corners
        self.head = nn.Linear(4 * channels, n_concepts)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.features(images)
        return self.head(torch.cat([h.mean((2, 3)), h.amax((2, 3))], dim=1))


def train_concept_classifier(
    data: ConceptImageData, config: ConceptClassifierConfig, seed: int
) -> ConceptClassifier:
    """Adam on binary cross-entropy over mini-batches of ``data`` (which should hold every combination)."""
    if len(np.unique(data.combination)) < len(data.probe_names):
        raise UserError(
            "the concept classifier needs every combination; build the set with include_held_out=True"
        )
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = ConceptClassifier(data.probe_masks.shape[1], config.channels)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    images = torch.as_tensor(data.images)
    labels = torch.as_tensor(data.concepts, dtype=torch.float32)
    for _ in range(config.steps):
        batch = torch.randint(0, len(images), (config.batch_size,), generator=generator)
        noisy = images[batch] + config.pixel_noise * torch.randn(images[batch].shape, generator=generator)
        targets = labels[batch]
        n_null = int(round(config.null_fraction * config.batch_size))
        if n_null:
            noisy[:n_null] = torch.rand(noisy[:n_null].shape, generator=generator)
            targets = targets.clone()
            targets[:n_null] = 0.5
        loss = nn.functional.binary_cross_entropy_with_logits(model(noisy), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model


@torch.no_grad()
def concept_probabilities(classifier: ConceptClassifier, images: np.ndarray | torch.Tensor) -> np.ndarray:
    """``[n, s]``: ``P(concept p = 1 | image)`` for images ``[n, 3, H, W]`` in [0, 1]."""
    return torch.sigmoid(classifier(torch.as_tensor(images, dtype=torch.float32))).numpy()


def concept_accuracy(probabilities: np.ndarray, concepts: np.ndarray) -> float:
    """Fraction of images whose every concept is read correctly (probability on the right side of 1/2)."""
    return float(((probabilities > 0.5) == (np.asarray(concepts) == 1)).all(axis=1).mean())
