"""CTL++: compositional table lookup with a *systematicity* split (variants 'A', 'R' and 'S').

Csordás PhD thesis, ch. 6 (sec. 6.2 defines the variants, Figs. 6.1, 6.2 and E.1 their sampling graphs)
and appendix E.1.2 (dataset sizes); CATALOG §1.8. The task is a sibling of :mod:`recombine.tasks.ctl`:
``n_symbols`` symbols (8, written ``0``..``7`` as in ch. 6) and ``n_functions`` random bijections (32,
named ``a``..``z``, ``A``..``Z``). An example is a start symbol and a list of functions applied in order;
the target is the final symbol. Presentation is right-to-left by default (E.1.2: ``c b a 3`` means
``c(b(a(3)))``); ``direction="forward"`` writes ``3 a b c`` instead.

The functions are divided into disjoint *groups*, and a *sampling graph* says which group may follow which.
Training uses one graph, the OOD test another whose compositions never occur in training (sec. 6.2):

* **'A' (Alternating)**: groups ``G_a``, ``G_b`` (halves of the functions). Train: successive functions
  alternate between the groups. OOD test: successive functions are from the same group. All single
  function applications (every function on every symbol) are in train.
* **'R' (Repeating)**: the complement of 'A'. Train: all functions of an example come from one group.
  OOD test: alternating. All single applications are in train.
* **'S' (Staged)**: groups ``G_a1``, ``G_a2``, ``G_b1``, ``G_b2`` (equal shares of the functions not in
  ``G_o``) and ``G_o`` (``shared_functions`` functions). Examples are sequences of *pairs*: for each pair a
  path ``p`` in {a, b} is drawn, then ``f_i`` from ``G_p1`` and ``f_{i+1}`` from ``G_p2`` ∪ ``G_o``, so
  lengths are even and there are no single applications. A function ``f`` in ``G_o`` may only follow a
  ``G_p1`` function whose output symbol is in ``S_p^f``; ``S_a^f`` and ``S_b^f`` share exactly
  ``shared_symbols`` symbols, together hold all symbols, and the shared symbols of all ``G_o`` functions
  together cover every symbol. OOD test: ``f_{i+1}`` comes from the *other* path's ``G_{p̄2}`` (never ``G_o``).
  ``shared_functions`` (``|G_o|``) and ``shared_symbols`` are the two axes of thesis Fig. 6.4.

Sampling (E.1.2): functions are drawn one step at a time, uniformly among those the graph allows after the
previous function (and, for 'S', the current symbol); the start symbol is uniform. Examples are distinct,
and each split is balanced over its lengths as far as the number of distinct sequences of a length allows
(:func:`recombine.tasks.depth_splits.balanced_counts`). Lengths: train and ``test_iid`` 1..``max_length``
('A', 'R'; length 1 only in train) or the even lengths 2..``max_length`` ('S'); OOD splits 2..``max_length``
('S': even ones).

Splits: ``train`` (300k, E.1.2); ``test_iid`` (1k): the training graph, disjoint from train (the thesis's
"IID" column of Tab. 6.1); ``test_ood`` (1k): the test graph (the "OOD" column). The thesis has no OOD
validation split; ``valid_ood`` (1k) is ours, for model selection: one pool of distinct test-graph sequences
is drawn and split at random, stratified by length, into ``valid_ood`` and ``test_ood``, so the two are
disjoint samples of the same distribution (selecting on it is optimistic in the same way as the authors'
code, which validated on its test split).
"""

from __future__ import annotations

import math
import string
from dataclasses import asdict, dataclass

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks import TASKS
from recombine.tasks.base import TaskData, Vocabulary
from recombine.tasks.cache import cached
from recombine.tasks.ctl import DIRECTIONS
from recombine.tasks.depth_splits import balanced_counts
from recombine.tasks.table_lookup_splits import TableLookupSplitBuilder, proportional_counts

#: Bump whenever generation changes, so cached tasks are rebuilt.
VERSION = 1

VARIANTS = ("A", "R", "S")

