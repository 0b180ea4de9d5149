"""Tests for the compositional table lookup task (thesis 5.2.1, D.3.2).

References here are written independently of the module: symbols and function names are spelled out,
and targets are recomputed by a plain step-by-step loop over the decoded tokens.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.tasks import ctl
from recombine.tasks.base import TaskData
from recombine.tasks.ctl import CTLConfig, build_ctl, evaluate_ctl

SYMBOLS = ["000", "001", "010", "011", "100", "101", "110", "111"]
LETTERS = list("abcdefghi")


@pytest.fixture(scope="module")
def no_cache() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECOMBINE_NO_CACHE", "1")
        yield


@pytest.fixture(scope="module")
def forward(no_cache: None) -> TaskData:
    return build_ctl(CTLConfig(), seed=0)


@pytest.fixture(scope="module")
def backward(no_cache: None) -> TaskData:
    return build_ctl(CTLConfig(direction="backward"), seed=0)


def token_tuples(data: TaskData, split: str) -> list[tuple[str, ...]]:
    return [tuple(data.input_vocab.decode(x)) for x in data.splits[split].inputs]


def naive_target(tokens: tuple[str, ...], table: list[list[int]], direction: str) -> str:
    if direction == "forward":  # "101 d a b" = b(a(d(101)))
        start, applied = tokens[0], tokens[1:]
    else:  # "b a d 101" = b(a(d(101)))
        start, applied = tokens[-1], tokens[-2::-1]
    value = SYMBOLS.index(start)
    for letter in applied:
        value = table[LETTERS.index(letter)][value]
    return SYMBOLS[value]


def test_vocabularies_and_kind(forward: TaskData) -> None:
    assert forward.kind == "classify"
    assert set(forward.splits) == {"train", "valid_iid", "valid_ood", "test_ood"}
    assert list(forward.input_vocab.tokens[1:]) == SYMBOLS + LETTERS
    assert list(forward.output_vocab.tokens[1:]) == SYMBOLS
    assert forward.metadata["direction"] == "forward"


def test_split_lengths(forward: TaskData) -> None:
    splits = forward.splits
    assert set(splits["train"].depth.tolist()) == {1, 2, 3, 4, 5}
    assert set(splits["valid_iid"].depth.tolist()) <= {1, 2, 3, 4, 5}
    assert set(splits["valid_ood"].depth.tolist()) == {6, 7, 8}
    assert set(splits["test_ood"].depth.tolist()) == {9, 10}
    for name, split in splits.items():
        # depth = number of functions = tokens - 1 (no length-0 identity examples)
        assert [len(x) - 1 for x in split.inputs] == split.depth.tolist(), name
        assert split.depth.min() >= 1


def test_split_sizes_follow_config(forward: TaskData, no_cache: None) -> None:
    names = ("train", "valid_iid", "valid_ood", "test_ood")
    assert [len(forward.splits[s]) for s in names] == [53704, 2000, 2000, 2000]
    small = build_ctl(CTLConfig(n_train=1500, n_valid_iid=100, n_valid_ood=90, n_test_ood=50), seed=0)
    assert [len(small.splits[s]) for s in names] == [1500, 100, 90, 50]
    # below the caps (648 of length 2), the train split is balanced over lengths 2..5 (length 1: all 72)
    counts = Counter(small.splits["train"].depth.tolist())
    assert counts[1] == 72
    assert max(counts[n] for n in range(2, 6)) - min(counts[n] for n in range(2, 6)) <= 2


def test_all_single_applications_in_train(forward: TaskData) -> None:
    train = token_tuples(forward, "train")
    singles = {t for t in train if len(t) == 2}
    assert singles == {(s, f) for s, f in itertools.product(SYMBOLS, LETTERS)}
    assert len(singles) == 72


def test_no_duplicates_and_no_leaks(forward: TaskData) -> None:
    seqs = {name: token_tuples(forward, name) for name in forward.splits}
    for name, items in seqs.items():
        assert len(set(items)) == len(items), f"duplicates in {name}"
    train = set(seqs["train"])
    for name in ("valid_iid", "valid_ood", "test_ood"):
        assert not train & set(seqs[name]), f"{name} overlaps train"
    assert not set(seqs["valid_ood"]) & set(seqs["test_ood"])


def test_functions_are_bijections(forward: TaskData) -> None:
    table = forward.metadata["functions"]
    assert len(table) == 9
    for row in table:
        assert sorted(row) == list(range(8))


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_targets_match_naive_evaluation(direction: str, forward: TaskData, backward: TaskData) -> None:
    data = forward if direction == "forward" else backward
    table = data.metadata["functions"]
    for name, split in data.splits.items():
        for tokens, target in zip(token_tuples(data, name), split.targets.tolist(), strict=True):
            assert data.output_vocab.tokens[target] == naive_target(tokens, table, direction), (name, tokens)


def test_evaluate_ctl_helper_order() -> None:
    table = [list(np.roll(np.arange(8), k + 1)) for k in range(9)]  # f_k(x) = x - (k + 1) mod 8
    table[3] = [7 - x for x in range(8)]  # d(x) = 7 - x
    # "101 d a b" = b(a(d(101))): d(5) = 2, a(2) = 1, b(1) = 7
    assert evaluate_ctl("101", ["d", "a", "b"], table) == "111"
    # the other order gives a different answer: d(a(b(5))) = d(2) = 5
    assert evaluate_ctl("101", ["b", "a", "d"], table) == "101"


def test_backward_is_reversed_forward(forward: TaskData, backward: TaskData) -> None:
    assert forward.metadata["functions"] == backward.metadata["functions"]
    for name in forward.splits:
        fwd, bwd = forward.splits[name], backward.splits[name]
        assert len(fwd) == len(bwd)
        for a, b in zip(fwd.inputs, bwd.inputs, strict=True):
            assert a[::-1].tolist() == b.tolist()
        assert np.array_equal(fwd.targets, bwd.targets)
        assert np.array_equal(fwd.depth, bwd.depth)
    # the backward input starts with the last function and ends with the symbol
    assert token_tuples(backward, "train")[0][-1] in SYMBOLS


def test_train_roughly_depth_balanced(forward: TaskData) -> None:
    train = Counter(forward.splits["train"].depth.tolist())
    valid = Counter(forward.splits["valid_iid"].depth.tolist())
    # a length is either exhausted (every distinct sequence is in train or valid_iid: lengths 1-3
    # have 72, 648 and 5832) or holds about as many examples as the largest length
    top = max(train.values())
    for length in range(1, 6):
        exhausted = train[length] + valid[length] == 8 * 9**length
        assert exhausted or train[length] >= 0.9 * top, (length, train)
    assert train[2] + valid[2] == 648 and train[3] + valid[3] == 5832
    assert abs(train[4] - train[5]) <= 0.1 * top
    ood = Counter(forward.splits["valid_ood"].depth.tolist())
    assert max(ood.values()) - min(ood.values()) <= 1
    test = Counter(forward.splits["test_ood"].depth.tolist())
    assert test[9] == test[10] == 1000


def test_valid_iid_same_pool_as_train(forward: TaskData) -> None:
    train = Counter(forward.splits["train"].depth.tolist())
    valid = Counter(forward.splits["valid_iid"].depth.tolist())
    assert valid[1] == 0  # every single application is in train
    n_pool = sum(train[n] for n in range(2, 6))
    for length in range(2, 6):  # length proportions match the train pool (stratified split)
        assert abs(valid[length] / 2000 - train[length] / n_pool) < 0.01


def test_determinism(forward: TaskData, no_cache: None) -> None:
    again = build_ctl(CTLConfig(), seed=0)
    assert again.metadata == forward.metadata
    for name in forward.splits:
        a, b = forward.splits[name], again.splits[name]
        assert all(np.array_equal(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))
        assert np.array_equal(a.targets, b.targets) and np.array_equal(a.depth, b.depth)
    other = build_ctl(CTLConfig(n_train=1000, n_valid_iid=10, n_valid_ood=10, n_test_ood=10), seed=1)
    assert other.metadata["functions"] != forward.metadata["functions"]


def test_cache_round_trip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECOMBINE_NO_CACHE", raising=False)
    monkeypatch.setenv("RECOMBINE_CACHE", str(tmp_path))
    config = CTLConfig(n_train=2000, n_valid_iid=50, n_valid_ood=40, n_test_ood=30)
    first = build_ctl(config, seed=3)
    assert len(list(tmp_path.glob("ctl-*.pkl"))) == 1

    def must_not_rebuild(*args: object) -> TaskData:
        raise AssertionError("cache miss")

    monkeypatch.setattr(ctl, "_generate", must_not_rebuild)
    second = build_ctl(config, seed=3)
    assert second.metadata == first.metadata
    for name in first.splits:
        assert [x.tolist() for x in first.splits[name].inputs] == [
            x.tolist() for x in second.splits[name].inputs
        ]
        assert np.array_equal(first.splits[name].targets, second.splits[name].targets)
    with pytest.raises(AssertionError, match="cache miss"):  # another seed is another entry
        build_ctl(config, seed=4)


def test_bad_config_is_user_error() -> None:
    with pytest.raises(UserError, match="backward, forward|forward, backward"):
        build_ctl(CTLConfig(direction="sideways"), seed=0)
    with pytest.raises(UserError, match="overlap"):
        build_ctl(CTLConfig(valid_ood_lengths=[5, 6]), seed=0)
    with pytest.raises(UserError, match="single applications"):
        build_ctl(CTLConfig(n_train=50), seed=0)
    with pytest.raises(UserError, match="distinct"):
        build_ctl(CTLConfig(train_max_length=2, n_train=2000), seed=0)


def test_registered() -> None:
    from recombine.tasks import TASKS

    entry = TASKS.get("ctl")
    assert entry.config_class is CTLConfig
    assert entry.factory is build_ctl
