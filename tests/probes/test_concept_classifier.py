"""The concept classifier (SIM seed, reviews L86): reads concept images right, pure noise near 1/2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.probes.concept_classifier import (
    ConceptClassifierConfig,
    concept_accuracy,
    concept_probabilities,
    train_concept_classifier,
)
from recombine.tasks.concept_images import ConceptImageConfig, build_concept_images


def test_classifier_reads_every_combination_including_held_out_ones() -> None:
    torch.manual_seed(0)
    task = ConceptImageConfig(n_per_combination=48)
    classifier = train_concept_classifier(
        build_concept_images(task, 0, include_held_out=True), ConceptClassifierConfig(steps=150), seed=0
    )
    fresh = build_concept_images(ConceptImageConfig(n_per_combination=16), 1, include_held_out=True)
    probabilities = concept_probabilities(classifier, fresh.images)
    assert concept_accuracy(probabilities, fresh.concepts) > 0.95
    held_out = fresh.combination == fresh.probe("11")
    assert (probabilities[held_out] > 0.5).all(axis=1).mean() > 0.9
    noise = np.random.default_rng(0).random((32, 3, 12, 12)).astype(np.float32)
    assert np.abs(concept_probabilities(classifier, noise).mean(0) - 0.5).max() < 0.2  # no evidence: centre


def test_concept_accuracy_needs_every_concept_right() -> None:
    probabilities = np.array([[0.9, 0.2], [0.9, 0.6], [0.4, 0.1]])
    concepts = np.array([[1, 0], [1, 0], [0, 0]])
    assert concept_accuracy(probabilities, concepts) == pytest.approx(2 / 3)


def test_training_on_a_set_without_the_held_out_combination_is_refused() -> None:
    data = build_concept_images(ConceptImageConfig(n_per_combination=2), 0)
    with pytest.raises(UserError, match="include_held_out"):
        train_concept_classifier(data, ConceptClassifierConfig(steps=1), seed=0)