# Sequences are identified by an int64 code (start symbol and function indices as digits).
_MAX_CODE = 2**62
# Lengths with at most this many valid prefixes are enumerated and sampled exactly without replacement;
# longer ones are sampled by random walks, rejecting duplicates.
_ENUMERATE_LIMIT = 2**20

#: Problems of one length: start symbols (n,) and functions in application order (n, length).
_Problems = tuple[np.ndarray, np.ndarray]


@dataclass
class CTLPPConfig:
    """CTL++ (thesis ch. 6, E.1.2); defaults reproduce the thesis setup of Tab. 6.1 ('A')."""

    variant: str = "A"  # "A" (alternating), "R" (repeating), "S" (staged)
    direction: str = "backward"  # E.1.2: right-to-left, "c b a 3" = c(b(a(3))); "forward": "3 a b c"
    n_symbols: int = 8
    n_functions: int = 32
    max_length: int = 6  # E.1.2: at most 6 composed functions
    shared_functions: int = 8  # 'S' only: |G_o|, the y-axis of Fig. 6.4
    shared_symbols: int = 4  # 'S' only: |S_a^f ∩ S_b^f| for every f in G_o, the x-axis of Fig. 6.4
    # 'A' and 'R': every single application is in train (E.1.2's text); false: train on lengths 2 to
    # max_length only, as the authors' released code builds it (docs/tasks/ctlpp.md)
    single_applications: bool = True
    n_train: int = 300000  # E.1.2
    n_test_iid: int = 1000
    n_valid_ood: int = 1000
    n_test_ood: int = 1000

    def __post_init__(self) -> None:
        _validate(self)


def symbol_names(n_symbols: int) -> list[str]:
    """Symbols as natural numbers, ``0``..``n-1`` (thesis 6.1)."""
    return [str(i) for i in range(n_symbols)]


def function_names(n_functions: int) -> list[str]:
    """Letters ``a``..``z``, ``A``..``Z``, then ``f53``, ``f54``, ... (thesis 6.1: each function a letter)."""
    letters = string.ascii_lowercase + string.ascii_uppercase
    return [letters[i] if i < len(letters) else f"f{i + 1}" for i in range(n_functions)]


def function_groups(config: CTLPPConfig) -> dict[str, list[int]]:
    """Disjoint groups of function indices with the thesis's names (sec. 6.2).

    'A' and 'R': ``a`` (the first half) and ``b``; 'S': ``o`` (the first ``shared_functions``), then ``a1``,
    ``a2``, ``b1``, ``b2`` taking equal consecutive shares of the rest (the first ones one more if uneven).
    Functions are random tables, so assigning groups by index is as good as at random.
    """
    indices = list(range(config.n_functions))
    if config.variant in ("A", "R"):
        half = (config.n_functions + 1) // 2
        return {"a": indices[:half], "b": indices[half:]}
    n_shared = config.shared_functions
    staged = [part.tolist() for part in np.array_split(np.array(indices[n_shared:], dtype=np.int64), 4)]
    return {"o": indices[:n_shared], "a1": staged[0], "a2": staged[1], "b1": staged[2], "b2": staged[3]}


def shared_symbol_sets(
    n_symbols: int, n_shared_functions: int, shared_symbols: int, rng: np.random.Generator
) -> list[tuple[set[int], set[int]]]:
    """``(S_a^f, S_b^f)`` for the ``G_o`` functions in order (thesis 6.2, variant 'S').

    The symbols shared by both sets are consecutive windows of ``shared_symbols`` in one random order of the
    symbols, so together they cover every symbol once ``n_shared_functions * shared_symbols >= n_symbols``;
    the other symbols are split at random between the two paths (``a`` gets the larger half when uneven).
    """
    order = rng.permutation(n_symbols)
    sets: list[tuple[set[int], set[int]]] = []
    for j in range(n_shared_functions):
        shared = {int(order[(j * shared_symbols + t) % n_symbols]) for t in range(shared_symbols)}
        rest = [int(s) for s in rng.permutation([s for s in range(n_symbols) if s not in shared])]
        n_a = (len(rest) + 1) // 2
        sets.append((shared | set(rest[:n_a]), shared | set(rest[n_a:])))
    return sets


