"""Synthetic concept images (colour x size x shape) for the SIM diffusion experiment (CATALOG §1.14).

SIM seed, second part (reviews and author answers; the paper body and its App. G are not in the seeds):
a text-conditioned diffusion model is trained on synthetic images whose concepts are binary (the
reviews name "a big blue triangle"), some combinations are held out, and the concept *signal* of each
concept is "the difference of class mean pixel values". This module draws such a set in numpy.

Each image is ``[3, H, W]`` in ``[0, 1]``: one object on a black background. Concept values, concept 0 first:

- ``colour`` (0: red, 1: blue). The object's RGB is ``(0.5 + k c, 0.3, 0.5 - k c)`` with
  ``c = colour_contrast / 2`` and ``k = +1`` for value 0, ``-1`` for value 1: the red/blue contrast sets
  the colour signal.
- ``size`` (0: small, 1: large). The object's radius is ``radius + size_delta * value`` pixels.
- ``shape`` (0: disk, 1: square of the same area); only with ``n_concepts = 3``.

Diversity (the ``sigma_p`` of SIM): per image, Gaussian jitter of the RGB colour (``colour_jitter``) and of
the radius (``size_jitter``, pixels), and a uniform integer shift of the centre by up to
``position_jitter`` pixels. Edges are anti-aliased (pixel coverage ``clip(r - dist + 1/2, 0, 1)``), so the
size is continuous.

A combination is a bit string, concept 0 first (``"10"``: blue and small), as for the SIM probes
(:mod:`recombine.tasks.sim`). ``held_out`` combinations (default the all-ones one, the SIM test point) never
appear in the training set; the probes are all ``2^s`` combinations. :func:`concept_signals` measures
``mu_p = ||mean(images with concept p = 1) - mean(images with concept p = 0)||_2`` over the noise-free
full grid.

Deterministic per seed: all draws come from one ``numpy.random.Generator(seed)``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from recombine.errors import UserError

#: Bump whenever generation changes.
VERSION = 1

CONCEPT_NAMES = ("colour", "size", "shape")
VALUE_NAMES = {"colour": ("red", "blue"), "size": ("small", "large"), "shape": ("disk", "square")}


@dataclass
class ConceptImageConfig:
    """Concept images; the defaults give colour a stronger signal than size (see ``concept_signals``)."""

    image_size: int = 12
    n_concepts: int = 2  # colour, size (and shape with 3)
    colour_contrast: float = 0.8  # red/blue difference, in [0, 1]
    radius: float = 2.0  # radius of a small object, pixels
    size_delta: float = 1.5  # large radius = radius + size_delta
    colour_jitter: float = 0.05  # std of the RGB jitter
    size_jitter: float = 0.15  # std of the radius jitter, pixels
    position_jitter: int = 1  # uniform integer shift of the centre in [-j, j] pixels
    n_per_combination: int = 64
    held_out: list[str] = field(default_factory=lambda: ["11"])

    def __post_init__(self) -> None:
        if self.n_concepts not in (2, 3):
            raise UserError(f"task.n_concepts must be 2 or 3 (colour, size, shape), got {self.n_concepts}")
        if not 0.0 <= self.colour_contrast <= 1.0:
            raise UserError(f"task.colour_contrast must be in [0, 1], got {self.colour_contrast}")
        if self.radius <= 0 or self.size_delta < 0:
            raise UserError("task.radius must be > 0 and task.size_delta >= 0")
        if self.colour_jitter < 0 or self.size_jitter < 0 or self.position_jitter < 0:
            raise UserError("task.colour_jitter, task.size_jitter and task.position_jitter must be >= 0")
        largest = self.radius + self.size_delta + 3 * self.size_jitter + self.position_jitter
        if self.image_size < 4 or 2 * largest > self.image_size + 1:
            raise UserError(
                f"task.image_size={self.image_size} is too small for objects of radius up to {largest:.1f}"
            )
        if self.n_per_combination < 1:
            raise UserError(f"task.n_per_combination must be >= 1, got {self.n_per_combination}")
        valid = combination_names(self.n_concepts)
        for name in self.held_out:
            if name not in valid:
                raise UserError(
                    f"task.held_out: unknown combination {name!r}; valid choices: {', '.join(valid)}"
                )
        if len(set(self.held_out)) >= len(valid):
            raise UserError("task.held_out holds out every combination; leave at least one for training")

    @property
    def concept_names(self) -> tuple[str, ...]:
        return CONCEPT_NAMES[: self.n_concepts]


def combination_names(n_concepts: int) -> list[str]:
    """Every combination as a bit string, concept 0 first, in ``itertools.product`` order."""
    return ["".join(bits) for bits in itertools.product("01", repeat=n_concepts)]


def combination_masks(n_concepts: int) -> np.ndarray:
    """``[2^s, s]`` int: the concept values of every combination, in :func:`combination_names` order."""
    return np.array(list(itertools.product([0, 1], repeat=n_concepts)), dtype=np.int64)


@dataclass
class ConceptImageData:
    """A drawn set: ``images`` ``[n, 3, H, W]`` float32 in [0, 1], ``concepts`` ``[n, s]`` int (0/1).

    ``combination[i]`` indexes ``probe_names`` (all ``2^s`` combinations); ``probe_is_held_out`` marks the
    combinations left out of training."""

    config: ConceptImageConfig
    images: np.ndarray
    concepts: np.ndarray
    combination: np.ndarray
    probe_names: list[str]
    probe_masks: np.ndarray  # [2^s, s] int
    probe_is_held_out: np.ndarray  # [2^s] bool

    kind: str = "dynamics"

    @property
    def test_probe(self) -> int:
        """Index of the all-ones combination (the SIM test point)."""
        return len(self.probe_names) - 1

    def probe(self, name: str) -> int:
        if name not in self.probe_names:
            raise UserError(f"unknown combination {name!r}; valid choices: {', '.join(self.probe_names)}")
        return self.probe_names.index(name)

    @property
    def training_combinations(self) -> list[int]:
        return [j for j in range(len(self.probe_names)) if not self.probe_is_held_out[j]]


def render(
    config: ConceptImageConfig,
    concepts: np.ndarray,
    colour_noise: np.ndarray | None = None,
    radius_noise: np.ndarray | None = None,
    shifts: np.ndarray | None = None,
) -> np.ndarray:
    """Draw one image per row of ``concepts`` (``[n, s]``); noise arrays default to zero (no diversity).

    ``colour_noise`` ``[n, 3]``, ``radius_noise`` ``[n]`` (pixels), ``shifts`` ``[n, 2]`` (row, column)."""
    concepts = np.asarray(concepts, dtype=np.int64)
    n, size = len(concepts), config.image_size
    colour_noise = np.zeros((n, 3)) if colour_noise is None else colour_noise
    radius_noise = np.zeros(n) if radius_noise is None else radius_noise
    shifts = np.zeros((n, 2), dtype=np.int64) if shifts is None else shifts
    sign = 1.0 - 2.0 * concepts[:, 0]  # +1 red, -1 blue
    half = config.colour_contrast / 2
    rgb = np.stack([0.5 + half * sign, np.full(n, 0.3), 0.5 - half * sign], axis=1) + colour_noise
    rgb = np.clip(rgb, 0.0, 1.0)
    radius = np.maximum(config.radius + config.size_delta * concepts[:, 1] + radius_noise, 0.5)
    centre = (size - 1) / 2 + shifts  # [n, 2]
    rows = np.arange(size)[None, :, None] - centre[:, 0, None, None]  # [n, H, 1]
    cols = np.arange(size)[None, None, :] - centre[:, 1, None, None]  # [n, 1, W]
    disk_distance = np.sqrt(rows**2 + cols**2)
    square_distance = np.maximum(np.abs(rows), np.abs(cols))
    is_square = concepts[:, 2] == 1 if concepts.shape[1] > 2 else np.zeros(n, dtype=bool)
    # a square of the disk's area has half-side r sqrt(pi) / 2
    half_side = radius * np.sqrt(np.pi) / 2
    coverage_disk = np.clip(radius[:, None, None] - disk_distance + 0.5, 0.0, 1.0)
    coverage_square = np.clip(half_side[:, None, None] - square_distance + 0.5, 0.0, 1.0)
    coverage = np.where(is_square[:, None, None], coverage_square, coverage_disk)
    return (coverage[:, None] * rgb[:, :, None, None]).astype(np.float32)


def build_concept_images(
    config: ConceptImageConfig, seed: int, include_held_out: bool = False
) -> ConceptImageData:
    """Draw ``n_per_combination`` images of every training combination (and held-out ones if asked).

    ``include_held_out=True`` draws the full grid, e.g. to train the concept classifier
    (:mod:`recombine.probes.concept_classifier`): the generator is known, so the classifier may see every
    combination even though the diffusion model does not."""
    rng = np.random.default_rng(seed)
    names = combination_names(config.n_concepts)
    masks = combination_masks(config.n_concepts)
    held_out = np.array([name in config.held_out for name in names])
    chosen = [j for j in range(len(names)) if include_held_out or not held_out[j]]
    combination = np.repeat(np.array(chosen, dtype=np.int64), config.n_per_combination)
    n = len(combination)
    concepts = masks[combination]
    colour_noise = rng.standard_normal((n, 3)) * config.colour_jitter
    radius_noise = rng.standard_normal(n) * config.size_jitter
    shifts = rng.integers(-config.position_jitter, config.position_jitter + 1, size=(n, 2))
    images = render(config, concepts, colour_noise, radius_noise, shifts)
    return ConceptImageData(
        config=config,
        images=images,
        concepts=concepts,
        combination=combination,
        probe_names=names,
        probe_masks=masks,
        probe_is_held_out=held_out,
    )


def concept_signals(config: ConceptImageConfig) -> np.ndarray:
    """``[s]``: ``mu_p = ||mean image (concept p = 1) - mean image (concept p = 0)||_2``, noise-free grid.

    The SIM seed's concept signal, "the difference of class mean pixel values"; every combination counts
    once, whether held out or not."""
    masks = combination_masks(config.n_concepts)
    images = render(config, masks).astype(np.float64).reshape(len(masks), -1)
    return np.array(
        [
            np.linalg.norm(images[masks[:, p] == 1].mean(0) - images[masks[:, p] == 0].mean(0))
            for p in range(config.n_concepts)
        ]
    )
