"""Tests for CTL++ (thesis ch. 6, sec. 6.2; appendix E.1.2).

The references are written independently of the module: the thesis's sampling rules for 'A', 'R' and 'S'
are re-stated below as plain loops over the decoded tokens (using only the group membership and, for 'S',
the symbol sets the task reports), targets are recomputed step by step, and small configurations are
enumerated by brute force and compared with closed-form counts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from recombine import tasks
from recombine.errors import UserError
from recombine.tasks import ctlpp
from recombine.tasks.base import TaskData
from recombine.tasks.ctlpp import CTLPPConfig, build_ctlpp

SMALL_SIZES = {"n_train": 600, "n_test_iid": 50, "n_valid_ood": 40, "n_test_ood": 60}


@pytest.fixture(scope="module", autouse=True)
def no_cache() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECOMBINE_NO_CACHE", "1")
        yield


def small_config(variant: str, **overrides: object) -> CTLPPConfig:
    base: dict[str, object] = {"variant": variant, "n_symbols": 4, "n_functions": 8, "max_length": 4}
    if variant == "S":
        base |= {"n_functions": 12, "shared_functions": 4, "shared_symbols": 2}
    return CTLPPConfig(**(base | SMALL_SIZES | overrides))  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["A", "R", "S"])
def small(request: pytest.FixtureRequest) -> TaskData:
    return build_ctlpp(small_config(request.param), seed=0)


@pytest.fixture(scope="module")
def thesis_a() -> TaskData:
    return build_ctlpp(CTLPPConfig(variant="A"), seed=0)


# ---- independent reference: the thesis's rules, token by token ----------------------------------------


def problems(data: TaskData, split: str, limit: int | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """(start symbol, functions in application order) of the first ``limit`` examples.

    Backward presentation: "c b a 3" is start symbol 3, then a, b, c."""
    out = []
    for ids in data.splits[split].inputs[:limit]:
        tokens = data.input_vocab.decode(ids)
        if data.metadata["direction"] == "backward":
            out.append((tokens[-1], tuple(reversed(tokens[:-1]))))
        else:
            out.append((tokens[0], tuple(tokens[1:])))
    return out


def apply_all(data: TaskData, start: str, functions: tuple[str, ...]) -> list[str]:
    """The symbols before each function and the final one: [x, f1(x), f2(f1(x)), ...]."""
    table, names, symbols = (
        data.metadata["functions"],
        data.metadata["function_names"],
        data.metadata["symbols"],
    )
    trace = [start]
    for name in functions:
        trace.append(symbols[table[names.index(name)][symbols.index(trace[-1])]])
    return trace


def group_of(data: TaskData) -> dict[str, str]:
    return {f: g for g, members in data.metadata["groups"].items() for f in members}


def follows_rules(data: TaskData, start: str, functions: tuple[str, ...], graph: str) -> bool:
    """Thesis 6.2: does the example follow the training ("train") or the OOD test ("ood") sampling graph?"""
    variant, group = data.metadata["variant"], group_of(data)
    groups = [group[f] for f in functions]
    if variant in ("A", "R"):
        if len(functions) == 1:
            return graph == "train"  # single applications belong to train only
        same = [a == b for a, b in itertools.pairwise(groups)]
        within_one_group = all(same)
        alternating = not any(same)
        if variant == "A":
            return alternating if graph == "train" else within_one_group
        return within_one_group if graph == "train" else alternating
    # 'S': consecutive pairs (f_i, f_{i+1}), f_i from G_p1
    if len(functions) % 2:
        return False
    trace = apply_all(data, start, functions)
    sets = data.metadata["shared_symbol_sets"]
    for i in range(0, len(functions), 2):
        first, second = groups[i], groups[i + 1]
        if first not in ("a1", "b1"):
            return False
        path, other = first[0], "b" if first[0] == "a" else "a"
        if graph == "ood":
            if second != f"{other}2":
                return False
        elif second == "o":
            if trace[i + 1] not in sets[functions[i + 1]][path]:  # output of f_i must be in S_p^f
                return False
        elif second != f"{path}2":
            return False
    return True


def has_test_only_transition(data: TaskData, start: str, functions: tuple[str, ...]) -> bool:
    """A transition the thesis reserves for testing: A same group, R cross group, S p1 -> other path's 2,
    or p1 -> f in G_o with the incoming symbol outside S_p^f."""
    variant, group = data.metadata["variant"], group_of(data)
    trace = apply_all(data, start, functions)
    for i in range(len(functions) - 1):
        g1, g2 = group[functions[i]], group[functions[i + 1]]
        if variant == "A" and g1 == g2:
            return True
        if variant == "R" and g1 != g2:
            return True
        if variant == "S" and g1 in ("a1", "b1"):
            path = g1[0]
            if g2 in ("a2", "b2") and g2[0] != path:
                return True
            if g2 == "o" and trace[i + 1] not in data.metadata["shared_symbol_sets"][functions[i + 1]][path]:
                return True
    return False


def brute_force(data: TaskData, length: int, graph: str) -> set[tuple[str, tuple[str, ...]]]:
    symbols, names = data.metadata["symbols"], data.metadata["function_names"]
    return {
        (s, fs)
        for s in symbols
        for fs in itertools.product(names, repeat=length)
        if follows_rules(data, s, fs, graph)
    }


# ---- tests --------------------------------------------------------------------------------------------


def test_targets_match_naive_evaluation(small: TaskData) -> None:
    for name, split in small.splits.items():
        for (start, functions), target in zip(problems(small, name), split.targets.tolist(), strict=True):
            assert small.output_vocab.tokens[target] == apply_all(small, start, functions)[-1], (
                name,
                functions,
            )


def test_forward_presentation_targets() -> None:
    data = build_ctlpp(small_config("R", direction="forward"), seed=2)
    assert data.input_vocab.decode(data.splits["train"].inputs[0])[0] in data.metadata["symbols"]
    for name, split in data.splits.items():
        for (start, functions), target in zip(problems(data, name), split.targets.tolist(), strict=True):
            assert data.output_vocab.tokens[target] == apply_all(data, start, functions)[-1]


def test_evaluation_order_hand_computed() -> None:
    data = build_ctlpp(small_config("A"), seed=0)
    table = [[1, 2, 3, 0]] + [[3, 2, 1, 0]] + [list(range(4))] * 6  # a(x) = x + 1 mod 4, b(x) = 3 - x
    data.metadata["functions"] = table
    assert apply_all(data, "1", ("a", "b"))[-1] == "1"  # "b a 1" = b(a(1)) = b(2) = 1
    assert apply_all(data, "1", ("b", "a"))[-1] == "3"  # "a b 1" = a(b(1)) = a(2) = 3


def test_splits_follow_their_sampling_graphs(small: TaskData) -> None:
    for name, graph in (("train", "train"), ("test_iid", "train"), ("valid_ood", "ood"), ("test_ood", "ood")):
        for start, functions in problems(small, name):
            assert follows_rules(small, start, functions, graph), (name, start, functions)


def test_training_never_contains_a_test_only_transition(small: TaskData) -> None:
    for name in ("train", "test_iid"):
        assert not any(has_test_only_transition(small, *p) for p in problems(small, name)), name
    for name in ("valid_ood", "test_ood"):  # every OOD example has one (all have >= 2 functions)
        assert all(has_test_only_transition(small, *p) for p in problems(small, name)), name


def test_splits_disjoint_without_duplicates(small: TaskData) -> None:
    seen: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for name in small.splits:
        items = problems(small, name)
        assert len(set(items)) == len(items), f"duplicates in {name}"
        seen[name] = set(items)
    for a, b in itertools.combinations(seen, 2):
        assert not seen[a] & seen[b], (a, b)


def test_depth_is_number_of_functions(small: TaskData) -> None:
    for name, split in small.splits.items():
        assert [len(x) - 1 for x in split.inputs] == split.depth.tolist(), name
    depths = set(small.splits["train"].depth.tolist())
    ood = set(small.splits["test_ood"].depth.tolist()) | set(small.splits["valid_ood"].depth.tolist())
    if small.metadata["variant"] == "S":  # pairs only: even lengths, no single applications
        assert depths == ood == {2, 4}
    else:
        assert depths == {1, 2, 3, 4} and ood == {2, 3, 4}


def test_groups_as_the_thesis_defines(small: TaskData) -> None:
    groups = small.metadata["groups"]
    names = small.metadata["function_names"]
    members = [f for g in groups.values() for f in g]
    assert sorted(members) == sorted(names)  # disjoint and covering
    if small.metadata["variant"] in ("A", "R"):
        assert set(groups) == {"a", "b"} and len(groups["a"]) == len(groups["b"]) == 4
        return
    assert set(groups) == {"a1", "a2", "b1", "b2", "o"}
    assert len(groups["o"]) == 4
    assert [len(groups[g]) for g in ("a1", "a2", "b1", "b2")] == [2, 2, 2, 2]
    sets = small.metadata["shared_symbol_sets"]
    assert set(sets) == set(groups["o"])
    all_symbols = set(small.metadata["symbols"])
    shared_union: set[str] = set()
    for f in groups["o"]:
        on_a, on_b = set(sets[f]["a"]), set(sets[f]["b"])
        assert len(on_a & on_b) == 2  # shared_symbols
        assert on_a | on_b == all_symbols
        shared_union |= on_a & on_b
    assert shared_union == all_symbols  # "the union of shared symbols ... cover all possible symbols"


def test_all_single_applications_in_train() -> None:
    for variant in ("A", "R"):
        data = build_ctlpp(small_config(variant), seed=1)
        singles = {p for p in problems(data, "train") if len(p[1]) == 1}
        assert singles == {
            (s, (f,)) for s in data.metadata["symbols"] for f in data.metadata["function_names"]
        }


def test_without_single_applications_train_starts_at_length_2() -> None:
    for variant in ("A", "R"):
        with_singles = build_ctlpp(small_config(variant), seed=1)
        without = build_ctlpp(small_config(variant, single_applications=False), seed=1)
        lengths = {len(functions) for _, functions in problems(without, "train")}
        assert min(lengths) == 2 and max(lengths) == 4  # small_config: max_length 4
        assert without.metadata["train_lengths"] == [2, 3, 4]
        assert len(without.splits["train"].targets) == len(with_singles.splits["train"].targets)
        for split in ("valid_ood", "test_ood"):  # the OOD splits do not depend on the training set
            assert problems(without, split) == problems(with_singles, split)


@pytest.mark.parametrize("variant", ["A", "R"])
def test_exhaustive_pairs_match_brute_force_a_r(variant: str) -> None:
    # 4 symbols, groups of 4: 4 * 8 * 4 = 128 pairs in either graph; max_length=2 leaves only pairs
    config = small_config(
        variant, max_length=2, n_train=32 + 128 - 8, n_test_iid=8, n_valid_ood=28, n_test_ood=100
    )
    data = build_ctlpp(config, seed=0)
    pairs = {p for p in problems(data, "train") if len(p[1]) == 2} | set(problems(data, "test_iid"))
    assert pairs == brute_force(data, 2, "train") and len(pairs) == 128
    assert set(problems(data, "valid_ood")) | set(problems(data, "test_ood")) == brute_force(data, 2, "ood")
    with pytest.raises(UserError, match="only 128 distinct"):
        build_ctlpp(small_config(variant, max_length=2, n_train=32 + 128 - 7, n_test_iid=8), seed=0)


@pytest.mark.parametrize(("shared_functions", "shared_symbols"), [(0, 1), (4, 1), (4, 2), (4, 4), (8, 3)])
def test_s_parameters_control_the_training_pairs(shared_functions: int, shared_symbols: int) -> None:
    """Variant 'S' with stage groups of 2 functions and 4 symbols: the number of distinct training pairs is
    sum over paths p, f1 in G_p1, x of |G_p2| + #{f in G_o : f1(x) in S_p^f} = |G1| (2 n |G2| + |G_o| (n + k))
    (f1 is a bijection, |S_a^f| + |S_b^f| = n + k), and the OOD graph has 2 |G1| n |G2| = 32 pairs."""
    n, g = 4, 2
    expected = g * (2 * n * g + shared_functions * (n + shared_symbols))
    sizes = {"n_train": expected - 5, "n_test_iid": 5, "n_valid_ood": 12, "n_test_ood": 20}
    config = small_config(
        "S", n_functions=4 * g + shared_functions, shared_functions=shared_functions,
        shared_symbols=shared_symbols, max_length=2, **sizes,
    )  # fmt: skip
    data = build_ctlpp(config, seed=3)
    train_pairs = set(problems(data, "train")) | set(problems(data, "test_iid"))
    assert len(train_pairs) == expected
    assert train_pairs == brute_force(data, 2, "train")
    assert set(problems(data, "valid_ood")) | set(problems(data, "test_ood")) == brute_force(data, 2, "ood")
    # G_o functions are used in train exactly with the symbols S_p^f allows (all of them, exhaustively)
    group = group_of(data)
    seen: dict[tuple[str, str], set[str]] = {}
    for start, (f1, f2) in train_pairs:
        if group[f2] == "o":
            seen.setdefault((f2, group[f1][0]), set()).add(apply_all(data, start, (f1,))[-1])
    sets = data.metadata.get("shared_symbol_sets", {})
    assert seen == {(f, p): set(sets[f][p]) for f in data.metadata["groups"]["o"] for p in "ab"}
    with pytest.raises(UserError, match=f"only {expected} distinct"):
        build_ctlpp(CTLPPConfig(**(vars(config) | {"n_train": expected - 4})), seed=3)


def test_thesis_scale_variant_a(thesis_a: TaskData) -> None:
    splits = thesis_a.splits
    assert [len(splits[s]) for s in ("train", "test_iid", "valid_ood", "test_ood")] == [
        300000,
        1000,
        1000,
        1000,
    ]
    assert list(thesis_a.output_vocab.tokens[1:]) == [str(i) for i in range(8)]
    assert len(thesis_a.input_vocab) == 1 + 8 + 32
    assert thesis_a.spec.n_classes == 9 and thesis_a.spec.max_input_length == 7
    train = Counter(splits["train"].depth.tolist())
    iid = Counter(splits["test_iid"].depth.tolist())
    assert train[1] == 8 * 32  # every single application
    # lengths 2 and 3 are used up (8 * 32 * 16 and 8 * 32 * 16**2 alternating sequences) ...
    assert train[2] + iid[2] == 8 * 32 * 16 and train[3] + iid[3] == 8 * 32 * 16**2
    # ... and lengths 4-6 share the rest equally (E.1.2: balanced over lengths where possible)
    assert max(train[n] for n in (4, 5, 6)) - min(train[n] for n in (4, 5, 6)) <= 1
    for name in ("valid_ood", "test_ood"):
        assert Counter(splits[name].depth.tolist()) == dict.fromkeys(range(2, 7), 200)
    assert all(follows_rules(thesis_a, s, fs, "train") for s, fs in problems(thesis_a, "train", limit=3000))
    assert all(follows_rules(thesis_a, s, fs, "ood") for s, fs in problems(thesis_a, "test_ood"))


def test_thesis_scale_no_duplicates(thesis_a: TaskData) -> None:
    for name, split in thesis_a.splits.items():
        for depth in set(split.depth.tolist()):
            rows = np.stack(
                [x for x, d in zip(split.inputs, split.depth.tolist(), strict=True) if d == depth]
            )
            assert len(np.unique(rows, axis=0)) == len(rows), (name, depth)


@pytest.mark.parametrize("variant", ["A", "S"])
def test_random_walk_sampling_path(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # long lengths are sampled by random walks with duplicate rejection instead of exact enumeration
    monkeypatch.setattr(ctlpp, "_ENUMERATE_LIMIT", 0)
    data = build_ctlpp(small_config(variant), seed=4)
    for name, graph in (("train", "train"), ("test_iid", "train"), ("valid_ood", "ood"), ("test_ood", "ood")):
        items = problems(data, name)
        assert len(set(items)) == len(items) == len(data.splits[name]), name
        assert all(follows_rules(data, start, functions, graph) for start, functions in items), name


def test_step_wise_uniform_sampling(thesis_a: TaskData) -> None:
    # 'A' train, lengths 4-6: each function uniform among the 16 allowed, start symbol uniform.
    # Backward presentation: the last token is the start symbol, the one before it the first function.
    split = thesis_a.splits["train"]
    long = [ids for ids, depth in zip(split.inputs, split.depth.tolist(), strict=True) if depth >= 4]
    first = Counter(thesis_a.input_vocab.tokens[ids[-2]] for ids in long)
    starts = Counter(thesis_a.input_vocab.tokens[ids[-1]] for ids in long)
    assert set(starts) == set(thesis_a.metadata["symbols"])
    assert set(first) == set(thesis_a.metadata["function_names"])
    expected_first, expected_start = len(long) / 32, len(long) / 8
    assert all(abs(c - expected_first) < 5 * expected_first**0.5 for c in first.values())
    assert all(abs(c - expected_start) < 5 * expected_start**0.5 for c in starts.values())


def test_determinism_and_direction() -> None:
    config = small_config("S")
    first, again = build_ctlpp(config, seed=5), build_ctlpp(config, seed=5)
    assert first.metadata == again.metadata
    for name in first.splits:
        a, b = first.splits[name], again.splits[name]
        assert [x.tolist() for x in a.inputs] == [x.tolist() for x in b.inputs]
        assert np.array_equal(a.targets, b.targets) and np.array_equal(a.depth, b.depth)
    other = build_ctlpp(config, seed=6)
    assert other.metadata["functions"] != first.metadata["functions"]
    forward = build_ctlpp(small_config("S", direction="forward"), seed=5)
    for name in first.splits:  # same problems, reversed presentation
        assert [x[::-1].tolist() for x in forward.splits[name].inputs] == [
            x.tolist() for x in first.splits[name].inputs
        ]


def test_cache_round_trip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECOMBINE_NO_CACHE", raising=False)
    monkeypatch.setenv("RECOMBINE_CACHE", str(tmp_path))
    config = small_config("R")
    first = build_ctlpp(config, seed=3)
    assert len(list(tmp_path.glob("ctlpp-*.pkl"))) == 1

    def must_not_rebuild(*args: object) -> TaskData:
        raise AssertionError("cache miss")

    monkeypatch.setattr(ctlpp, "_generate", must_not_rebuild)
    second = build_ctlpp(config, seed=3)
    assert second.metadata == first.metadata
    for name in first.splits:
        assert [x.tolist() for x in first.splits[name].inputs] == [
            x.tolist() for x in second.splits[name].inputs
        ]
        assert np.array_equal(first.splits[name].targets, second.splits[name].targets)
    with pytest.raises(AssertionError, match="cache miss"):  # another variant is another entry
        build_ctlpp(small_config("A"), seed=3)


def test_bad_config_is_user_error() -> None:
    with pytest.raises(UserError, match="A, R, S"):
        CTLPPConfig(variant="B")
    with pytest.raises(UserError, match="backward, forward"):
        CTLPPConfig(direction="sideways")
    with pytest.raises(UserError, match="cover all 8 symbols"):
        CTLPPConfig(variant="S", shared_functions=2, shared_symbols=3)
    with pytest.raises(UserError, match="shared_functions"):
        CTLPPConfig(variant="S", shared_functions=30)
    with pytest.raises(UserError, match="shared_symbols"):
        CTLPPConfig(variant="S", shared_symbols=9)
    with pytest.raises(UserError, match="single applications"):
        CTLPPConfig(variant="R", n_train=256)
    with pytest.raises(UserError, match="max_length"):
        CTLPPConfig(max_length=1)


def test_registered_and_built_through_the_registry() -> None:
    entry = tasks.TASKS.get("ctlpp")
    assert entry.config_class is CTLPPConfig and entry.factory is build_ctlpp
    data = tasks.get("ctlpp", seed=0, **(dict(vars(small_config("R"))) | {"variant": "R"}))
    assert data.name == "ctlpp" and data.kind == "classify" and data.selection_split == "valid_ood"
    with pytest.raises(UserError, match="A, R, S"):
        tasks.get("ctlpp", variant="X")
