"""Tests for ListOps with dependency-depth splits (thesis 5.2.3, D.3.2).

The reference evaluator here is independent of the module: a recursive parser that computes values
with ``statistics.median`` and the dependency depth by brute force over every admissible choice of
selected operands (MIN/MAX: any operand holding the result; MED: any operand holding the middle value,
or any two distinct operands holding the two middle values; SM: all), keeping the shallowest choice.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from depth_split_checks import (
    check_bad_config_is_one_line_user_error,
    check_cache_round_trip,
    check_deterministic_per_seed,
    check_lengths_and_distinct_splits,
)
from recombine.errors import UserError
from recombine.tasks import listops
from recombine.tasks.base import TaskData
from recombine.tasks.listops import ListOpsConfig, build_listops, evaluate, tokenize

SMALL = {"n_train": 2000, "n_valid_iid": 100, "n_valid_ood": 100, "n_test_ood": 100}
OPS = ("[MIN", "[MAX", "[MED", "[SM")


def reference(tokens: list[str]) -> tuple[int, int, int]:
    """(value, dependency depth, tree depth); asserts 2..5 arguments per operation."""

    def parse(i: int) -> tuple[int, int, int, int]:  # value, dependency depth, tree depth, next index
        if tokens[i].isdigit():
            return int(tokens[i]), 0, 0, i + 1
        op, i = tokens[i], i + 1
        args = []
        while tokens[i] != "]":
            value, dep, tree, i = parse(i)
            args.append((value, dep, tree))
        assert 2 <= len(args) <= 5, tokens
        values = [a[0] for a in args]
        if op == "[SM":
            result, selected = sum(values) % 10, max(a[1] for a in args)
        elif op in ("[MIN", "[MAX"):
            result = min(values) if op == "[MIN" else max(values)
            selected = min(a[1] for a in args if a[0] == result)
        else:
            assert op == "[MED", op
            result = math.floor(statistics.median(values))
            ordered = sorted(values)
            middle = ordered[len(values) // 2 - 1 : len(values) // 2 + 1]
            if len(values) % 2:
                want = ordered[len(values) // 2]
                selected = min(a[1] for a in args if a[0] == want)
            else:
                selected = min(
                    max(args[i][1], args[j][1])
                    for i, j in itertools.permutations(range(len(args)), 2)
                    if (args[i][0], args[j][0]) == (middle[0], middle[1])
                )
        return result, selected + 1, max(a[2] for a in args) + 1, i + 1

    value, dep, tree, end = parse(0)
    assert end == len(tokens), tokens
    return value, dep, tree


@pytest.fixture(scope="module")
def no_cache() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECOMBINE_NO_CACHE", "1")
        yield


@pytest.fixture(scope="module")
def data(no_cache: None) -> TaskData:
    return build_listops(ListOpsConfig(**SMALL), seed=0)


def token_lists(data: TaskData, split: str) -> list[tuple[str, ...]]:
    return [tuple(data.input_vocab.decode(x)) for x in data.splits[split].inputs]


HAND_MADE = [
    # (expression, value, dependency depth)
    ("[MIN 0 [MAX 9 [SM 1 2]]]", 0, 1),  # the deep branch is not selected by MIN: it does not count
    ("[SM 0 [MAX 9 [SM 1 2]]]", 9, 2),  # SM needs everything; MAX selects the digit 9
    ("[MAX 5 [SM 2 3]]", 5, 1),  # tie: the digit 5 already holds the result
    ("[MED 1 7 [MIN 3 4] 9]", 5, 2),  # even count: 3 (from MIN) and 7 are both selected
    ("[MED 4 8 5 [MAX 8 4 9]]", 6, 1),  # thesis 5.2.3 example: = 6
    ("[MED 2 [SM 1 1] 2]", 2, 1),  # odd count, tie on the middle value: a digit suffices
    ("[MED 3 [SM 1 2]]", 3, 2),  # even count with equal middle values: both operands are needed
    ("[SM [MED [MIN 1 7 4 [MAX 2 4 0 8 9]] 7] 5 [MED 8 5 8] 0 7]", 4, 3),  # thesis Fig. 5.4 input
    ("[MAX [SM 1 [SM 2 2]] [MIN 5 6]]", 5, 2),  # tie: the depth-1 MIN suffices, not the depth-2 SM
]


@pytest.mark.parametrize(("text", "value", "depth"), HAND_MADE)
def test_hand_made_dependency_depths(text: str, value: int, depth: int) -> None:
    tokens = tokenize(text)
    assert reference(tokens)[:2] == (value, depth)
    assert evaluate(tokens) == (value, depth)


def test_tokenize_and_malformed_input() -> None:
    assert tokenize("[MIN 2 [MAX 3 4] 1]") == ["[MIN", "2", "[MAX", "3", "4", "]", "1", "]"]
    for bad in ("[MIN 2 3", "[MIN 2 3]]", "[FOO 1 2]", "2 3"):
        with pytest.raises(UserError):
            evaluate(tokenize(bad))


def test_vocabularies_and_splits(data: TaskData) -> None:
    assert data.kind == "classify"
    assert list(data.splits) == ["train", "valid_iid", "valid_ood", "test_ood"]
    # "[MIN" is one token, as in the official ListOps
    assert set(data.input_vocab.tokens[1:]) == {*map(str, range(10)), *OPS, "]"}
    assert list(data.output_vocab.tokens[1:]) == [str(d) for d in range(10)]
    assert [len(data.splits[s]) for s in data.splits] == [2000, 100, 100, 100]


def test_targets_and_depths_match_reference(data: TaskData) -> None:
    max_tree = {"train": 5, "valid_iid": 5, "valid_ood": 6, "test_ood": 7}
    for name, split in data.splits.items():
        deeper_than_dependency = 0
        for tokens, target, depth in zip(token_lists(data, name), split.targets, split.depth, strict=True):
            value, dependency_depth, tree_depth = reference(list(tokens))
            assert data.output_vocab.tokens[target] == str(value), tokens
            assert dependency_depth == depth, tokens
            assert dependency_depth <= tree_depth <= max_tree[name], tokens
            deeper_than_dependency += tree_depth > dependency_depth
        if name == "train":  # unselected branches deeper than the selected ones do occur
            assert deeper_than_dependency > 100


def test_depth_ranges_and_balance(data: TaskData) -> None:
    counts = {name: Counter(split.depth.tolist()) for name, split in data.splits.items()}
    assert counts["train"] == {d: 400 for d in (1, 2, 3, 4, 5)}
    assert counts["valid_iid"] == {d: 20 for d in (1, 2, 3, 4, 5)}
    assert counts["valid_ood"] == {6: 100}
    assert counts["test_ood"] == {7: 100}


def test_lengths_and_distinct_splits(data: TaskData) -> None:
    check_lengths_and_distinct_splits(data, token_lists, max_length=50)


def test_config_lists_and_limits(no_cache: None) -> None:
    data = build_listops(
        ListOpsConfig(**SMALL, test_ood_depths=[7, 8], max_args=3, max_length=40, train_depths=[2, 3]), seed=1
    )
    assert Counter(data.splits["test_ood"].depth.tolist()) == {7: 50, 8: 50}
    assert Counter(data.splits["train"].depth.tolist()) == {2: 1000, 3: 1000}
    for name in data.splits:
        for tokens in token_lists(data, name):
            assert len(tokens) <= 40
            # at most 3 arguments: count the direct children of every operation
            stack: list[int] = []
            for token in tokens:
                if token == "]":
                    assert 2 <= stack.pop() <= 3
                if stack and token != "]":
                    stack[-1] += 1
                if token in OPS:
                    stack.append(0)


def test_vectorised_evaluation_matches_reference_on_unconditioned_trees() -> None:
    """Random trees straight from the sampler (no depth conditioning, so many ties)."""
    generator = listops._Generator(ListOpsConfig(**SMALL), np.random.default_rng(0))
    roots = generator.random_nodes(3000, 4)
    tokens, lengths = generator.forest.serialize(roots)
    vocab = ("<pad>", *listops.INPUT_TOKENS)
    start = 0
    for root, length in zip(roots, lengths.tolist(), strict=True):
        example = [vocab[t] for t in tokens[start : start + length]]
        start += length
        value, dependency_depth, _ = reference(example)
        assert (generator.forest.value[root], generator.forest.dep[root]) == (value, dependency_depth)


def test_deterministic_per_seed(no_cache: None, data: TaskData) -> None:
    check_deterministic_per_seed(data, lambda seed: build_listops(ListOpsConfig(**SMALL), seed), token_lists)


def test_cache_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    check_cache_round_trip("listops", SMALL, token_lists, monkeypatch)


@pytest.mark.parametrize(
    "overrides",
    [
        {"n_train": 0},
        {"n_valid_ood": 0},
        {"train_depths": []},
        {"train_depths": [0, 1]},
        {"train_depths": [2, 2]},
        {"test_ood_depths": [5]},
        {"valid_ood_depths": [7]},
        {"max_args": 1},
        {"p_op": -0.1},
        {"max_length": 21},
        {"max_depth": 3},
    ],
)
def test_bad_config_is_one_line_user_error(overrides: dict[str, object]) -> None:
    check_bad_config_is_one_line_user_error("listops", overrides)


@pytest.mark.parametrize("max_length", [22, 23])
def test_a_max_length_that_barely_fits_is_a_user_error_not_a_crash(no_cache: None, max_length: int) -> None:
    """Near the shortest possible depth-7 example, whole generator batches hold no example that fits; that
    must end in the one-line 'could not generate' error (it raised a ValueError from zip)."""
    with pytest.raises(
        UserError, match="could not generate 100 distinct ListOps examples of dependency depth 7"
    ):
        build_listops(ListOpsConfig(**SMALL, max_length=max_length), seed=0)