@dataclass(frozen=True)
class SamplingGraph:
    """A sampling graph (thesis Figs. 6.1, 6.2, E.1) as masks over functions.

    ``allowed[p + 1, s, f]``: function ``f`` may be applied to the current symbol ``s`` right after function
    ``p`` (row 0: as the first function). ``may_end[f]``: an example may end with ``f``.
    """

    allowed: np.ndarray  # bool (n_functions + 1, n_symbols, n_functions)
    may_end: np.ndarray  # bool (n_functions,)


def _group_graph(
    n_functions: int,
    n_symbols: int,
    groups: dict[str, list[int]],
    first: list[str],
    edges: dict[str, list[str]],
    last: list[str],
) -> SamplingGraph:
    """Unrestricted group edges: any function of a group in ``edges[g]`` may follow any function of ``g``."""
    allowed = np.zeros((n_functions + 1, n_symbols, n_functions), dtype=bool)
    for g in first:
        allowed[0, :, groups[g]] = True
    for source, targets in edges.items():
        for target in targets:
            for p in groups[source]:
                allowed[p + 1][:, groups[target]] = True
    may_end = np.zeros(n_functions, dtype=bool)
    for g in last:
        may_end[groups[g]] = True
    return SamplingGraph(allowed, may_end)


def sampling_graphs(
    config: CTLPPConfig, groups: dict[str, list[int]], symbol_sets: list[tuple[set[int], set[int]]]
) -> tuple[SamplingGraph, SamplingGraph]:
    """(training graph, OOD test graph) of a variant (thesis 6.2)."""
    F, S = config.n_functions, config.n_symbols
    alternate = {"a": ["b"], "b": ["a"]}
    repeat = {"a": ["a"], "b": ["b"]}
    if config.variant in ("A", "R"):
        train_edges, test_edges = (alternate, repeat) if config.variant == "A" else (repeat, alternate)
        both = ["a", "b"]
        return (
            _group_graph(F, S, groups, both, train_edges, both),
            _group_graph(F, S, groups, both, test_edges, both),
        )
    stage1, stage2 = ["a1", "b1"], ["a2", "b2", "o"]
    train_edges = {"a1": ["a2"], "b1": ["b2"], "a2": stage1, "b2": stage1, "o": stage1}
    train = _group_graph(F, S, groups, stage1, train_edges, stage2)
    for f, (on_a, on_b) in zip(groups["o"], symbol_sets, strict=True):  # restricted edges G_p1 -> f in G_o
        for source, symbols in (("a1", on_a), ("b1", on_b)):
            for p in groups[source]:
                train.allowed[p + 1, sorted(symbols), f] = True
    test_edges = {"a1": ["b2"], "b1": ["a2"], "a2": stage1, "b2": stage1}
    test = _group_graph(F, S, groups, stage1, test_edges, ["a2", "b2"])
    return train, test


def count_sequences(graph: SamplingGraph, table: np.ndarray, max_length: int) -> tuple[list[int], list[int]]:
    """(valid sequences, valid prefixes) per length 0..max_length, by dynamic programming over symbols.

    A sequence is a start symbol and a function list the graph allows; a prefix need not end validly.
    """
    n_functions, n_symbols = table.shape
    # ways[f, s]: prefixes of the current length ending with function f, current symbol s (after f)
    ways = np.zeros((n_functions, n_symbols), dtype=np.int64)
    for f in range(n_functions):
        ways[f, table[f]] = graph.allowed[0, :, f]
    valid, prefixes = [0, int(ways[graph.may_end].sum())], [0, int(ways.sum())]
    for _ in range(2, max_length + 1):
        into = np.einsum("ps,psf->fs", ways, graph.allowed[1:].astype(np.int64))
        ways = np.zeros_like(ways)
        for f in range(n_functions):
            ways[f, table[f]] = into[f]
        valid.append(int(ways[graph.may_end].sum()))
        prefixes.append(int(ways.sum()))
    return valid, prefixes


