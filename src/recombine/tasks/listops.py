"""ListOps with splits by *dependency depth* (Csordás PhD thesis, sec. 5.2.3 and appendix D.3.2).

An example is a nested list operation in prefix notation, e.g. ``[MIN 2 [MAX 3 4 ] 1 ]`` -> 1, over the
digits 0-9 with four operators: ``MIN``, ``MAX``, ``MED`` (median, then floor: ``[MED 1 4]`` = 2) and
``SM`` (sum modulo 10). Every operation has 2..``max_args`` (5) arguments; an argument is another
operation with probability ``p_op`` (0.3). Examples are at most ``max_length`` (50) tokens. The model
classifies the result (a digit).

Tokens follow the official ListOps (Nangia and Bowman, 2018) and the thesis's code: an operator and its
opening bracket are *one* token (``[MIN``), ``]`` closes, digits are tokens. The input vocabulary is
``0``..``9``, ``[MIN``, ``[MAX``, ``[MED``, ``[SM``, ``]``.

Dependency depth (D.3.2). MIN and MAX select one operand, MED one (odd count) or two (even count),
SM needs all of them. Pruning every branch that no operation selects and measuring the depth (in
operations) of what is left gives the dependency depth; splits are disjoint and balanced in it, so a
depth-K example needs K levels of computation and a model cannot get it right by ignoring deep branches.

*Ties* (an operand's value occurs more than once among the operands): MIN/MAX select, among the operands
holding the result, the one with the *smallest* dependency depth; MED selects the shallowest operand
holding the middle value (odd count), or the shallowest holding each of the two middle values (two
different operands when they are equal). A deeper operand that merely ties with a shallower one is not
needed: a solver that ignored it would still be right. The dependency depth is therefore the depth that
*must* be computed, which is what the thesis asks for ("a depth-K sample effectively requires computation
until depth-K"). (The thesis's code takes the first operand in input order instead; that can count a deep
branch whose value is also available from a shallower one.)

Generation (our method; the thesis gives the parameters, not the sampler). An example of dependency depth
``D`` is grown bottom-up along a *spine*: start from a random digit; at level ``k = 1..D`` draw an
operator, a number of arguments and the spine's position among them, and fill the other positions with
random subtrees (the ``p_op`` process, capped so that the whole tree stays within the split's tree-depth
limit); the level is redrawn until the new node's dependency depth is exactly ``k``. An example longer
than ``max_length`` is rejected as a whole, as are duplicates. Each split draws the same number of
distinct examples for every depth it contains (rejection sampling per depth). The tree depth of an example
never exceeds the largest dependency depth of its split (5 for train), so deep *unselected* branches occur,
but never deeper than the split's depths. Everything is vectorised over batches of examples with numpy
(about 13 s for the 1M-example train set on one idle core; benchmarks/bench_listops_generation.py) and
cached as flat arrays.

Splits: ``train`` dependency depths 1-5 (``train_depths``; D.3.2 says "0-5 operations", but a ListOps
example always has an operation at its root, and Tab. 5.4 says 1-5), ``valid_iid`` drawn from the same
process and disjoint from ``train``, ``valid_ood`` depth 6, ``test_ood`` depth 7 (D.3.2; sec. 5.2.3 and
Tab. 5.4 say 7-8: set ``test_ood_depths=[7, 8]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from recombine.errors import UserError
from recombine.tasks import TASKS
from recombine.tasks.base import ClassificationSplit, TaskData, Vocabulary
from recombine.tasks.cache import cached
from recombine.tasks.depth_splits import (
    STREAM_IDS,
    cache_config,
    check_depth_groups,
    check_max_length,
    check_split_sizes,
    classification_split,
    depth_balanced_splits,
)

#: Bump whenever generation changes, so cached tasks are rebuilt.
VERSION = 1

OPERATORS = ("MIN", "MAX", "MED", "SM")
DIGITS = tuple(str(d) for d in range(10))
OPEN_TOKENS = tuple(f"[{op}" for op in OPERATORS)
CLOSE_TOKEN = "]"
INPUT_TOKENS = (*DIGITS, *OPEN_TOKENS, CLOSE_TOKEN)

# Token ids in the input vocabulary (<pad> = 0): digits 1..10, "[MIN".."[SM" 11..14, "]" 15.
_DIGIT_ID = 1
_OPEN_ID = 1 + len(DIGITS)
_CLOSE_ID = _OPEN_ID + len(OPERATORS)
_MIN, _MAX, _MED, _SM = range(4)

# Child codes in the generator's node table: -1 = no argument, 0..9 = a digit, 10 + i = node i.
_PAD, _NODE = -1, 10
_LEVEL_TRIES = 64  # redraws of one spine level before the example is dropped


@dataclass
class ListOpsConfig:
    """ListOps with dependency-depth splits (thesis 5.2.3, D.3.2); defaults follow the thesis.

    ``n_train`` defaults to the thesis's 1M (generated in ~13 s, then loaded from the cache in ~1 s)."""

    train_depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    valid_ood_depths: list[int] = field(default_factory=lambda: [6])
    test_ood_depths: list[int] = field(default_factory=lambda: [7])  # Tab. 5.4: [7, 8]
    max_args: int = 5
    p_op: float = 0.3  # probability that an argument is another operation
    max_length: int = 50  # tokens
    n_train: int = 1_000_000
    n_valid_iid: int = 1000
    n_valid_ood: int = 1000
    n_test_ood: int = 1000

    def __post_init__(self) -> None:
        _validate(self)


