"""Helpers shared by tasks whose splits are defined by depth (CTL, arithmetic, ListOps; thesis D.3.2).

Each such config has ``train_depths``, ``valid_ood_depths`` and ``test_ood_depths`` (lists of
ints) and the split sizes ``n_train``, ``n_valid_iid``, ``n_valid_ood``, ``n_test_ood``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from recombine.errors import UserError

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