def _codes(starts: np.ndarray, funcs: np.ndarray, n_functions: int) -> np.ndarray:
    codes = starts.astype(np.int64)
    for step in range(funcs.shape[1]):
        codes = codes * n_functions + funcs[:, step]
    return codes


def _enumerate(
    graph: SamplingGraph, table: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every valid sequence of ``length`` with the log-probability of the step-wise uniform walk."""
    n_functions, n_symbols = table.shape
    starts = np.arange(n_symbols, dtype=np.int64)
    funcs = np.zeros((n_symbols, 0), dtype=np.int64)
    current = starts.copy()
    previous = np.zeros(n_symbols, dtype=np.int64)  # row 0 of graph.allowed: the first function
    log_p = np.full(n_symbols, -math.log(n_symbols))
    for _ in range(length):
        mask = graph.allowed[previous, current]
        rows, chosen = np.nonzero(mask)
        log_p = log_p[rows] - np.log(mask.sum(axis=1))[rows]
        starts, funcs = starts[rows], np.concatenate([funcs[rows], chosen[:, None]], axis=1)
        current, previous = table[chosen, current[rows]], chosen + 1
    keep = graph.may_end[funcs[:, -1]]
    return starts[keep], funcs[keep], log_p[keep]


def _random_walks(
    rng: np.random.Generator, graph: SamplingGraph, table: np.ndarray, length: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` step-wise uniform walks of ``length``; those the graph does not allow to end are dropped."""
    n_functions, n_symbols = table.shape
    starts = rng.integers(n_symbols, size=n)
    current, previous = starts.copy(), np.zeros(n, dtype=np.int64)
    funcs = np.zeros((n, length), dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    for step in range(length):
        cumulative = np.cumsum(graph.allowed[previous, current], axis=1)
        n_allowed = cumulative[:, -1]
        ok &= n_allowed > 0
        pick = (rng.random(n) * n_allowed).astype(np.int64)
        chosen = np.argmax(cumulative > pick[:, None], axis=1)
        funcs[:, step] = chosen
        current, previous = table[chosen, current], chosen + 1
    ok &= graph.may_end[funcs[:, -1]]
    return starts[ok], funcs[ok]


def _sample_distinct(
    rng: np.random.Generator,
    graph: SamplingGraph,
    table: np.ndarray,
    length: int,
    count: int,
    n_prefixes: int,
) -> _Problems:
    """``count`` distinct sequences of ``length``, drawn from the step-wise walk without replacement."""
    n_functions = table.shape[0]
    if n_prefixes <= _ENUMERATE_LIMIT:
        starts, funcs, log_p = _enumerate(graph, table, length)
        # Gumbel-top-k = successive draws without replacement proportional to the walk probability
        keys = log_p - np.log(-np.log(rng.random(len(log_p))))
        chosen = np.sort(np.argsort(-keys, kind="stable")[:count])
        return starts[chosen], funcs[chosen]
    seen: set[int] = set()
    parts_starts: list[np.ndarray] = []
    parts_funcs: list[np.ndarray] = []
    while len(seen) < count:
        starts, funcs = _random_walks(rng, graph, table, length, 2 * (count - len(seen)) + 64)
        codes = _codes(starts, funcs, n_functions)
        _, first = np.unique(codes, return_index=True)
        fresh = [i for i in np.sort(first) if int(codes[i]) not in seen][: count - len(seen)]
        seen.update(int(codes[i]) for i in fresh)
        parts_starts.append(starts[fresh])
        parts_funcs.append(funcs[fresh])
    return np.concatenate(parts_starts), np.concatenate(parts_funcs)


def _builder(table: np.ndarray, config: CTLPPConfig) -> TableLookupSplitBuilder:
    return TableLookupSplitBuilder(table, config.n_symbols, config.direction)


def _validate(config: CTLPPConfig) -> None:
    if config.variant not in VARIANTS:
        raise UserError(
            f"task.variant={config.variant!r} is not valid; {choices_hint(str(config.variant), VARIANTS)}"
        )
    if config.direction not in DIRECTIONS:
        raise UserError(
            f"task.direction={config.direction!r} is not valid; "
            f"{choices_hint(str(config.direction), DIRECTIONS)}"
        )
    if config.n_symbols < 2:
        raise UserError("task.n_symbols must be >= 2")
    if config.max_length < 2:
        raise UserError("task.max_length must be >= 2 (the OOD splits are compositions of >= 2 functions)")
    for name in ("n_train", "n_test_iid", "n_valid_ood", "n_test_ood"):
        if getattr(config, name) < 1:
            raise UserError(f"task.{name} must be >= 1")
    if config.variant in ("A", "R"):
        if config.n_functions < 2:
            raise UserError(f"task.n_functions must be >= 2 for variant {config.variant} (G_a and G_b)")
        n_single = config.n_symbols * config.n_functions if config.single_applications else 0
        if config.n_train <= n_single:
            raise UserError(
                f"task.n_train={config.n_train} must exceed the {n_single} single applications that train "
                f"always contains in variant {config.variant}"
            )
    else:
        if config.shared_functions < 0 or config.n_functions - config.shared_functions < 4:
            raise UserError(
                "variant S needs 0 <= task.shared_functions <= task.n_functions - 4 "
                "(G_a1, G_a2, G_b1, G_b2 need a function each)"
            )
        if not 1 <= config.shared_symbols <= config.n_symbols:
            raise UserError(f"task.shared_symbols must be between 1 and n_symbols={config.n_symbols}")
        if config.shared_functions > 0 and config.shared_functions * config.shared_symbols < config.n_symbols:
            raise UserError(
                f"variant S: the shared symbols of the {config.shared_functions} G_o functions must "
                f"cover all {config.n_symbols} symbols (thesis 6.2); raise task.shared_functions * "
                f"task.shared_symbols to >= {config.n_symbols}"
            )
    if config.n_symbols * config.n_functions**config.max_length >= _MAX_CODE:
        raise UserError("task: n_symbols * n_functions**max_length must be below 2**62")


def _draw_split_pool(
    rng: np.random.Generator,
    graph: SamplingGraph,
    table: np.ndarray,
    lengths: list[int],
    size: int,
    n_held_out: int,
    what: str,
) -> tuple[list[_Problems], list[_Problems]]:
    """A pool of ``size`` distinct sequences balanced over ``lengths``, split stratified by length into
    (the rest, ``n_held_out`` held out)."""
    valid, prefixes = count_sequences(graph, table, max(lengths))
    counts = balanced_counts([valid[n] for n in lengths], size, what)
    held_counts = proportional_counts(counts, n_held_out)
    rest: list[_Problems] = []
    held: list[_Problems] = []
    for length, count, n_held in zip(lengths, counts, held_counts, strict=True):
        if count == 0:
            continue
        starts, funcs = _sample_distinct(rng, graph, table, length, count, prefixes[length])
        order = rng.permutation(count)
        held.append((starts[order[:n_held]], funcs[order[:n_held]]))
        rest.append((starts[order[n_held:]], funcs[order[n_held:]]))
    return rest, held


def _generate(config: CTLPPConfig, seed: int) -> TaskData:
    n_symbols, n_functions = config.n_symbols, config.n_functions
    # Independent streams: changing a split's size leaves the functions and the other splits alone.
    rng_table, rng_groups, rng_train, rng_ood, rng_shuffle = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)
    )
    table = np.stack([rng_table.permutation(n_symbols) for _ in range(n_functions)]).astype(np.int64)
    groups = function_groups(config)
    symbol_sets = (
        shared_symbol_sets(n_symbols, len(groups["o"]), config.shared_symbols, rng_groups)
        if config.variant == "S"
        else []
    )
    train_graph, test_graph = sampling_graphs(config, groups, symbol_sets)
    train_valid, _ = count_sequences(train_graph, table, config.max_length)
    test_valid, _ = count_sequences(test_graph, table, config.max_length)
    pool_lengths = [n for n in range(2, config.max_length + 1) if train_valid[n] > 0]
    ood_lengths = [n for n in range(2, config.max_length + 1) if test_valid[n] > 0]

    train, test_iid = _builder(table, config), _builder(table, config)
    n_single = 0
    if config.variant in ("A", "R") and config.single_applications:  # 6.2: every single application in train
        n_single = n_symbols * n_functions
        starts, funcs = np.divmod(np.arange(n_single, dtype=np.int64), n_functions)
        train.add(starts, funcs[:, None])
    rest, held = _draw_split_pool(
        rng_train, train_graph, table, pool_lengths, config.n_train - n_single + config.n_test_iid,
        config.n_test_iid, "train + test_iid",
    )  # fmt: skip
    for part in rest:
        train.add(*part)
    for part in held:
        test_iid.add(*part)
    ood_rest, ood_held = _draw_split_pool(
        rng_ood, test_graph, table, ood_lengths, config.n_valid_ood + config.n_test_ood, config.n_valid_ood,
        "valid_ood + test_ood",
    )  # fmt: skip
    valid_ood, test_ood = _builder(table, config), _builder(table, config)
    for part in ood_held:
        valid_ood.add(*part)
    for part in ood_rest:
        test_ood.add(*part)
    splits = {
        "train": train.build(rng_shuffle),
        "test_iid": test_iid.build(rng_shuffle),
        "valid_ood": valid_ood.build(rng_shuffle),
        "test_ood": test_ood.build(rng_shuffle),
    }

    symbols, names = symbol_names(n_symbols), function_names(n_functions)
    metadata: dict[str, object] = {
        "functions": table.tolist(),  # functions[f][s] = image of symbol s under function f
        "function_names": names,
        "symbols": symbols,
        "variant": config.variant,
        "direction": config.direction,
        "groups": {g: [names[f] for f in fs] for g, fs in groups.items()},
        "train_lengths": ([1] if n_single else []) + pool_lengths,
        "ood_lengths": ood_lengths,
    }
    if config.variant == "S":
        metadata["shared_symbol_sets"] = {  # S_a^f, S_b^f for f in G_o
            names[f]: {"a": [symbols[s] for s in sorted(on_a)], "b": [symbols[s] for s in sorted(on_b)]}
            for f, (on_a, on_b) in zip(groups["o"], symbol_sets, strict=True)
        }
    variant_text = {
        "A": "train alternates between G_a and G_b, OOD test composes within one group",
        "R": "train composes within one group, OOD test alternates between G_a and G_b",
        "S": f"staged pairs G_p1 -> G_p2 or G_o (|G_o|={config.shared_functions}, "
        f"{config.shared_symbols} shared symbols) in train, G_p1 -> G_(other path)2 in the OOD test",
    }[config.variant]
    return TaskData(
        name="ctlpp",
        kind="classify",
        input_vocab=Vocabulary.build(symbols + names),
        output_vocab=Vocabulary.build(symbols),
        splits=splits,
        description=(
            f"CTL++ variant {config.variant} (thesis ch. 6): {variant_text}; {n_functions} random "
            f"bijections over {n_symbols} symbols, up to {config.max_length} functions, "
            f"{config.direction} presentation. "
            "valid_ood is a disjoint sample of the OOD test graph (the thesis has no OOD validation split)."
        ),
        metadata=metadata,
    )


@TASKS.register(
    "ctlpp",
    CTLPPConfig,
    "CTL++ systematicity split: unseen compositions of function groups, variants A, R, S (thesis ch. 6)",
)
def build_ctlpp(config: CTLPPConfig, seed: int) -> TaskData:
    """Build (or load from the cache) CTL++ for ``config`` and ``seed`` (thesis 6.2, E.1.2)."""
    _validate(config)
    return cached("ctlpp", VERSION, asdict(config) | {"seed": int(seed)}, lambda: _generate(config, seed))