# ---------------------------------------------------------------------------------------------------
# Reference semantics on token lists (readable; used for checks and by users).


def tokenize(text: str) -> list[str]:
    """``"[MIN 2 [MAX 3 4] 1]"`` -> ``["[MIN", "2", "[MAX", "3", "4", "]", "1", "]"]``."""
    tokens = re.findall(r"\[\s*[A-Z]+|\]|\d|\S", text)
    tokens = [re.sub(r"\s+", "", t) for t in tokens]
    for token in tokens:
        if token not in INPUT_TOKENS:
            raise UserError(f"unknown ListOps token {token!r} in {text!r}")
    return tokens


def evaluate(tokens: Sequence[str]) -> tuple[int, int]:
    """(value, dependency depth) of a ListOps expression given as tokens (thesis 5.2.3, D.3.2).

    Ties are resolved toward the shallowest operand (see the module docstring); a bare digit has
    dependency depth 0.
    """
    position = 0

    def parse() -> tuple[int, int]:
        nonlocal position
        token = tokens[position]
        position += 1
        if token in DIGITS:
            return int(token), 0
        if token not in OPEN_TOKENS:
            raise UserError(f"malformed ListOps expression near token {position}: {' '.join(tokens)}")
        op = OPEN_TOKENS.index(token)
        args: list[tuple[int, int]] = []
        while tokens[position] != CLOSE_TOKEN:
            args.append(parse())
        position += 1
        value, selected_depth = _select(op, args)
        return value, selected_depth + 1

    try:
        result = parse()
    except IndexError:
        raise UserError(f"unbalanced ListOps expression: {' '.join(tokens)}") from None
    if position != len(tokens):
        raise UserError(f"trailing tokens in ListOps expression: {' '.join(tokens)}")
    return result


def _select(op: int, args: list[tuple[int, int]]) -> tuple[int, int]:
    """Value of one operation and the dependency depth of the operands it selects (their maximum)."""
    values = [v for v, _ in args]
    if op == _SM:
        return sum(values) % 10, max(d for _, d in args)

    def shallowest(value: int, skip: int = 0) -> int:
        return sorted(d for v, d in args if v == value)[skip]

    if op in (_MIN, _MAX):
        value = min(values) if op == _MIN else max(values)
        return value, shallowest(value)
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle], shallowest(ordered[middle])
    low, high = ordered[middle - 1], ordered[middle]
    depth = shallowest(low, 1) if low == high else max(shallowest(low), shallowest(high))
    return (low + high) // 2, depth


# ---------------------------------------------------------------------------------------------------
# Vectorised generator.


