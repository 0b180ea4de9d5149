"""Routing indicators of BLOCK A.2.4 against hand-computed cases, and on a real SMFR whose first
Multiplexer is set by hand to undo the block permutation (or to ignore it)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.models.smfr import BlockShape, build_block_model
from recombine.probes.block_routing import (
    IndicatorCurve,
    attention_fairness,
    attention_sharpness,
    max_routing_weight,
    measure_routing,
    original_block_weights,
    permutation_difference,
    routing_arrays,
    save_indicator_figure,
    save_routing_figure,
)
from recombine.tasks.block_permuted_images import (
    PERMUTATIONS,
    BlockPermutedImagesConfig,
    PermutedImageSplit,
    build_block_permuted_images,
)

ORDER = np.asarray(PERMUTATIONS)
ALL = np.arange(8)


def one_hot_routing(reads: list[list[int]], m: int = 5) -> np.ndarray:
    """``reads[b][n]`` = the input position output ``n`` of example ``b`` copies."""
    weights = np.zeros((len(reads), len(reads[0]), m))
    for b, row in enumerate(reads):
        for n, position in enumerate(row):
            weights[b, n, position] = 1.0
    return weights


def test_one_hot_routing_is_perfectly_sharp_with_the_expected_fairness() -> None:
    distinct = one_hot_routing([[0, 1, 2, 3], [3, 1, 0, 2]])
    assert attention_sharpness(distinct) == pytest.approx(1.0, abs=1e-12)
    assert max_routing_weight(distinct) == 1.0
    assert attention_fairness(distinct, 4) == pytest.approx(1.0)  # every strip read once
    two_blocks = one_hot_routing([[0, 0, 1, 1]])  # shares (1/2, 1/2, 0, 0): entropy log 2 of log 4
    assert attention_sharpness(two_blocks) == pytest.approx(1.0, abs=1e-12)
    assert attention_fairness(two_blocks, 4) == pytest.approx(0.5)
    three = one_hot_routing([[0, 0, 1, 2]])  # shares (1/2, 1/4, 1/4, 0)
    entropy = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert attention_fairness(three, 4) == pytest.approx(entropy / math.log(4))
    one_block = one_hot_routing([[2, 2, 2, 2]])
    assert attention_fairness(one_block, 4) == pytest.approx(0.0, abs=1e-12)
    indicator_only = one_hot_routing([[4, 4, 4, 4]])
    assert attention_fairness(indicator_only, 4) == 0.0


def test_uniform_routing_is_the_other_extreme() -> None:
    uniform = np.full((8, 4, 5), 1 / 5)
    assert attention_sharpness(uniform) == pytest.approx(0.0, abs=1e-12)
    assert max_routing_weight(uniform) == pytest.approx(1 / 5)
    assert attention_fairness(uniform, 4) == pytest.approx(1.0)
    assert permutation_difference(uniform, ALL, ORDER) == pytest.approx(0.0, abs=1e-12)
    half = np.zeros((1, 1, 4))
    half[0, 0, :2] = 0.5  # entropy log 2 of log 4
    assert attention_sharpness(half) == pytest.approx(0.5)


def test_a_fixed_position_reader_looks_fair_over_the_batch_but_not_per_example() -> None:
    """Always copying position 0 reads every strip equally often over the balanced permutations, but
    drops three strips of every single image: fairness is per example."""
    always_first = one_hot_routing([[0, 0, 0, 0]] * 8)
    assert attention_fairness(always_first, 4) == pytest.approx(0.0, abs=1e-12)
    by_block = original_block_weights(always_first, ALL, ORDER).mean((0, 1))
    np.testing.assert_allclose(by_block[:4], 0.25)


def expected_difference_of_positional_routing() -> float:
    """Output n copies position n: by original strip, permutation p's row n is one-hot at PERMUTATIONS[p][n],
    so two permutations' rows differ by total variation 1 exactly where the permutations differ."""
    pairs = list(itertools.combinations(range(8), 2))
    return float(
        np.mean([np.mean([PERMUTATIONS[p][n] != PERMUTATIONS[q][n] for n in range(4)]) for p, q in pairs])
    )


