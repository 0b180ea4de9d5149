"""Mathematics dataset (Saxton et al., 2019): school-level questions -> answers, character by character.

Thesis 3.3 (Fig. 3.6, App. B.3.7: mask probes on difficulty splits) and 4.1.1 / 4.3.5 (Tab. 4.4 rows
"Math: add_or_sub", "Math: place_value"); CATALOG §1.4. Generated with the PyPI package
``mathematics-dataset`` 1.0.1 through :mod:`recombine.tasks.mathematics_compat` (its fixes for current
numpy/sympy, and seeding). Examples (``question`` -> ``answer``, both strings)::

    What is -5 - 110911?                      -> -110916      (arithmetic__add_or_sub)
    What is the tens digit of 31859?          -> 5            (numbers__place_value)

Modules (``module``; the short name or the package's full name):

=================  ==========================  =========================  =========================
short name         package module              extrapolation module       used in
=================  ==========================  =========================  =========================
``add_or_sub``     ``arithmetic__add_or_sub``  ``add_or_sub_big``         Tab. 4.4, Fig. 3.6
``place_value``    ``numbers__place_value``    ``place_value_big``        Tab. 4.4
``linear_1d``      ``algebra__linear_1d``      (none)                     Fig. 3.6 (masks)
``collect``        ``polynomials__collect``    (none)                     Fig. 3.6 (masks)
``sort``           ``comparison__sort``        ``sort_more``              Fig. 3.6 (masks)
``differentiate``  ``calculus__differentiate`` (none)                     Fig. 3.6 (masks)
=================  ==========================  =========================  =========================

Regimes, as the package's ``generate.py`` defines them: ``train-easy`` / ``train-medium`` /
``train-hard`` draw the module's training entropy range cut into thirds (the package's
``_make_entropy_fn``); ``interpolate`` draws the fixed interpolation entropy (the package's IID test);
``extrapolate`` the module's extrapolation variant (bigger numbers, longer lists). Questions longer than
160 characters or answers longer than 30 are dropped and redrawn, as in ``generate.sample_from_module``.

Splits (roles of DESIGN.md; every question occurs at most once in the whole task, B.3.7 "no sample appears
twice"; generated in this order, each later split skipping every question already drawn):

* ``train``: ``n_train`` questions, a third from each train difficulty (the package's mix), shuffled;
* ``valid_iid``: ``n_valid_iid`` more from the same three train difficulties, a third each: the
  per-difficulty validation sets of B.3.7 (``group`` says which difficulty; a mask trained on "easy"
  is evaluated on the ``group == 2`` hard part, thesis Fig. 3.6);
* ``test_iid``: ``n_test_iid`` from ``interpolate`` (thesis Tab. 4.3 reports this IID accuracy);
* ``valid_ood``: ``n_valid_ood`` from ``extrapolate``, held apart from ``test_ood`` and used for model
  selection. The Mathematics dataset has no OOD validation set (thesis 4.2.2): this one is ours;
* ``test_ood``: ``n_test_ood`` from ``extrapolate`` (the generalization accuracy of Tab. 4.4).

Modules without an extrapolation variant (``linear_1d``, ``collect``, ``differentiate``) have no
``valid_ood`` / ``test_ood``; their description says so, and model selection falls back to ``valid_iid``.

``group`` = the index of the example's regime in :data:`GROUP_NAMES` (0-2 train difficulties,
3 interpolate, 4 extrapolate). Vocabularies: input and output share the package's fixed alphabet of 95
printable ASCII characters (``generate_settings.QUESTION_CHARS``), so ids do not depend on the sample.

Generation is deterministic given (config, seed) and is cached (:mod:`recombine.tasks.cache`), keyed also by
the package and sympy versions (sympy prints the answers). Speed on one core: place_value ~7,000
questions/s, add_or_sub ~1,700/s, linear_1d ~900/s, sort ~450/s, collect ~400/s, differentiate ~100/s;
sort's extrapolation set only ~1/s, since almost all of its 9-12-number answers exceed 30 characters and
are redrawn (as in the package: the released ``sort_more`` answers are short lists of small numbers).
The thesis trains on the full released files (1.97M add_or_sub questions, Tab. C.7); the defaults here are
CPU-scale.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata as package_metadata

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks import TASKS
from recombine.tasks.base import TaskData, Vocabulary
from recombine.tasks.cache import cached
from recombine.tasks.mathematics_compat import PACKAGE_VERSION, family_module, seeded_generation
from recombine.tasks.seq2seq_parts import Example, encode_split

#: Bump whenever generation or splitting changes, so cached tasks are rebuilt.
VERSION = 1

#: The package's ``generate_settings``: longer questions / answers are dropped and redrawn.
MAX_QUESTION_LENGTH = 160
MAX_ANSWER_LENGTH = 30
#: ``generate_settings.QUESTION_CHARS`` without its empty padding entry: every character a question or
#: an answer can contain.
ALPHABET = (" ", *string.ascii_letters, *string.digits, *string.punctuation)

TRAIN_LEVELS = ("train-easy", "train-medium", "train-hard")
GROUP_NAMES = (*TRAIN_LEVELS, "interpolate", "extrapolate")


@dataclass(frozen=True)
class MathModule:
    """A module of the package: its family (``modules/<family>.py``), name, and extrapolation variant."""

    family: str
    name: str
    extrapolation: str | None

    @property
    def full_name(self) -> str:
        return f"{self.family}__{self.name}"


MODULES = {
    "add_or_sub": MathModule("arithmetic", "add_or_sub", "add_or_sub_big"),
    "place_value": MathModule("numbers", "place_value", "place_value_big"),
    "linear_1d": MathModule("algebra", "linear_1d", None),
    "collect": MathModule("polynomials", "collect", None),
    "sort": MathModule("comparison", "sort", "sort_more"),
    "differentiate": MathModule("calculus", "differentiate", None),
}
_BY_FULL_NAME = {module.full_name: module for module in MODULES.values()}


def resolve_module(name: str) -> MathModule:
    """A module by short (``add_or_sub``) or full (``arithmetic__add_or_sub``) name."""
    module = MODULES.get(name) or _BY_FULL_NAME.get(name)
    if module is None:
        raise UserError(
            f"task.module={name!r} is not a supported Mathematics module; "
            f"{choices_hint(name, [*MODULES, *_BY_FULL_NAME])}"
        )
    return module


@dataclass
class MathematicsConfig:
    """Mathematics dataset (CATALOG §1.4; thesis 4.3.5, B.3.7): module and split sizes (CPU-scale)."""

    module: str = "add_or_sub"  # add_or_sub, place_value, linear_1d, collect, sort, differentiate
    n_train: int = 30000  # a third each from train-easy / -medium / -hard
    n_valid_iid: int = 1500  # more from the train difficulties, a third each (B.3.7)
    n_test_iid: int = 1000  # from interpolate
    n_valid_ood: int = 1000  # from extrapolate, disjoint from test_ood (ours; none in the dataset)
    n_test_ood: int = 2000  # from extrapolate

    def __post_init__(self) -> None:
        _validate(self)


def _validate(config: MathematicsConfig) -> None:
    resolve_module(config.module)
    if config.n_train < len(TRAIN_LEVELS):
        raise UserError(
            f"task.n_train must be >= {len(TRAIN_LEVELS)} (a third per difficulty), got {config.n_train}"
        )
    for name in ("n_valid_iid", "n_test_iid", "n_valid_ood", "n_test_ood"):
        if getattr(config, name) < 0:
            raise UserError(f"task.{name} must be >= 0, got {getattr(config, name)}")


def _entropy_fn(level: int, n_levels: int = 3) -> Callable[[tuple[float, float]], tuple[float, float]]:
    """The package's ``generate._make_entropy_fn``: the ``level``-th of ``n_levels`` equal entropy ranges."""
    lower, upper = level / n_levels, (level + 1) / n_levels

    def modify_entropy(range_: tuple[float, float]) -> tuple[float, float]:
        length = range_[1] - range_[0]
        return (range_[0] + lower * length, range_[0] + upper * length)

    return modify_entropy


