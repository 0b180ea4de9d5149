"""Block-permuted images (BLOCK 5.4, A.2.4): the permutations' balance, strips that reassemble to the
original image, and the removed digit x permutation combinations, against independent references."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from recombine.errors import UserError
from recombine.tasks.block_permuted_images import (
    PERMUTATIONS,
    TEST_PERMUTATIONS,
    VALID_PERMUTATIONS,
    BlockPermutedImagesConfig,
    build_block_permuted_images,
    inverse_permutations,
)
from recombine.tasks.mnist_idx import MNIST_FILES


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return build_block_permuted_images(BlockPermutedImagesConfig(), seed=3)


def test_the_eight_permutations_balance_every_block_over_every_position() -> None:
    assert len(set(PERMUTATIONS)) == 8
    assert all(sorted(p) == [0, 1, 2, 3] for p in PERMUTATIONS)
    counts = np.zeros((4, 4), dtype=int)  # [position, block]
    for permutation in PERMUTATIONS:
        for position, block in enumerate(permutation):
            counts[position, block] += 1
    assert (counts == 2).all()  # A.2.4: each block in each position equally often
    assert VALID_PERMUTATIONS == (0, 1, 2, 3) and TEST_PERMUTATIONS == (4, 5, 6, 7)
    for half in (VALID_PERMUTATIONS, TEST_PERMUTATIONS):  # our choice: each half a Latin square
        for position in range(4):
            assert sorted(PERMUTATIONS[p][position] for p in half) == [0, 1, 2, 3]


def test_inverse_permutations_undo_the_permutations() -> None:
    inverse = inverse_permutations()
    for p, permutation in enumerate(PERMUTATIONS):
        for block in range(4):
            assert permutation[inverse[p, block]] == block


def test_strips_are_the_permuted_image_rows_and_reassemble_to_the_original(data) -> None:  # type: ignore[no-untyped-def]
    digits = load_digits()
    original = digits.images / 16.0  # independent reference: the raw 8x8 images
    for name in ("train", "valid_iid", "test", "test_ood"):
        split = data.splits[name]
        index = np.random.default_rng(0).choice(len(split), 40, replace=False)
        blocks = data.blocks(name, index)
        assert blocks.shape == (40, 5, 16) and blocks.dtype == np.float32
        for row, i in enumerate(index):
            image, p = original[split.image[i]], split.permutation[i]
            assert split.labels[i] == digits.target[split.image[i]]
            for position in range(4):  # a strip = two full rows of the image, in permuted order
                strip = image[2 * PERMUTATIONS[p][position] : 2 * PERMUTATIONS[p][position] + 2]
                np.testing.assert_allclose(blocks[row, position], strip.ravel(), rtol=0, atol=1e-7)
            # reassembly: put every strip back at the place of the block it holds
            rebuilt = np.zeros((8, 8))
            for position in range(4):
                block = PERMUTATIONS[p][position]
                rebuilt[2 * block : 2 * block + 2] = blocks[row, position].reshape(2, 8)
            np.testing.assert_allclose(rebuilt, image, rtol=0, atol=1e-7)
            np.testing.assert_allclose(
                blocks[row, inverse_permutations()[p]].reshape(8, 8), image, rtol=0, atol=1e-7
            )
            indicator = np.zeros(16)
            indicator[p] = 1.0
            np.testing.assert_array_equal(blocks[row, 4], indicator)  # one-hot id, padded (A.2)


def test_removed_combinations_never_appear_in_training_and_do_appear_in_test(data) -> None:  # type: ignore[no-untyped-def]
    removed = {(d, p) for d, p in zip(data.removed_digits, (4, 5, 6, 7), strict=True)}
    assert len(data.removed_digits) == 4
    train = data.splits["train"]
    trained = set(zip(train.labels.tolist(), train.permutation.tolist(), strict=True))
    every = set(itertools.product(range(10), range(8)))
    assert trained == every - removed  # everything else is trained
    test = data.splits["test"]
    tested = set(zip(test.labels.tolist(), test.permutation.tolist(), strict=True))
    assert removed <= tested and {p for _, p in tested} == {4, 5, 6, 7}
    ood = data.splits["test_ood"]
    assert set(zip(ood.labels.tolist(), ood.permutation.tolist(), strict=True)) == removed
    iid = data.splits["test_iid"]
    assert not set(zip(iid.labels.tolist(), iid.permutation.tolist(), strict=True)) & removed
    assert len(iid) + len(ood) == len(test)
    # every test image of a removed digit is in test_ood with its permutation
    for digit, permutation in removed:
        expected = {int(i) for i in np.unique(test.image[test.labels == digit])}
        assert {
            int(i) for i, p in zip(ood.image, ood.permutation, strict=True) if p == permutation
        } >= expected
    valid = data.splits["valid_iid"]
    assert set(valid.permutation.tolist()) == {0, 1, 2, 3}


def test_training_validation_and_test_images_are_disjoint(data) -> None:  # type: ignore[no-untyped-def]
    images = {name: set(data.splits[name].image.tolist()) for name in ("train", "valid_iid", "test")}
    assert not images["train"] & images["valid_iid"]
    assert not images["train"] & images["test"]
    assert not images["valid_iid"] & images["test"]
    assert len(images["train"]) + len(images["valid_iid"]) + len(images["test"]) == 1797
    # every image appears with every permutation of its split
    for name, permutations in (("valid_iid", 4), ("test", 4)):
        assert len(data.splits[name]) == permutations * len(images[name])


def test_same_seed_same_data_and_fixed_removed_digits() -> None:
    first = build_block_permuted_images(BlockPermutedImagesConfig(), seed=5)
    again = build_block_permuted_images(BlockPermutedImagesConfig(), seed=5)
    for name, split in first.splits.items():
        np.testing.assert_array_equal(split.image, again.splits[name].image)
        np.testing.assert_array_equal(split.permutation, again.splits[name].permutation)
    assert len(set(first.removed_digits)) == 4  # drawn distinct
    fixed = build_block_permuted_images(BlockPermutedImagesConfig(removed_digits=[1, 1, 2, 9]), seed=5)
    assert fixed.removed_digits == (1, 1, 2, 9)


def test_without_the_indicator_the_model_sees_only_the_four_strips() -> None:
    data = build_block_permuted_images(BlockPermutedImagesConfig(task_indicator=False), seed=0)
    assert data.n_input_blocks == 4 and data.blocks("train", np.arange(3)).shape == (3, 4, 16)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"source": "cifar"}, "unknown task.source 'cifar'; valid choices"),
        ({"removed_digits": [1, 2, 3]}, "task.removed_digits must be 4 digits"),
        ({"removed_digits": [1, 2, 3, 10]}, "task.removed_digits must be 4 digits"),
        ({"valid_fraction": 0.0}, "must be in \\(0, 1\\)"),
        ({"valid_fraction": 0.5, "test_fraction": 0.5}, "must be < 1"),
    ],
)
def test_bad_configs_are_one_line_user_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message) as error:
        BlockPermutedImagesConfig(**values)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_missing_mnist_files_say_what_to_download(tmp_path: Path) -> None:
    config = BlockPermutedImagesConfig(source="mnist", mnist_dir=str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="train-images-idx3-ubyte.gz") as error:
        build_block_permuted_images(config, seed=0)
    assert "\n" not in str(error.value)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_idx_files_give_196_pixel_strips_and_the_official_test_images(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train_labels, test_labels = np.arange(60) % 10, np.arange(20) % 10
    arrays = {
        "train_images": rng.integers(0, 256, (60, 28, 28)),
        "train_labels": train_labels,
        "test_images": rng.integers(0, 256, (20, 28, 28)),
        "test_labels": test_labels,
    }
    for role, stem in MNIST_FILES.items():
        _write_idx(tmp_path / stem, arrays[role])
    data = build_block_permuted_images(
        BlockPermutedImagesConfig(source="mnist", mnist_dir=str(tmp_path), valid_fraction=1 / 6), seed=0
    )
    assert data.block_size == 196 and data.image_shape == (28, 28)
    test = data.splits["test"]
    assert set(test.image.tolist()) == set(range(60, 80))  # the t10k file, after the 60 training images
    assert len(set(data.splits["valid_iid"].image.tolist())) == 10  # one of the six per class
    i = int(np.flatnonzero(test.permutation == 6)[0])
    blocks = data.blocks("test", np.array([i]))[0]
    image = arrays["test_images"][test.image[i] - 60] / 255.0
    for position, block in enumerate(PERMUTATIONS[6]):
        np.testing.assert_allclose(blocks[position], image[7 * block : 7 * block + 7].ravel(), atol=1e-6)
