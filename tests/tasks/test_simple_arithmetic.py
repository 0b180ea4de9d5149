"""Tests for the simple arithmetic task (thesis 5.2.2, D.3.2).

References here are independent of the module: targets come from Python's own ``eval`` of the
expression modulo 10 (mod 10 commutes with + and *), depths from the deepest bracket nesting (every
operation has exactly one pair of brackets), and the depth-0/1 expressions are enumerated by hand.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import pytest

from depth_split_checks import (
    check_bad_config_is_one_line_user_error,
    check_cache_round_trip,
    check_deterministic_per_seed,
    check_lengths_and_distinct_splits,
)
from recombine.errors import UserError
from recombine.tasks.base import TaskData
from recombine.tasks.simple_arithmetic import ArithmeticConfig, build_arithmetic, evaluate

SMALL = {"n_train": 2000, "n_valid_iid": 100, "n_valid_ood": 100, "n_test_ood": 100}
ALLOWED = set("0123456789+*()")


@pytest.fixture(scope="module")
def no_cache() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECOMBINE_NO_CACHE", "1")
        yield


@pytest.fixture(scope="module")
def data(no_cache: None) -> TaskData:
    return build_arithmetic(ArithmeticConfig(**SMALL), seed=0)


def texts(data: TaskData, split: str) -> list[str]:
    return ["".join(data.input_vocab.decode(x)) for x in data.splits[split].inputs]


def naive_value(text: str) -> int:
    assert set(text) <= ALLOWED, text
    return eval(text) % 10  # only digits, + * and brackets: safe


def nesting_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    assert depth == 0, text
    return deepest


def test_vocabularies_and_splits(data: TaskData) -> None:
    assert data.kind == "classify"
    assert list(data.splits) == ["train", "valid_iid", "valid_ood", "test_ood"]
    assert sorted(data.input_vocab.tokens[1:]) == sorted(ALLOWED)
    assert list(data.output_vocab.tokens[1:]) == [str(d) for d in range(10)]
    assert data.selection_split == "valid_ood"
    assert [len(data.splits[s]) for s in data.splits] == [2000, 100, 100, 100]


def test_targets_and_depths_match_independent_evaluation(data: TaskData) -> None:
    for name, split in data.splits.items():
        for text, target, depth in zip(texts(data, name), split.targets, split.depth, strict=True):
            assert data.output_vocab.tokens[target] == str(naive_value(text)), text
            assert nesting_depth(text) == depth, text
            # the module's own parser agrees with the references
            assert evaluate(text) == (naive_value(text), depth)


def test_depth_ranges_and_balance(data: TaskData) -> None:
    counts = {name: Counter(split.depth.tolist()) for name, split in data.splits.items()}
    assert set(counts["train"]) == {0, 1, 2, 3, 4, 5}
    assert set(counts["valid_iid"]) == {2, 3, 4, 5}  # depths 0 and 1 are all in train
    assert set(counts["valid_ood"]) == {6}
    assert set(counts["test_ood"]) == {7}
    assert counts["train"][0] == 10 and counts["train"][1] == 200
    sampled = [counts["train"][d] for d in (2, 3, 4, 5)]
    assert max(sampled) - min(sampled) <= 1 and sum(sampled) == 2000 - 210
    assert sorted(counts["valid_iid"].values()) == [25, 25, 25, 25]


def test_train_has_every_depth_0_and_1_expression(data: TaskData) -> None:
    digits = "0123456789"
    expected = set(digits) | {f"({a}{op}{b})" for a, b in itertools.product(digits, digits) for op in "+*"}
    assert len(expected) == 210
    assert {t for t in texts(data, "train") if nesting_depth(t) <= 1} == expected


def test_lengths_and_distinct_splits(data: TaskData) -> None:
    check_lengths_and_distinct_splits(data, texts, max_length=50)


def test_max_length_and_test_depths_follow_config(no_cache: None) -> None:
    data = build_arithmetic(ArithmeticConfig(**SMALL, max_length=35, test_ood_depths=[7, 8]), seed=1)
    assert max(len(x) for split in data.splits.values() for x in split.inputs) <= 35
    assert Counter(data.splits["test_ood"].depth.tolist()) == {7: 50, 8: 50}


def test_p_subop_zero_gives_chains(no_cache: None) -> None:
    # Without sub-operations every side operand is a digit: operations == depth.
    data = build_arithmetic(ArithmeticConfig(**SMALL, p_subop=0.0), seed=0)
    for name in data.splits:
        for text in texts(data, name):
            assert text.count("+") + text.count("*") == nesting_depth(text)
    # ... while the default p_subop = 0.2 yields side branches.
    default = build_arithmetic(ArithmeticConfig(**SMALL), seed=0)
    ops = [t.count("+") + t.count("*") - nesting_depth(t) for t in texts(default, "test_ood")]
    assert sum(o > 0 for o in ops) > 20


def test_deterministic_per_seed(no_cache: None, data: TaskData) -> None:
    check_deterministic_per_seed(data, lambda seed: build_arithmetic(ArithmeticConfig(**SMALL), seed), texts)


def test_cache_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    check_cache_round_trip("arithmetic", SMALL, texts, monkeypatch)


def test_hand_made_expressions() -> None:
    assert evaluate("((4*7)+2)") == (0, 2)  # the thesis example (5.2.2)
    assert evaluate("((1+2)*(3+4))") == (1, 2)
    assert evaluate("7") == (7, 0)
    for bad in ("(1+2", "(1-2)", "1+2", "((1+2))"):
        with pytest.raises(UserError):
            evaluate(bad)


@pytest.mark.parametrize(
    "overrides",
    [
        {"n_train": 0},
        {"n_test_ood": -1},
        {"train_depths": []},
        {"train_depths": [1, 1]},
        {"train_depths": [-1, 2]},
        {"train_depths": [0, 1, 6]},
        {"valid_ood_depths": [7]},
        {"p_subop": 1.5},
        {"max_length": 20},
        {"train_depths": [0], "n_train": 11},
        {"n_trian": 5},
    ],
)
def test_bad_config_is_one_line_user_error(overrides: dict[str, object]) -> None:
    check_bad_config_is_one_line_user_error("arithmetic", overrides)