def problem_sampler(module: MathModule, regime: str) -> Callable[[], object]:
    """The package's zero-argument function drawing one ``Problem`` of ``module`` in ``regime``."""
    family = family_module(module.family)
    if regime in TRAIN_LEVELS:
        return family.train(_entropy_fn(TRAIN_LEVELS.index(regime)))[module.name]
    if regime == "interpolate":
        return family.test()[module.name]
    if regime == "extrapolate":
        if module.extrapolation is None:
            raise UserError(f"Mathematics module {module.full_name} has no extrapolation set")
        return family.test_extra()[module.extrapolation]
    raise UserError(f"unknown Mathematics regime {regime!r}; {choices_hint(regime, GROUP_NAMES)}")


def sample_questions(
    module: MathModule, regime: str, count: int, seed: int, exclude: set[str] | None = None
) -> list[tuple[str, str]]:
    """``count`` distinct (question, answer) pairs of ``module`` in ``regime``, none of them in ``exclude``.

    Over-long questions/answers are redrawn (package ``generate.sample_from_module``); so are repeats.
    Raises :class:`UserError` when the module cannot produce ``count`` new questions in 20x as many draws.
    """
    sample = problem_sampler(module, regime)
    taken = set(exclude or ())
    pairs: list[tuple[str, str]] = []
    budget = 20 * count + 1000
    with seeded_generation(seed):
        while len(pairs) < count:
            if budget == 0:
                raise UserError(
                    f"Mathematics {module.full_name} {regime}: only {len(pairs)} new distinct questions "
                    f"of the {count} requested; ask for fewer"
                )
            budget -= 1
            problem = sample()
            question, answer = str(problem.question), str(problem.answer)  # type: ignore[attr-defined]
            if len(question) > MAX_QUESTION_LENGTH or len(answer) > MAX_ANSWER_LENGTH or question in taken:
                continue
            taken.add(question)
            pairs.append((question, answer))
    return pairs


