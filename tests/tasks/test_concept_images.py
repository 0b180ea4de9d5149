"""Concept images (CATALOG §1.14, SIM diffusion part): held-out combinations, label counts, signals.

References are independent of the module: per-image loops over concepts, the colour read back from the
brightest pixel, the covered area against pi r^2, and the class-mean difference recomputed by a loop.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.tasks.concept_images import (
    ConceptImageConfig,
    build_concept_images,
    concept_signals,
    render,
)


@pytest.mark.parametrize(("n_concepts", "held_out"), [(2, ["11"]), (3, ["111", "011"])])
def test_held_out_combinations_never_appear_in_training_and_counts_per_combination_are_equal(
    n_concepts: int, held_out: list[str]
) -> None:
    config = ConceptImageConfig(n_concepts=n_concepts, held_out=held_out, n_per_combination=7)
    data = build_concept_images(config, seed=3)
    seen = Counter("".join(str(int(v)) for v in row) for row in data.concepts)
    expected = {"".join(bits): 7 for bits in itertools.product("01", repeat=n_concepts)}
    for name in held_out:
        del expected[name]
    assert dict(seen) == expected
    for i in range(len(data.images)):  # the combination index names the same bits as the concept row
        assert data.probe_names[data.combination[i]] == "".join(str(int(v)) for v in data.concepts[i])
    assert [data.probe_names[j] for j in np.flatnonzero(data.probe_is_held_out)] == sorted(held_out)
    full = build_concept_images(config, seed=3, include_held_out=True)
    assert Counter(full.combination.tolist()) == {j: 7 for j in range(2**n_concepts)}


def test_generation_is_deterministic_per_seed() -> None:
    config = ConceptImageConfig(n_per_combination=5)
    a, b, c = (build_concept_images(config, seed) for seed in (1, 1, 2))
    np.testing.assert_array_equal(a.images, b.images)
    assert not np.array_equal(a.images, c.images)


def test_rendered_colour_and_size_follow_the_concepts() -> None:
    config = ConceptImageConfig(image_size=16, colour_contrast=0.6, radius=3.0, size_delta=2.0)
    images = render(config, np.array([[0, 0], [1, 0], [0, 1], [1, 1]]))
    for image, (colour, size) in zip(images, [(0, 0), (1, 0), (0, 1), (1, 1)], strict=True):
        sign = 1 if colour == 0 else -1
        centre_pixel = image[:, 7:9, 7:9].mean((1, 2))  # fully covered by every object
        np.testing.assert_allclose(centre_pixel, [0.5 + 0.3 * sign, 0.3, 0.5 - 0.3 * sign], atol=1e-6)
        radius = 3.0 + 2.0 * size
        area = image[1].sum() / 0.3  # green is 0.3 * coverage everywhere
        assert area == pytest.approx(np.pi * radius**2, rel=0.05)


def test_concept_signal_is_the_distance_between_class_mean_images() -> None:
    config = ConceptImageConfig(n_concepts=3, held_out=["111"], image_size=14)
    combos = np.array(list(itertools.product([0, 1], repeat=3)))
    images = render(config, combos).astype(np.float64)
    for p in range(3):
        ones, zeros = np.zeros_like(images[0]), np.zeros_like(images[0])
        for combo, image in zip(combos, images, strict=True):
            if combo[p]:
                ones += image / 4
            else:
                zeros += image / 4
        assert concept_signals(config)[p] == pytest.approx(np.sqrt(((ones - zeros) ** 2).sum()), rel=1e-9)
    weak = ConceptImageConfig(colour_contrast=0.2)
    assert (
        concept_signals(weak)[0] < concept_signals(ConceptImageConfig())[0]
    )  # contrast sets the colour signal


def test_bad_configs_name_the_valid_choices() -> None:
    with pytest.raises(UserError, match="valid choices: 00, 01, 10, 11"):
        ConceptImageConfig(held_out=["12"])
    with pytest.raises(UserError, match="n_concepts"):
        ConceptImageConfig(n_concepts=4)
    with pytest.raises(UserError, match="too small"):
        ConceptImageConfig(image_size=6)
