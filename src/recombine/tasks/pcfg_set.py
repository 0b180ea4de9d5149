"""PCFG SET (Hupkes et al., 2020): execute nested string-edit functions written in prefix notation.

Thesis 4.1.1 and 4.3.3 (productivity and systematicity splits, Tab. 4.4, C.7); CATALOG §1.2.

An input such as ``append repeat A1 B2 , reverse C3 D4 E5`` is a program over strings of letter
tokens ``A1`` .. ``Z20`` (520 tokens); binary arguments are separated by ``,``. The ten functions:

========================  =================================  ==============================
unary                      meaning                            example
========================  =================================  ==============================
``copy s``                 s                                  A B C -> A B C
``reverse s``              s reversed                         A B C -> C B A
``shift s``                rotate left by one                 A B C -> B C A
``echo s``                 s followed by its last token       A B C -> A B C C
``swap_first_last s``      first and last token swapped       A B C -> C B A
``repeat s``               s s                                A B -> A B A B
``append a , b``           a b
``prepend a , b``          b a
``remove_first a , b``     b
``remove_second a , b``    a
========================  =================================  ==============================

Generator. The seeds give P(unary function) = 0.75, P(an argument is a nested function call) = 0.25
and string arguments of 2-5 tokens, and are silent on the rest; our choices (documented in
``docs/tasks/pcfg-set.md``):

* Hupkes et al. select their 100k examples so that the length distribution resembles a corpus of
  natural language, which a plain PCFG sample (mean ~1.5 functions) does not. We therefore draw
  the *number of functions* n of each example from :data:`OFFICIAL_FUNCTION_COUNTS`, the histogram
  of the official basis corpus (``dev`` + ``test``, 14,581 examples, 1-30 functions), and then sample
  the program *exactly from the PCFG conditioned on having n functions* (a dynamic programme over
  the number of functions in each subtree, see :class:`_ConditionalSampler`). Within a function
  count the structure therefore follows the published probabilities; the function names are
  uniform within their arity.
* String lengths are uniform over 2..5 and letters uniform over the 520 tokens.
* Inputs are distinct (a duplicate is redrawn).

Splits (``split``): ``productivity``: train part = programs with at most ``max_train_functions`` (8)
functions, test part = 9 or more; ``systematicity``: test part = programs in which one of the
function pairs of :data:`SYSTEMATICITY_PAIRS` occurs as adjacent tokens (the second function is the
direct, first argument of the first), train part = the rest (this rule gives 10.7-10.9% of the
official basis corpus, the official systematicity test share is 11.0%). Roles as in
:mod:`recombine.tasks.seq2seq_parts`: ``valid_iid`` = 10% of the train part, ``valid_ood`` = a
seeded 10% of the test part, held out of ``test_ood``. ``group`` = number of functions.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks import TASKS
from recombine.tasks.base import TaskData, Vocabulary
from recombine.tasks.cache import cached
from recombine.tasks.seq2seq_parts import Example, encode_split, part_examples, split_roles

#: Bump whenever generation or splitting changes, so cached tasks are rebuilt.
VERSION = 1

UNARY = ("copy", "reverse", "shift", "echo", "swap_first_last", "repeat")
BINARY = ("append", "prepend", "remove_first", "remove_second")
FUNCTIONS = UNARY + BINARY
SEPARATOR = ","
LETTERS = tuple(f"{letter}{number}" for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for number in range(1, 21))
#: Adjacent function pairs held out in the systematicity split (Hupkes et al., 2020; CATALOG §1.2).
SYSTEMATICITY_PAIRS = (
    ("swap_first_last", "repeat"),
    ("append", "remove_second"),
    ("repeat", "remove_second"),
    ("append", "swap_first_last"),
)
#: Number of functions -> examples in the official basis corpus (data/pcfgset/pcfgset dev + test).
OFFICIAL_FUNCTION_COUNTS = {
    1: 225, 2: 1870, 3: 2827, 4: 2745, 5: 1931, 6: 1495, 7: 967, 8: 740, 9: 500, 10: 366,
    11: 279, 12: 215, 13: 118, 14: 99, 15: 63, 16: 31, 17: 23, 18: 27, 19: 16, 20: 10,
    21: 10, 22: 8, 23: 6, 24: 5, 25: 2, 28: 2, 30: 1,
}  # fmt: skip
SPLITS = ("productivity", "systematicity")
OFFICIAL_SOURCE = "the am-i-compositional repository by Hupkes et al., https://github.com/i-machine-think/am-i-compositional"

_UNARY_SEMANTICS: dict[str, Callable[[list[str]], list[str]]] = {
    "copy": lambda s: list(s),
    "reverse": lambda s: s[::-1],
    "shift": lambda s: s[1:] + s[:1],
    "echo": lambda s: s + s[-1:],
    "swap_first_last": lambda s: s[-1:] + s[1:-1] + s[:1] if len(s) >= 2 else list(s),
    "repeat": lambda s: s + s,
}
_BINARY_SEMANTICS: dict[str, Callable[[list[str], list[str]], list[str]]] = {
    "append": lambda a, b: a + b,
    "prepend": lambda a, b: b + a,
    "remove_first": lambda a, b: list(b),
    "remove_second": lambda a, b: list(a),
}
_FUNCTION_SET = frozenset(FUNCTIONS)


@dataclass
class PCFGSetConfig:
    """PCFG SET (CATALOG §1.2; thesis 4.1.1, 4.3.3): split, generator settings, official files."""

    split: str = "productivity"  # productivity | systematicity
    n_examples: int = 92343  # distinct programs generated (official split sizes, thesis Tab. C.7)
    p_unary: float = 0.75  # P(a function is unary)
    p_nested: float = 0.25  # P(an argument is a nested function call rather than a string)
    min_string_length: int = 2
    max_string_length: int = 5
    max_train_functions: int = 8  # productivity: train part <= this many functions, test part more
    valid_iid_fraction: float = 0.1  # of the train part
    valid_ood_fraction: float = 0.1  # of the test part, held out of test_ood for model selection
    official_dir: str = ""  # "" = generate; else read train/test .src/.tgt files from here

    def __post_init__(self) -> None:
        _validate(self)


def _validate(config: PCFGSetConfig) -> None:
    if config.split not in SPLITS:
        raise UserError(
            f"task.split={config.split!r} is not a PCFG SET split; {choices_hint(config.split, SPLITS)}"
        )
    for name in ("p_unary", "p_nested"):
        if not 0.0 < getattr(config, name) < 1.0:
            raise UserError(f"task.{name} must be in (0, 1), got {getattr(config, name)}")
    for name in ("valid_iid_fraction", "valid_ood_fraction"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise UserError(f"task.{name} must be in [0, 1), got {getattr(config, name)}")
    if not 1 <= config.min_string_length <= config.max_string_length:
        raise UserError("task needs 1 <= min_string_length <= max_string_length")
    if config.n_examples < 10:
        raise UserError(f"task.n_examples must be >= 10, got {config.n_examples}")
    if not 1 <= config.max_train_functions < max(OFFICIAL_FUNCTION_COUNTS):
        raise UserError(f"task.max_train_functions must be in 1..{max(OFFICIAL_FUNCTION_COUNTS) - 1}")


# --- the interpreter ---


def apply_function(name: str, args: Sequence[list[str]]) -> list[str]:
    """Apply one of the ten functions to already evaluated string arguments."""
    if name in _UNARY_SEMANTICS:
        (value,) = args
        return _UNARY_SEMANTICS[name](value)
    first, second = args
    return _BINARY_SEMANTICS[name](first, second)


def _parse_argument(tokens: Sequence[str], start: int) -> tuple[list[str], int]:
    """Evaluate the argument starting at ``start``: a nested call or a run of letter tokens."""
    if start < len(tokens) and tokens[start] in _FUNCTION_SET:
        return _parse_call(tokens, start)
    end = start
    while end < len(tokens) and tokens[end] != SEPARATOR and tokens[end] not in _FUNCTION_SET:
        end += 1
    if end == start:
        raise ValueError(f"empty string argument at token {start + 1}")
    return list(tokens[start:end]), end


def _parse_call(tokens: Sequence[str], start: int) -> tuple[list[str], int]:
    name = tokens[start]
    first, position = _parse_argument(tokens, start + 1)
    if name in _UNARY_SEMANTICS:
        return apply_function(name, [first]), position
    if position >= len(tokens) or tokens[position] != SEPARATOR:
        raise ValueError(f"binary function {name!r} (token {start + 1}) lacks its ',' separator")
    second, position = _parse_argument(tokens, position + 1)
    return apply_function(name, [first, second]), position


def evaluate(tokens: Sequence[str]) -> list[str]:
    """Interpret a PCFG SET program (prefix notation, ``,`` between binary arguments).

    Raises ``ValueError`` for a malformed program.
    """
    if not tokens or tokens[0] not in _FUNCTION_SET:
        raise ValueError("a program starts with a function name")
    value, end = _parse_call(tokens, 0)
    if end != len(tokens):
        raise ValueError(f"unexpected token {tokens[end]!r} at {end + 1} after a complete program")
    return value


def count_functions(tokens: Sequence[str]) -> int:
    return sum(token in _FUNCTION_SET for token in tokens)


def has_systematicity_pair(tokens: Sequence[str]) -> bool:
    """Whether a held-out function pair (:data:`SYSTEMATICITY_PAIRS`) occurs as adjacent tokens."""
    return any(pair in SYSTEMATICITY_PAIRS for pair in itertools.pairwise(tokens))


# --- the generator ---


class _Uniforms:
    """Uniform floats in [0, 1) drawn from a numpy Generator in chunks (cheap scalar draws)."""

    def __init__(self, rng: np.random.Generator, chunk: int = 1 << 16) -> None:
        self.rng, self.chunk = rng, chunk
        self.values: list[float] = []
        self.position = 0

    def __call__(self) -> float:
        if self.position == len(self.values):
            self.values, self.position = self.rng.random(self.chunk).tolist(), 0
        self.position += 1
        return self.values[self.position - 1]

    def index(self, n: int) -> int:
        return min(int(self() * n), n - 1)


class _ConditionalSampler:
    """Sample programs from the PCFG conditioned on their number of functions.

    With ``A[m]`` = P(an argument contains m functions) and ``T[m]`` = P(a call contains m functions):
    ``A[0] = 1 - p_nested``, ``A[m] = p_nested T[m]``, and
    ``T[m] = p_unary A[m-1] + (1 - p_unary) sum_k A[k] A[m-1-k]``. A call with m functions is unary
    with probability proportional to ``p_unary A[m-1]``, and a binary call splits its m - 1 remaining
    functions as (k, m-1-k) with probability proportional to ``A[k] A[m-1-k]``: top-down sampling
    with these weights draws exactly from the PCFG restricted to m functions.
    """

    def __init__(self, config: PCFGSetConfig, max_functions: int, rng: np.random.Generator) -> None:
        self.config = config
        self.uniform = _Uniforms(rng)
        arg = [1.0 - config.p_nested] + [0.0] * max_functions
        self.unary_weight = [0.0] * (max_functions + 1)
        self.split_cumulative: list[list[float]] = [[]]
        for m in range(1, max_functions + 1):
            splits = list(itertools.accumulate(arg[k] * arg[m - 1 - k] for k in range(m)))
            self.unary_weight[m] = config.p_unary * arg[m - 1]
            self.split_cumulative.append([(1.0 - config.p_unary) * w for w in splits])
            arg[m] = config.p_nested * (self.unary_weight[m] + self.split_cumulative[m][-1])

    def program(self, n_functions: int) -> tuple[list[str], list[str]]:
        """A program with exactly ``n_functions`` functions, and its value."""
        tokens: list[str] = []
        return tokens, self._call(n_functions, tokens)

    def _call(self, m: int, tokens: list[str]) -> list[str]:
        binary = self.split_cumulative[m]
        u = self.uniform() * (self.unary_weight[m] + binary[-1])
        if u < self.unary_weight[m]:
            name = UNARY[self.uniform.index(len(UNARY))]
            tokens.append(name)
            return apply_function(name, [self._argument(m - 1, tokens)])
        name = BINARY[self.uniform.index(len(BINARY))]
        u -= self.unary_weight[m]
        k = next((i for i, c in enumerate(binary) if u < c), m - 1)
        tokens.append(name)
        first = self._argument(k, tokens)
        tokens.append(SEPARATOR)
        return apply_function(name, [first, self._argument(m - 1 - k, tokens)])

    def _argument(self, m: int, tokens: list[str]) -> list[str]:
        if m > 0:
            return self._call(m, tokens)
        low, high = self.config.min_string_length, self.config.max_string_length
        length = low + self.uniform.index(high - low + 1)
        string = [LETTERS[self.uniform.index(len(LETTERS))] for _ in range(length)]
        tokens.extend(string)
        return string


def _apportion(weights: dict[int, int], total: int) -> dict[int, int]:
    """Largest-remainder apportionment of ``total`` over the keys of ``weights``."""
    weight_sum = sum(weights.values())
    exact = {key: total * w / weight_sum for key, w in weights.items()}
    counts = {key: int(value) for key, value in exact.items()}
    by_remainder = sorted(weights, key=lambda key: (counts[key] - exact[key], key))
    for key in by_remainder[: total - sum(counts.values())]:
        counts[key] += 1
    return counts


def generate_examples(config: PCFGSetConfig, rng: np.random.Generator) -> list[Example]:
    """``config.n_examples`` distinct programs with their values (see the module docstring)."""
    counts = _apportion(OFFICIAL_FUNCTION_COUNTS, config.n_examples)
    sampler = _ConditionalSampler(config, max(counts), rng)
    seen: set[tuple[str, ...]] = set()
    examples: list[Example] = []
    for n_functions, count in sorted(counts.items()):
        made = 0
        for _ in range(100 * count + 1000):
            if made == count:
                break
            tokens, value = sampler.program(n_functions)
            key = tuple(tokens)
            if key not in seen:
                seen.add(key)
                examples.append((key, tuple(value)))
                made += 1
        else:
            raise UserError(f"task: could not draw {count} distinct programs with {n_functions} functions")
    return examples


def split_parts(
    split: str, examples: Sequence[Example], max_train_functions: int
) -> tuple[list[Example], list[Example]]:
    """The (train part, test part) of the productivity or systematicity split."""
    if split == "productivity":
        is_test = [count_functions(x) > max_train_functions for x, _ in examples]
    elif split == "systematicity":
        is_test = [has_systematicity_pair(x) for x, _ in examples]
    else:
        raise UserError(f"unknown PCFG SET split {split!r}; {choices_hint(split, SPLITS)}")
    train = [e for e, test in zip(examples, is_test, strict=True) if not test]
    test = [e for e, test in zip(examples, is_test, strict=True) if test]
    return train, test


# --- official files ---


def official_files(directory: Path, split: str, part: str) -> tuple[Path, Path]:
    """Locate ``<part>.src`` / ``<part>.tgt`` in ``directory/<split>/`` or ``directory/``."""
    if not directory.is_dir():
        raise UserError(
            f"PCFG SET official_dir {str(directory)!r} is not a directory; "
            f"get data/pcfgset/{split}/ from {OFFICIAL_SOURCE}"
        )
    found = []
    for suffix in ("src", "tgt"):
        name = f"{part}.{suffix}"
        candidates = [directory / split / name, directory / name]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise UserError(
                f"PCFG SET file {name} not found (looked for {candidates[0]} and {candidates[1]}); "
                f"get data/pcfgset/{split}/{name} from {OFFICIAL_SOURCE}"
            )
        found.append(path)
    return found[0], found[1]


def _read_lines(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def read_official(src: Path, tgt: Path) -> list[Example]:
    """Read parallel ``.src`` / ``.tgt`` files (one example per line); errors name ``file:line``."""
    sources, targets = _read_lines(src), _read_lines(tgt)
    if len(sources) != len(targets):
        shorter = src if len(sources) < len(targets) else tgt
        raise UserError(
            f"{shorter}:{min(len(sources), len(targets)) + 1}: file ends early "
            f"({src.name} has {len(sources)} lines, {tgt.name} has {len(targets)})"
        )
    known_inputs, known_outputs = set(FUNCTIONS) | {SEPARATOR} | set(LETTERS), set(LETTERS)
    examples: list[Example] = []
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        for path, line, known in ((src, source, known_inputs), (tgt, target, known_outputs)):
            tokens = line.split()
            if not tokens:
                raise UserError(f"{path}:{number}: empty line")
            unknown = next((t for t in tokens if t not in known), None)
            if unknown is not None:
                raise UserError(f"{path}:{number}: unknown PCFG SET token {unknown!r}")
        examples.append((tuple(source.split()), tuple(target.split())))
    return examples


# --- the task ---


def _build(config: PCFGSetConfig, seed: int) -> TaskData:
    rng_generate, rng_roles = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    if config.official_dir:
        directory = Path(config.official_dir).expanduser()
        train_part = read_official(*official_files(directory, config.split, "train"))
        test_part = read_official(*official_files(directory, config.split, "test"))
        source = str(directory)
    else:
        examples = generate_examples(config, rng_generate)
        train_part, test_part = split_parts(config.split, examples, config.max_train_functions)
        source = "generator"
    roles = split_roles(
        train_part,
        test_part,
        valid_iid_fraction=config.valid_iid_fraction,
        valid_ood_fraction=config.valid_ood_fraction,
        iid_test=False,
        rng=rng_roles,
    )
    input_vocab = Vocabulary.build([*FUNCTIONS, SEPARATOR, *LETTERS])
    output_vocab = Vocabulary.build(list(LETTERS))
    splits = {
        name: encode_split(examples, input_vocab, output_vocab, lambda example: count_functions(example[0]))
        for name, examples in roles.items()
    }
    sizes = ", ".join(f"{name} {len(split)}" for name, split in splits.items())
    return TaskData(
        name="pcfg",
        kind="seq2seq",
        input_vocab=input_vocab,
        output_vocab=output_vocab,
        splits=splits,
        description=(
            f"PCFG SET {config.split} split (Hupkes et al. 2020; thesis 4.3.3) from {source}: {sizes}. "
            f"valid_ood = {config.valid_ood_fraction:.0%} of the test part."
        ),
        metadata={"split": config.split, "source": source, "group": "number of functions"},
    )


@TASKS.register(
    "pcfg",
    PCFGSetConfig,
    "PCFG SET string-edit programs (seq2seq): productivity and systematicity splits (thesis 4.3.3)",
)
def build_pcfg(config: PCFGSetConfig, seed: int) -> TaskData:
    """Build (or load from the cache) PCFG SET for ``config`` and ``seed`` (CATALOG §1.2, thesis 4.3.3).

    Tasks read from ``official_dir`` are not cached: the files are the source of truth.
    """
    _validate(config)
    if config.official_dir:
        return _build(config, seed)
    key = {k: v for k, v in asdict(config).items() if k != "official_dir"} | {"seed": int(seed)}
    return cached("pcfg", VERSION, key, lambda: _build(config, seed))


# --- export ---


def export_official(data: TaskData, part: str, out: str | Path) -> list[Path]:
    """Write ``part`` ("train" = train + valid_iid, "test" = valid_ood + test_ood) as ``.src``/``.tgt``.

    ``out`` is a directory (existing, or written with a trailing ``/``), giving ``out/<part>.src``,
    or a prefix, giving ``<out>.src``.
    """
    examples = part_examples(data, part)
    text = str(out)
    prefix = Path(text) / part if text.endswith(("/", os.sep)) or Path(text).is_dir() else Path(text)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [prefix.with_name(prefix.name + ".src"), prefix.with_name(prefix.name + ".tgt")]
    for path, column in zip(paths, (0, 1), strict=True):
        path.write_text("".join(" ".join(e[column]) + "\n" for e in examples), encoding="utf-8")
    return paths