def _thirds(count: int) -> list[int]:
    return [count // 3 + (i < count % 3) for i in range(3)]


#: Each regime draw gets its own child seed, by this fixed index (stable if splits are added).
_SEED_SLOTS = {
    **{("train", level): i for i, level in enumerate(TRAIN_LEVELS)},
    **{("valid_iid", level): 3 + i for i, level in enumerate(TRAIN_LEVELS)},
    ("test_iid", "interpolate"): 6,
    ("valid_ood", "extrapolate"): 7,
    ("test_ood", "extrapolate"): 8,
    ("shuffle", ""): 9,
}


def generate_roles(config: MathematicsConfig, seed: int) -> dict[str, list[tuple[str, str, int]]]:
    """Role -> (question, answer, group) triples, per the module docstring; deterministic in ``seed``."""
    module = resolve_module(config.module)
    children = np.random.SeedSequence(seed).spawn(len(_SEED_SLOTS))
    child_seed = {slot: int(children[i].generate_state(1)[0]) for slot, i in _SEED_SLOTS.items()}
    plan: list[tuple[str, str, int]] = [
        *(("train", level, n) for level, n in zip(TRAIN_LEVELS, _thirds(config.n_train), strict=True)),
        *(
            ("valid_iid", level, n)
            for level, n in zip(TRAIN_LEVELS, _thirds(config.n_valid_iid), strict=True)
        ),
        ("test_iid", "interpolate", config.n_test_iid),
    ]
    if module.extrapolation is not None:
        plan += [
            ("valid_ood", "extrapolate", config.n_valid_ood),
            ("test_ood", "extrapolate", config.n_test_ood),
        ]
    seen: set[str] = set()
    roles: dict[str, list[tuple[str, str, int]]] = {}
    for role, regime, count in plan:
        pairs = sample_questions(module, regime, count, child_seed[(role, regime)], exclude=seen)
        seen.update(question for question, _ in pairs)
        group = GROUP_NAMES.index(regime)
        roles.setdefault(role, []).extend((question, answer, group) for question, answer in pairs)
    shuffle = np.random.default_rng(child_seed[("shuffle", "")])
    return {
        role: [triples[i] for i in shuffle.permutation(len(triples))]
        for role, triples in roles.items()
        if triples or role == "train"
    }


def _build(config: MathematicsConfig, seed: int) -> TaskData:
    module = resolve_module(config.module)
    roles = generate_roles(config, seed)
    vocab = Vocabulary.build(list(ALPHABET))
    known = set(ALPHABET)
    splits = {}
    for role, triples in roles.items():
        unknown = {c for question, answer, _ in triples for c in question + answer} - known
        if unknown:
            raise ValueError(
                f"{module.full_name} produced characters outside the alphabet: {sorted(unknown)}"
            )
        examples: list[Example] = [(tuple(question), tuple(answer)) for question, answer, _ in triples]
        split = encode_split(examples, vocab, vocab, lambda _: -1)
        split.group = np.array([group for *_, group in triples], dtype=np.int64)
        splits[role] = split
    sizes = ", ".join(f"{role} {len(split)}" for role, split in splits.items())
    selection = (
        f"valid_ood = {config.n_valid_ood} more extrapolation questions (ours; the dataset has none)."
        if "valid_ood" in splits
        else (
            "No OOD split: the module has no extrapolation set (thesis B.3.7 uses valid_iid's hard part)."
            if module.extrapolation is None
            else "No OOD validation split (task.n_valid_ood=0)."
        )
    )
    return TaskData(
        name="math",
        kind="seq2seq",
        input_vocab=vocab,
        output_vocab=vocab,
        splits=splits,
        description=(
            f"Mathematics {module.full_name} (Saxton et al. 2019; thesis 4.3.5), characters: {sizes}. "
            + selection
        ),
        metadata={
            "module": module.full_name,
            "extrapolation_module": module.extrapolation,
            "group": "regime (train difficulty, interpolate, extrapolate)",
            "group_names": list(GROUP_NAMES),
            "package": f"mathematics-dataset {PACKAGE_VERSION}",
        },
    )


def _cache_config(config: MathematicsConfig, seed: int) -> dict[str, object]:
    """The cache key: the config with the module's full name, the seed, and what shapes the text."""
    versions = {name: package_metadata.version(name) for name in ("mathematics-dataset", "sympy")}
    return asdict(config) | {"module": resolve_module(config.module).full_name, "seed": int(seed), **versions}


@TASKS.register(
    "math",
    MathematicsConfig,
    "Mathematics dataset questions -> answers (seq2seq, characters), task.module=add_or_sub|place_value|"
    "linear_1d|collect|sort|differentiate; train easy/medium/hard, interpolate, extrapolate (thesis 4.3.5)",
)
def build_mathematics(config: MathematicsConfig, seed: int) -> TaskData:
    """Build (or load from the cache) the Mathematics task (CATALOG §1.4, thesis 4.3.5, B.3.7)."""
    _validate(config)
    try:
        key = _cache_config(config, seed)
    except package_metadata.PackageNotFoundError:
        raise UserError(
            f"the Mathematics task needs the PyPI package mathematics-dataset; "
            f"pip install mathematics-dataset=={PACKAGE_VERSION}"
        ) from None
    return cached("math", VERSION, key, lambda: _build(config, seed))