class _Forest:
    """Operation nodes generated so far, as arrays: operator, child codes, value, dependency depth, length.

    A child code is -1 (no argument), a digit 0..9, or ``10 + i`` for node ``i``.
    """

    def __init__(self, max_args: int, capacity: int = 1 << 15) -> None:
        self.max_args = max_args
        self.size = 0
        self.op = np.zeros(capacity, dtype=np.int8)
        self.children = np.zeros((capacity, max_args), dtype=np.int32)
        self.value = np.zeros(capacity, dtype=np.int16)
        self.dep = np.zeros(capacity, dtype=np.int16)  # dependency depth
        self.length = np.zeros(capacity, dtype=np.int32)  # tokens

    def add(self, op: np.ndarray, children: np.ndarray) -> np.ndarray:
        """Append nodes (computing their value, dependency depth and length); return their ids."""
        count = len(op)
        if self.size + count > len(self.op):
            self._grow(self.size + count)
        valid = children != _PAD
        is_node = children >= _NODE
        index = np.where(is_node, children - _NODE, 0)
        child_value = np.where(is_node, self.value[index], children)
        child_dep = np.where(is_node, self.dep[index], 0)
        child_length = np.where(is_node, self.length[index], valid)
        value, selected = _evaluate_nodes(op, child_value, child_dep, valid)
        ids = np.arange(self.size, self.size + count)
        self.op[ids] = op
        self.children[ids] = children
        self.value[ids] = value
        self.dep[ids] = selected + 1
        self.length[ids] = 2 + child_length.sum(axis=1)
        self.size += count
        return ids

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * len(self.op))
        for name in ("op", "children", "value", "dep", "length"):
            old = getattr(self, name)
            new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def serialize(self, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of the trees at ``roots``, concatenated (uint8), and each tree's length."""
        lengths = self.length[roots].astype(np.int64)
        out = np.zeros(int(lengths.sum()), dtype=np.uint8)
        nodes, starts = roots, np.cumsum(lengths) - lengths
        while len(nodes):  # one tree level per pass; a node's tokens are "[OP", its arguments, "]"
            out[starts] = _OPEN_ID + self.op[nodes]
            out[starts + self.length[nodes] - 1] = _CLOSE_ID
            children = self.children[nodes]
            is_node = children >= _NODE
            is_digit = (children != _PAD) & ~is_node
            child_length = np.where(is_node, self.length[np.where(is_node, children - _NODE, 0)], is_digit)
            offsets = starts[:, None] + 1 + np.cumsum(child_length, axis=1) - child_length
            out[offsets[is_digit]] = _DIGIT_ID + children[is_digit]
            nodes, starts = children[is_node] - _NODE, offsets[is_node]
        return out, lengths


def _evaluate_nodes(
    op: np.ndarray, value: np.ndarray, dep: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`_select`: per row, the operation's value and its selected operands' depth.

    Operands are sorted by (value, dependency depth), so within a run of equal values the shallowest
    comes first; the selected operand of a value ``x`` is then at index ``#(operands < x)``.
    """
    rows = np.arange(len(op))
    n = valid.sum(axis=1)
    scale = int(dep.max(initial=0)) + 2
    keys = np.sort(np.where(valid, value * scale + dep, 10 * scale), axis=1)

    def first_at_least(x: np.ndarray) -> np.ndarray:  # sorted position of the shallowest operand == x
        return ((value < x[:, None]) & valid).sum(axis=1)

    def dep_at(position: np.ndarray) -> np.ndarray:
        return keys[rows, position] % scale

    v_min = keys[:, 0] // scale
    v_max = keys[rows, n - 1] // scale
    middle = n // 2
    low = keys[rows, np.maximum(middle - 1, 0)] // scale
    high = keys[rows, middle] // scale
    odd = n % 2 == 1
    v_med = np.where(odd, high, (low + high) // 2)
    low_first = first_at_least(low)
    d_med_even = np.where(
        low == high, dep_at(np.minimum(low_first + 1, n - 1)), np.maximum(dep_at(low_first), dep_at(middle))
    )
    d_med = np.where(odd, dep_at(first_at_least(high)), d_med_even)
    v_sum = np.where(valid, value, 0).sum(axis=1) % 10
    d_sum = np.where(valid, dep, 0).max(axis=1)
    result = np.choose(op, [v_min, v_max, v_med, v_sum])
    selected = np.choose(op, [dep_at(np.zeros_like(n)), dep_at(first_at_least(v_max)), d_med, d_sum])
    return result, selected


class _Generator:
    """Draws examples of one exact dependency depth (see the module docstring for the process)."""

    def __init__(self, config: ListOpsConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.rng = rng
        self.forest = _Forest(config.max_args)

    def random_nodes(self, count: int, height: int) -> np.ndarray:
        """``count`` operations of tree depth <= ``height`` (>= 1); each argument is an operation with
        probability ``p_op`` while the height allows it, else a digit."""
        rng, max_args = self.rng, self.config.max_args
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        n_args = rng.integers(2, max_args + 1, size=count)
        children = rng.integers(0, 10, size=(count, max_args)).astype(np.int32)
        valid = np.arange(max_args) < n_args[:, None]
        if height > 1:
            is_op = valid & (rng.random((count, max_args)) < self.config.p_op)
            children[is_op] = _NODE + self.random_nodes(int(is_op.sum()), height - 1)
        children[~valid] = _PAD
        return self.forest.add(rng.integers(0, len(OPERATORS), size=count).astype(np.int8), children)

    def grow_level(self, spine: np.ndarray, level: int, sibling_height: int) -> np.ndarray:
        """Put each spine (child code) under a new operation of dependency depth exactly ``level``.

        Returns the new node ids, -1 where ``_LEVEL_TRIES`` draws all failed."""
        rng, max_args = self.rng, self.config.max_args
        out = np.full(len(spine), -1, dtype=np.int64)
        pending = np.arange(len(spine))
        for _ in range(_LEVEL_TRIES):
            count = len(pending)
            n_args = rng.integers(2, max_args + 1, size=count)
            position = rng.integers(0, n_args)
            children = rng.integers(0, 10, size=(count, max_args)).astype(np.int32)
            valid = np.arange(max_args) < n_args[:, None]
            if sibling_height > 0:
                is_op = valid & (rng.random((count, max_args)) < self.config.p_op)
                is_op[np.arange(count), position] = False
                children[is_op] = _NODE + self.random_nodes(int(is_op.sum()), sibling_height)
            children[np.arange(count), position] = spine[pending]
            children[~valid] = _PAD
            ids = self.forest.add(rng.integers(0, len(OPERATORS), size=count).astype(np.int8), children)
            ok = self.forest.dep[ids] == level
            out[pending[ok]] = ids[ok]
            pending = pending[~ok]
            if len(pending) == 0:
                break
        return out

    def batch(self, depth: int, max_tree_depth: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Up to ``count`` examples of dependency depth ``depth``: (tokens, lengths, values)."""
        self.forest = _Forest(self.config.max_args)
        spine = self.rng.integers(0, 10, size=count).astype(np.int64)  # digits are their own codes
        for level in range(1, depth + 1):
            # A sibling at this level sits one below the node, which is depth - level below the root.
            sibling_height = max_tree_depth - (depth - level) - 1
            nodes = self.grow_level(spine, level, sibling_height)
            nodes = nodes[nodes >= 0]
            # Whole-example length rejection: every remaining level adds at least 3 tokens.
            budget = self.config.max_length - 3 * (depth - level)
            spine = _NODE + nodes[self.forest.length[nodes] <= budget]
        roots = spine - _NODE
        tokens, lengths = self.forest.serialize(roots)
        return tokens, lengths, self.forest.value[roots].astype(np.int64)


def _distinct_examples(
    config: ListOpsConfig, rng: np.random.Generator, depth: int, max_tree_depth: int, count: int
) -> list[tuple[bytes, int]]:
    """``count`` distinct examples (token-id bytes) of dependency depth ``depth``, with their values."""
    generator = _Generator(config, rng)
    seen: dict[bytes, int] = {}
    attempted, acceptance = 0, 0.3
    limit = 50 * count + 200_000
    while len(seen) < count:
        if attempted > limit:
            raise UserError(
                f"task: could not generate {count} distinct ListOps examples of dependency depth {depth} "
                f"within max_length={config.max_length}; ask for fewer examples or allow longer ones"
            )
        size = int(min(max((count - len(seen)) / acceptance * 1.1, 256), 50_000))
        tokens, lengths, values = generator.batch(depth, max_tree_depth, size)
        buffer = tokens.tobytes()
        ends = np.cumsum(lengths).tolist()
        before = len(seen)
        starts = [0, *ends[:-1]] if ends else []  # a batch may hold no example that fits max_length
        for start, end, value in zip(starts, ends, values.tolist(), strict=True):
            seen.setdefault(buffer[start:end], value)
            if len(seen) == count:
                break
        attempted += size
        acceptance = max((len(seen) - before) / size, 0.002)
    return list(seen.items())


@dataclass
class _CompactSplit:
    """A split as flat arrays (fast to pickle; see :func:`~recombine.tasks.depth_splits.flat_split`)."""

    tokens: np.ndarray
    lengths: np.ndarray
    targets: np.ndarray
    depth: np.ndarray

    def to_split(self) -> ClassificationSplit:
        return classification_split(self.tokens, self.lengths, self.targets, self.depth)


def _generate(config: ListOpsConfig, seed: int) -> dict[str, _CompactSplit]:
    def sample(stream: str, depth: int, deepest: int, count: int) -> list[tuple[bytes, int]]:
        rng = np.random.default_rng([int(seed), STREAM_IDS[stream], depth])
        return _distinct_examples(config, rng, depth, deepest, count)  # tree depth <= the split's deepest

    shuffle = np.random.default_rng([int(seed), STREAM_IDS["shuffle"], 0])
    splits = depth_balanced_splits(config, sample, shuffle)
    return {name: _CompactSplit(**flat) for name, flat in splits.items()}


def _validate(config: ListOpsConfig) -> None:
    groups = check_depth_groups(config, min_depth=1, what="dependency depths")
    if not 2 <= config.max_args <= 20:
        raise UserError(f"task.max_args must be between 2 and 20, got {config.max_args}")
    if not 0.0 <= config.p_op <= 1.0:
        raise UserError(f"task.p_op must be a probability in [0, 1], got {config.p_op}")
    check_max_length(config, groups, tokens_per_level=3, what="dependency depth")  # "[OP", a digit, "]"
    check_split_sizes(config)


@TASKS.register(
    "listops",
    ListOpsConfig,
    "ListOps (MIN/MAX/MED/SM) split by dependency depth: train 1-5, valid 6, test 7 (thesis 5.2.3)",
)
def build_listops(config: ListOpsConfig, seed: int) -> TaskData:
    """Build (or load from the cache) ListOps with dependency-depth splits (thesis 5.2.3, D.3.2)."""
    _validate(config)
    compact = cached(
        "listops", VERSION, cache_config(config) | {"seed": int(seed)}, lambda: _generate(config, seed)
    )
    return TaskData(
        name="listops",
        kind="classify",
        input_vocab=Vocabulary.build(list(INPUT_TOKENS)),
        output_vocab=Vocabulary.build(list(DIGITS)),
        splits={name: split.to_split() for name, split in compact.items()},
        description=(
            "ListOps (thesis 5.2.3): evaluate a nested prefix expression of MIN, MAX, MED (floor of the "
            f"median) and SM (sum mod 10) over digits, <= {config.max_args} arguments, <= "
            f"{config.max_length} tokens. Split by dependency depth: train {sorted(config.train_depths)}, "
            f"valid_ood {sorted(config.valid_ood_depths)}, test_ood {sorted(config.test_ood_depths)}."
        ),
        metadata={"operators": list(OPERATORS), "depth": "dependency depth (ties -> shallowest operand)"},
    )
