"""Simple arithmetic: nested, fully bracketed modulo-10 additions and multiplications.

Csordás PhD thesis, sec. 5.2.2 (task) and appendix D.3.2 (dataset details).

An example is an expression such as ``((4*7)+2)``; the model classifies its value modulo 10 (``0``).
Every operation is bracketed, every token is one character: ``(``, ``)``, ``+``, ``*`` and the digits
``0``..``9``. The *depth* is the depth of the expression tree counted in operations, ignoring the leaves
(5.2.2: the example has depth 2; a bare digit has depth 0); it is the number of operations on the longest
root-to-leaf path, which is what the thesis's code computes (``((1+2)*(3+4))`` has depth 2).

Splits (D.3.2): ``train`` has depths 0-5 ("the train set consists of 0-5 operations"; Tab. 5.3 says 1-5:
set ``train_depths=[1, 2, 3, 4, 5]``), ``valid_iid`` is drawn from the same process and is disjoint
from ``train``, ``valid_ood`` has depth 6 and ``test_ood`` depth 7 (D.3.2; sec. 5.2.2 and Tab. 5.3 say
7-8: set ``test_ood_depths=[7, 8]``). Examples are at most ``max_length`` (50) tokens and distinct.

Depths 0 and 1 have only 10 and 200 distinct expressions; they are enumerated and all of them go to
``train`` (so ``valid_iid`` has depths 2-5 only). Every other depth gets the same number of examples
(rejection sampling per depth, D.3.2), so with the defaults ``train`` has 10 + 200 + 4 x ~24.9k.

Generation (our method; the thesis gives the parameters, not the sampler). An example of depth ``D`` is
grown bottom-up along a *spine*: start from a random digit; at level ``k = 1..D`` combine it, on a random
side and with a random operator, with a random subtree of depth <= ``k - 1`` in which every operand is
itself an operation with the *sub-operation probability* ``p_subop`` (0.2). The result has depth exactly
``D``. Expressions longer than ``max_length`` and duplicates are rejected. This is the thesis code's
scheme (a random tree grown at the root until it is deep enough) made exact per depth, so no sample is
wasted on the wrong depth. Pure Python with a ``random.Random`` seeded from the task seed: the 100k
default train set takes about 1 s.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from recombine.errors import UserError
from recombine.tasks import TASKS
from recombine.tasks.base import TaskData, Vocabulary
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

DIGITS = tuple(str(d) for d in range(10))
OPERATORS = ("+", "*")
INPUT_TOKENS = (*DIGITS, *OPERATORS, "(", ")")

# Depths with at most this many distinct expressions are enumerated instead of sampled (depths 0, 1).
_ENUMERATE_LIMIT = 1000
# Character -> token id in the input vocabulary (<pad> = 0, then INPUT_TOKENS in order).
_TOKEN_IDS = bytes.maketrans("".join(INPUT_TOKENS).encode("ascii"), bytes(range(1, len(INPUT_TOKENS) + 1)))


@dataclass
class ArithmeticConfig:
    """Simple arithmetic (thesis 5.2.2, D.3.2); defaults follow D.3.2."""

    train_depths: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 5])  # Tab. 5.3: 1-5
    valid_ood_depths: list[int] = field(default_factory=lambda: [6])
    test_ood_depths: list[int] = field(default_factory=lambda: [7])  # Tab. 5.3: [7, 8]
    p_subop: float = 0.2  # probability that an operand of a side branch is itself an operation
    max_length: int = 50  # tokens (= characters)
    n_train: int = 100_000
    n_valid_iid: int = 1000
    n_valid_ood: int = 1000
    n_test_ood: int = 1000

    def __post_init__(self) -> None:
        _validate(self)


def evaluate(expression: str | Sequence[str]) -> tuple[int, int]:
    """(value mod 10, depth) of a fully bracketed expression, e.g. ``"((4*7)+2)"`` -> ``(0, 2)``."""
    text = "".join(expression).replace(" ", "")
    position = 0

    def parse() -> tuple[int, int]:
        nonlocal position
        char = text[position]
        position += 1
        if char in DIGITS:
            return int(char), 0
        if char != "(":
            raise UserError(f"malformed arithmetic expression {text!r} at position {position - 1}")
        left, left_depth = parse()
        operator = text[position]
        position += 1
        right, right_depth = parse()
        if operator not in OPERATORS or text[position] != ")":
            raise UserError(f"malformed arithmetic expression {text!r} at position {position - 1}")
        position += 1
        value = left + right if operator == "+" else left * right
        return value % 10, max(left_depth, right_depth) + 1

    try:
        result = parse()
    except IndexError:
        raise UserError(f"unbalanced arithmetic expression {text!r}") from None
    if position != len(text):
        raise UserError(f"trailing characters in arithmetic expression {text!r}")
    return result


def count_expressions(depth: int) -> int:
    """Number of distinct expressions of exactly this depth, ignoring the length limit (saturates at
    2**64: from depth 4 on there are more than that)."""
    # N(d) expressions of depth <= d: N(0) = 10, N(d) = 10 + 2 * N(d - 1)**2.
    previous, at_most = 0, 10
    for _ in range(depth):
        if at_most > 2**64:
            return 2**64
        previous, at_most = at_most, 10 + 2 * at_most**2
    return min(at_most - previous, 2**64)


def _enumerate(depth: int) -> list[tuple[str, int]]:
    """All expressions of depth 0 or 1 with their values."""
    if depth == 0:
        return [(d, int(d)) for d in DIGITS]
    return [
        (f"({a}{op}{b})", (int(a) + int(b) if op == "+" else int(a) * int(b)) % 10)
        for op in OPERATORS
        for a in DIGITS
        for b in DIGITS
    ]


class _Sampler:
    """The spine process of the module docstring, on a private ``random.Random``."""

    def __init__(self, seed: int, p_subop: float, max_length: int) -> None:
        self.random = random.Random(seed).random
        self.p_subop = p_subop
        self.max_length = max_length

    def subtree(self, max_depth: int) -> tuple[str, int]:
        """A random expression of depth <= ``max_depth``: an operation with probability ``p_subop``."""
        r = self.random
        if max_depth == 0 or r() >= self.p_subop:
            digit = int(r() * 10)
            return DIGITS[digit], digit
        left, a = self.subtree(max_depth - 1)
        right, b = self.subtree(max_depth - 1)
        if r() < 0.5:
            return f"({left}+{right})", (a + b) % 10
        return f"({left}*{right})", (a * b) % 10

    def example(self, depth: int) -> tuple[str, int] | None:
        """A random expression of depth exactly ``depth``, or None when it is too long."""
        r = self.random
        digit = int(r() * 10)
        text, value = DIGITS[digit], digit
        for level in range(1, depth + 1):
            side, side_value = self.subtree(level - 1)
            if r() < 0.5:
                op, value = "+", (value + side_value) % 10
            else:
                op, value = "*", (value * side_value) % 10
            text = f"({text}{op}{side})" if r() < 0.5 else f"({side}{op}{text})"
            if len(text) + 4 * (depth - level) > self.max_length:  # each level adds >= 4 tokens
                return None
        return text, value


def _distinct_examples(config: ArithmeticConfig, seed: int, depth: int, count: int) -> list[tuple[str, int]]:
    """``count`` distinct expressions of exactly ``depth`` (uniform over all of them for depths 0, 1)."""
    if count_expressions(depth) <= _ENUMERATE_LIMIT:
        everything = _enumerate(depth)
        chosen = np.random.default_rng(seed).choice(len(everything), size=count, replace=False)
        return [everything[i] for i in sorted(chosen.tolist())]
    if count == 0:
        return []
    sampler = _Sampler(seed, config.p_subop, config.max_length)
    found: dict[str, int] = {}
    limit = 50 * count + 100_000
    for _ in range(limit):
        example = sampler.example(depth)
        if example is not None:
            found.setdefault(*example)
            if len(found) == count:
                return list(found.items())
    raise UserError(
        f"task: could not generate {count} distinct arithmetic expressions of depth {depth} within "
        f"max_length={config.max_length}; ask for fewer examples or allow longer ones"
    )


def _caps(depths: Sequence[int]) -> list[int]:
    """How many examples of each depth train + valid_iid may use: all of an enumerated depth, else half
    of the distinct expressions (so rejection sampling of distinct ones stays fast)."""
    caps = []
    for depth in depths:
        n = count_expressions(depth)
        caps.append(n if n <= _ENUMERATE_LIMIT else n // 2)
    return caps


def _generate(config: ArithmeticConfig, seed: int) -> dict[str, dict[str, np.ndarray]]:
    def stream(name: str, depth: int = 0) -> int:
        return int(np.random.SeedSequence([int(seed), STREAM_IDS[name], depth]).generate_state(1)[0])

    def sample(name: str, depth: int, _deepest: int, count: int) -> list[tuple[bytes, int]]:
        examples = _distinct_examples(config, stream(name, depth), depth, count)
        return [(text.encode("ascii").translate(_TOKEN_IDS), value) for text, value in examples]

    return depth_balanced_splits(config, sample, np.random.default_rng(stream("shuffle")), caps=_caps)


def _validate(config: ArithmeticConfig) -> None:
    groups = check_depth_groups(config, min_depth=0, what="depths")
    if not 0.0 <= config.p_subop <= 1.0:
        raise UserError(f"task.p_subop must be a probability in [0, 1], got {config.p_subop}")
    check_max_length(config, groups, tokens_per_level=4, what="depth")  # "(", an operator, a digit, ")"
    check_split_sizes(config)


@TASKS.register(
    "arithmetic",
    ArithmeticConfig,
    "Simple arithmetic: nested mod-10 +/* like ((4*7)+2); train depth 0-5, valid 6, test 7 (thesis 5.2.2)",
)
def build_arithmetic(config: ArithmeticConfig, seed: int) -> TaskData:
    """Build (or load from the cache) the simple arithmetic task (thesis 5.2.2, D.3.2)."""
    _validate(config)
    flat = cached(
        "arithmetic", VERSION, cache_config(config) | {"seed": int(seed)}, lambda: _generate(config, seed)
    )
    return TaskData(
        name="arithmetic",
        kind="classify",
        input_vocab=Vocabulary.build(list(INPUT_TOKENS)),
        output_vocab=Vocabulary.build(list(DIGITS)),
        splits={name: classification_split(**split) for name, split in flat.items()},
        description=(
            "Simple arithmetic (thesis 5.2.2): evaluate a fully bracketed expression of mod-10 + and * "
            f"over digits, <= {config.max_length} tokens. Depth = operations on the longest path: train "
            f"{sorted(config.train_depths)}, valid_ood {sorted(config.valid_ood_depths)}, test_ood "
            f"{sorted(config.test_ood_depths)}."
        ),
        metadata={"operators": list(OPERATORS), "p_subop": config.p_subop},
    )
