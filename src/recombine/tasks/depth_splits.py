"""Helpers shared by tasks whose splits are defined by depth (CTL, arithmetic, ListOps; thesis D.3.2).

Each such config has ``train_depths``, ``valid_ood_depths`` and ``test_ood_depths`` (lists of
ints) and the split sizes ``n_train``, ``n_valid_iid``, ``n_valid_ood``, ``n_test_ood``.

:func:`depth_balanced_splits` builds the four splits of an expression task (arithmetic, ListOps) from
a sampler of distinct examples of one depth; :func:`flat_split` and :func:`classification_split`
convert a split to and from the flat arrays the task cache stores.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from recombine.errors import UserError
from recombine.tasks.base import ClassificationSplit

DEPTH_FIELDS = ("train_depths", "valid_ood_depths", "test_ood_depths")
SIZE_FIELDS = ("n_train", "n_valid_iid", "n_valid_ood", "n_test_ood")


def check_depth_groups(config: Any, min_depth: int, what: str = "depths") -> dict[str, set[int]]:
    """Each depth list non-empty, distinct, >= ``min_depth``, and the three lists disjoint."""
    groups: dict[str, set[int]] = {}
    for name in DEPTH_FIELDS:
        depths = [int(d) for d in getattr(config, name)]
        if not depths or min(depths) < min_depth or len(set(depths)) != len(depths):
            raise UserError(f"task.{name} must be a non-empty list of distinct {what} >= {min_depth}")
        groups[name] = set(depths)
    train, valid_ood, test_ood = (groups[name] for name in DEPTH_FIELDS)
    if train & valid_ood or train & test_ood or valid_ood & test_ood:
        raise UserError("task: train_depths, valid_ood_depths and test_ood_depths must not overlap")
    return groups


def check_max_length(config: Any, groups: dict[str, set[int]], tokens_per_level: int, what: str) -> None:
    """``max_length`` fits an example of the deepest of the ``groups`` (see :func:`check_depth_groups`),
    which has at least ``tokens_per_level`` tokens per level of depth and one more."""
    deepest = max(max(g) for g in groups.values())
    needed = tokens_per_level * deepest + 1
    if config.max_length < needed:
        raise UserError(
            f"task.max_length={config.max_length} is too short for {what} {deepest} "
            f"(needs at least {needed} tokens)"
        )


def check_split_sizes(config: Any) -> None:
    for name in SIZE_FIELDS:
        if getattr(config, name) < 1:
            raise UserError(f"task.{name} must be >= 1")


def cache_config(config: Any) -> dict[str, object]:
    """The config as a plain dict for the cache key (depth lists as plain ints)."""
    return {
        f.name: [int(v) for v in getattr(config, f.name)]
        if f.name in DEPTH_FIELDS
        else getattr(config, f.name)
        for f in fields(config)
    }


def balanced_counts(caps: Sequence[int], total: int, what: str) -> list[int]:
    """Split ``total`` over bins as evenly as possible with ``counts[i] <= caps[i]`` (water filling)."""
    if total > sum(caps):
        raise UserError(f"task: {what} asks for {total} examples but only {sum(caps)} distinct ones exist")
    counts = [0] * len(caps)
    remaining, active = total, [i for i, cap in enumerate(caps) if cap > 0]
    while remaining > 0:
        share = remaining // len(active)
        if share == 0:  # fewer left than open bins: one more for each of the first ones
            for i in active[:remaining]:
                counts[i] += 1
            break
        for i in active:
            add = min(share, caps[i] - counts[i])
            counts[i] += add
            remaining -= add
        active = [i for i in active if counts[i] < caps[i]]
    return counts


#: Ids of the random streams of :func:`depth_balanced_splits` (part of the seeds: changing one changes
#: the data). ``pool`` draws train + valid_iid, ``shuffle`` splits the pools and orders the splits.
STREAM_IDS = {"pool": 0, "valid_ood": 1, "test_ood": 2, "shuffle": 3}

#: ``sample(stream, depth, deepest, count)``: ``count`` distinct examples of exactly ``depth`` as
#: ``(token ids, value)`` pairs, drawn from the random stream ``(stream, depth)`` (``stream`` a key of
#: :data:`STREAM_IDS`); ``deepest`` is the largest depth of the split being built.
DepthSampler = Callable[[str, int, int, int], list[tuple[bytes, int]]]


def _unlimited(depths: list[int]) -> list[int]:
    return [sys.maxsize] * len(depths)


def depth_balanced_splits(
    config: Any,
    sample: DepthSampler,
    shuffle: np.random.Generator,
    caps: Callable[[list[int]], list[int]] = _unlimited,
) -> dict[str, dict[str, np.ndarray]]:
    """``train``, ``valid_iid``, ``valid_ood`` and ``test_ood``, each balanced over its depths, in flat form.

    ``train`` and ``valid_iid`` split one pool of distinct examples per train depth at random, so they
    are disjoint and identically distributed; the OOD splits sample their depths on their own streams.
    Each split spreads its size over its depths as evenly as ``caps(depths)`` (how many distinct examples
    each depth may supply; default: no limit, so equal counts up to one) allows, by
    :func:`balanced_counts`. ``shuffle`` first splits the pools, then shuffles each split in the order
    above.
    """

    def flat_shuffled(examples: list[tuple[bytes, int, int]]) -> dict[str, np.ndarray]:
        return flat_split([examples[i] for i in shuffle.permutation(len(examples))])

    depths = sorted(int(d) for d in config.train_depths)
    pool_caps = caps(depths)
    train_counts = balanced_counts(pool_caps, config.n_train, "train")
    left = [cap - n for cap, n in zip(pool_caps, train_counts, strict=True)]
    valid_counts = balanced_counts(left, config.n_valid_iid, "valid_iid")
    train, valid_iid = [], []
    for depth, n_train, n_valid in zip(depths, train_counts, valid_counts, strict=True):
        pool = sample("pool", depth, depths[-1], n_train + n_valid)
        order = shuffle.permutation(len(pool))
        valid_iid += [(*pool[i], depth) for i in order[:n_valid]]
        train += [(*pool[i], depth) for i in order[n_valid:]]
    splits = {"train": flat_shuffled(train), "valid_iid": flat_shuffled(valid_iid)}
    for name, ood_depths, size in (
        ("valid_ood", config.valid_ood_depths, config.n_valid_ood),
        ("test_ood", config.test_ood_depths, config.n_test_ood),
    ):
        ood_depths = sorted(int(d) for d in ood_depths)
        counts = balanced_counts(caps(ood_depths), size, name)
        examples = [
            (*example, depth)
            for depth, count in zip(ood_depths, counts, strict=True)
            for example in sample(name, depth, ood_depths[-1], count)
        ]
        splits[name] = flat_shuffled(examples)
    return splits


def flat_split(examples: Sequence[tuple[bytes, int, int]]) -> dict[str, np.ndarray]:
    """A split of ``(token ids, value, depth)`` examples as flat arrays (fast to pickle): the token ids
    concatenated (uint8), each example's length, target (output id of ``value``: ``value + 1``, after
    ``<pad>``) and depth."""
    return {
        "tokens": np.frombuffer(b"".join(tokens for tokens, _, _ in examples), dtype=np.uint8).copy(),
        "lengths": np.array([len(tokens) for tokens, _, _ in examples], dtype=np.int64),
        "targets": np.array([value + 1 for _, value, _ in examples], dtype=np.int64),
        "depth": np.array([depth for _, _, depth in examples], dtype=np.int64),
    }


def classification_split(
    tokens: np.ndarray, lengths: np.ndarray, targets: np.ndarray, depth: np.ndarray
) -> ClassificationSplit:
    """The split that :func:`flat_split` flattened."""
    inputs = np.split(tokens.astype(np.int64), np.cumsum(lengths)[:-1])
    return ClassificationSplit(inputs=inputs, targets=targets, depth=depth)