def test_permutation_difference_by_hand() -> None:
    undo = one_hot_routing([[int(np.argsort(ORDER[p])[n]) for n in range(4)] for p in range(8)])
    assert permutation_difference(undo, ALL, ORDER) == pytest.approx(0.0, abs=1e-12)
    positional = one_hot_routing([[0, 1, 2, 3]] * 8)
    expected = expected_difference_of_positional_routing()
    assert expected > 0.5
    assert permutation_difference(positional, ALL, ORDER) == pytest.approx(expected)
    # two examples of two permutations: 0123 and 1230 differ at every position
    assert permutation_difference(positional[:2], ALL[:2], ORDER) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two permutations"):
        permutation_difference(positional[:1], ALL[:1], ORDER)


def smfr_with_hand_set_first_router(undo: bool) -> torch.nn.Module:
    """A depth-1 SMFR whose first Multiplexer reads the one-hot permutation id (block 4, units 0-7) and
    copies, for output n, the position holding original strip n (``undo``) or position n."""
    torch.manual_seed(0)
    model = build_block_model("smfr", BlockShape(5, 1, 16), depth=1, width=4, fnn_depth=1)
    first, last = model.layers[0].multiplexer.fnn[0], model.layers[0].multiplexer.fnn[-1]
    inverse = np.argsort(ORDER, axis=1)
    with torch.no_grad():
        first.weight.zero_()
        first.bias.zero_()
        last.weight.zero_()
        last.bias.zero_()
        for p in range(8):
            first.weight[p, 4 * 16 + p] = 1.0  # hidden unit p = "permutation p" (LeakyReLU keeps 1)
            for n in range(4):
                position = int(inverse[p, n]) if undo else n
                last.weight[n * 5 + position, p] = 40.0  # logits [N=4, M=5], row-major
    return model


def test_an_smfr_that_undoes_the_permutation_has_permutation_difference_zero() -> None:
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    images = np.repeat(np.unique(data.splits["valid_iid"].image)[:6], 8)
    split = PermutedImageSplit(images, np.tile(ALL, 6), data.image_labels[images])
    blocks = torch.from_numpy(data.blocks(split))

    indicators, output = measure_routing(
        smfr_with_hand_set_first_router(undo=True), blocks, split.permutation, ORDER
    )
    assert indicators.permutation_difference == pytest.approx(0.0, abs=1e-9)
    assert indicators.sharpness[0] == pytest.approx(1.0, abs=1e-9)
    assert indicators.fairness == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(indicators.block_share, 0.25, atol=1e-9)
    assert indicators.indicator_share == pytest.approx(0.0, abs=1e-9)
    # the data after the first attention layer is the unpermuted image, whatever the permutation
    routed = output.layers[0].multiplexer.blocks.numpy()
    np.testing.assert_allclose(routed, data.image_blocks[images], atol=1e-6)

    indicators, _ = measure_routing(
        smfr_with_hand_set_first_router(undo=False), blocks, split.permutation, ORDER
    )
    assert indicators.permutation_difference == pytest.approx(
        expected_difference_of_positional_routing(), abs=1e-9
    )
    assert indicators.sharpness[0] == pytest.approx(1.0, abs=1e-9) and indicators.fairness == pytest.approx(
        1.0
    )


def test_figures_are_written_as_png(tmp_path: Path) -> None:
    model = smfr_with_hand_set_first_router(undo=True)
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    split = PermutedImageSplit(np.zeros(8, dtype=np.int64), ALL, np.zeros(8, dtype=np.int64))
    indicators, output = measure_routing(model, torch.from_numpy(data.blocks(split)), ALL, ORDER)
    weights, gates = routing_arrays(output)
    assert [w.shape for w in weights] == [(8, 4, 5), (8, 1, 4)] and [g.shape for g in gates] == [
        (8, 4),
        (8, 1),
    ]
    images = data.blocks(split)[:, :4].reshape(8, 8, 8)
    routing = save_routing_figure(
        weights, gates, tmp_path / "routing.png", [f"perm {p}" for p in range(8)], images
    )
    curves = [IndicatorCurve("hand-set", [1, 2], [indicators, indicators])]
    over_time = save_indicator_figure(curves, tmp_path / "indicators.png")
    for path in (routing, over_time):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
