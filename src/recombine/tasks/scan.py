"""SCAN (Lake & Baroni, 2018): navigation commands -> action sequences, generated from the grammar.

Thesis 3.3, 4.1.1 and 4.2.1 (length resplits, Tab. 4.1); GDRC 5.2; CATALOG §1.1.

The grammar (CATALOG §1.1) has 13 input words and 6 output actions::

    C -> S | S and S | S after S
    S -> V | V twice | V thrice
    V -> U | U D | U opposite D | U around D | turn D | turn opposite D | turn around D    (D = left, right)
    U -> walk | look | run | jump

with ``[[x D]] = TURN_D [[x]]``, ``[[x opposite D]] = TURN_D TURN_D [[x]]``,
``[[x around D]] = (TURN_D [[x]]) x4`` (``[[turn]]`` is empty), ``[[s twice]] = [[s]][[s]]``,
``[[s1 and s2]] = [[s1]][[s2]]`` and ``[[s1 after s2]] = [[s2]][[s1]]``: 34 verb phrases, 102
simple commands and 102 + 2 * 102**2 = 20,910 commands, exactly the official ``tasks.txt``.

Splits (``split``; each reproduces the official files line for line, with their repetitions):

* ``simple``: a seeded random 80/20 split (16,728 / 4,182; the official seed is unknown: point
  ``official_dir`` at the official files to use theirs). IID: roles train / valid_iid / test_iid.
* ``length``: train = output length <= 22, test = output length >= 24 (16,990 / 3,920; no command
  has exactly 23 actions).
* ``addprim_jump`` / ``addprim_turn_left``: test = every command containing the primitive (``jump``
  / the phrase ``turn left``) except the bare primitive; train = the rest, with the bare primitive
  repeated so that it makes up 10% of the train lines (the official README: "over-represented to
  consist of 10% of the samples"): k = n_rest / 9 copies, 13,203 / 9 = 1,467 and 19,701 / 9 = 2,189,
  giving the official 14,670 / 7,706 and 21,890 / 1,208 lines.
* ``template_around_right`` / ``template_opposite_right`` / ``template_right`` /
  ``template_jump_around_right`` (Loula et al., 2018): the template is ``P around right``,
  ``P opposite right``, ``P right`` (P any of walk, look, run, jump) and ``jump around right``; its
  ``turn`` form is ``turn around right``, ``turn opposite right``, ``turn right`` and ``turn around
  right``. test = commands containing the template but not its turn form; train = commands
  containing neither; commands containing the turn form are in neither split (15,225 / 4,476 for the
  first three, 18,528 / 1,173 for ``jump_around_right``).
* ``length_cutoff_N`` for N in 22..40 (thesis Tab. 4.1, after Newman et al., 2020): train = output
  length <= N, test = output length > N. For N = 26 this gives the thesis's Tab. C.7 counts: 16,458
  train + 1,828 IID validation, 2,624 test.

Roles (see :mod:`recombine.tasks.seq2seq_parts`): ``valid_iid`` = 10% of the distinct train-part
commands (the thesis's IID validation of Tab. C.7), ``valid_ood`` = a seeded 10% of the test part,
held out of ``test_ood``. ``group`` = output length (number of actions).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
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

PRIMITIVES = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
INPUT_WORDS = (*PRIMITIVES, "turn", "left", "right", "opposite", "around", "twice", "thrice", "and", "after")
ACTIONS = (*PRIMITIVES.values(), *TURNS.values())

N_COMMANDS = 20910
LENGTH_CUTOFFS = tuple(range(22, 41))
ADD_PRIMITIVE = {"addprim_jump": "jump", "addprim_turn_left": "turn left"}
#: split -> (template phrases, turn form) (Loula et al., 2018; rules checked against the official files).
TEMPLATES = {
    "template_around_right": (tuple(f"{p} around right" for p in PRIMITIVES), "turn around right"),
    "template_opposite_right": (tuple(f"{p} opposite right" for p in PRIMITIVES), "turn opposite right"),
    "template_right": (tuple(f"{p} right" for p in PRIMITIVES), "turn right"),
    "template_jump_around_right": (("jump around right",), "turn around right"),
}
SPLITS = (
    "simple",
    "length",
    *ADD_PRIMITIVE,
    *TEMPLATES,
    *(f"length_cutoff_{n}" for n in LENGTH_CUTOFFS),
)
#: The bare primitive makes up this fraction of the add-primitive train lines (official README).
ADD_PRIMITIVE_SHARE = 0.1
SIMPLE_TRAIN_FRACTION = 0.8

#: split -> folder of the official repository holding ``tasks_{train,test}_<split>.txt``.
OFFICIAL_FOLDERS = {
    "simple": "simple_split",
    "length": "length_split",
    **dict.fromkeys(ADD_PRIMITIVE, "add_prim_split"),
    **dict.fromkeys(TEMPLATES, "template_split"),
}
OFFICIAL_SOURCE = "the SCAN repository by Lake & Baroni, https://github.com/brendenlake/SCAN"
_LINE = re.compile(r"^IN: (.+?) OUT: (.+)$")


@dataclass
class SCANConfig:
    """SCAN (CATALOG §1.1; thesis 4.1.1, Tab. 4.1): which split, validation fractions, official files."""

    split: str = "simple"  # simple, length, addprim_*, template_*, length_cutoff_22..40
    valid_iid_fraction: float = 0.1  # of the distinct train-part commands (thesis Tab. C.7)
    valid_ood_fraction: float = 0.1  # of the test part, held out of test_ood for model selection
    official_dir: str = ""  # "" = generate from the grammar; else read the official files from here

    def __post_init__(self) -> None:
        _validate(self)


def _validate(config: SCANConfig) -> None:
    if config.split not in SPLITS:
        raise UserError(
            f"task.split={config.split!r} is not a SCAN split; {choices_hint(config.split, SPLITS)}"
        )
    for name in ("valid_iid_fraction", "valid_ood_fraction"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise UserError(f"task.{name} must be in [0, 1), got {value}")


# --- the grammar ---


def _verb_phrases() -> list[tuple[str, tuple[str, ...]]]:
    """V -> U | U D | U opposite D | U around D, and the same for ``turn`` without its bare form."""
    phrases = []
    for word in (*PRIMITIVES, "turn"):
        base = (PRIMITIVES[word],) if word in PRIMITIVES else ()  # [[turn]] is empty
        if word in PRIMITIVES:
            phrases.append((word, base))
        for direction, turn in TURNS.items():
            phrases.append((f"{word} {direction}", (turn, *base)))
            phrases.append((f"{word} opposite {direction}", (turn, turn, *base)))
            phrases.append((f"{word} around {direction}", (turn, *base) * 4))
    return phrases


@functools.cache
def generate_examples() -> tuple[Example, ...]:
    """All 20,910 SCAN commands (as word tuples) with their action sequences, in grammar order."""
    simple = []
    for phrase, actions in _verb_phrases():
        simple += [(phrase, actions), (f"{phrase} twice", actions * 2), (f"{phrase} thrice", actions * 3)]
    commands = list(simple)
    for first, first_actions in simple:
        for second, second_actions in simple:
            commands.append((f"{first} and {second}", first_actions + second_actions))
            commands.append((f"{first} after {second}", second_actions + first_actions))
    assert len(commands) == N_COMMANDS
    return tuple((tuple(command.split()), actions) for command, actions in commands)


# --- split rules ---


def split_parts(
    split: str, examples: Sequence[Example], rng: np.random.Generator | None = None
) -> tuple[list[Example], list[Example]]:
    """The official (train part, test part) of ``split`` from the full command set.

    ``rng`` is needed only for ``simple`` (the random 80/20 split).
    """
    padded = [f" {' '.join(words)} " for words, _ in examples]  # " walk twice ": whole-word matching

    def containing(phrase: str) -> np.ndarray:
        return np.array([f" {phrase} " in text for text in padded], dtype=bool)

    in_train = np.zeros(len(examples), dtype=bool)
    in_test = np.zeros(len(examples), dtype=bool)
    repeated: list[Example] = []
    if split == "simple":
        if rng is None:
            raise ValueError("the simple split needs an rng")
        order = rng.permutation(len(examples))
        in_train[order[: round(SIMPLE_TRAIN_FRACTION * len(examples))]] = True
        in_test = ~in_train
    elif split == "length" or split.startswith("length_cutoff_"):
        cutoff = 22 if split == "length" else int(split.rsplit("_", 1)[1])
        in_train = np.array([len(actions) <= cutoff for _, actions in examples], dtype=bool)
        in_test = ~in_train
    elif split in ADD_PRIMITIVE:
        primitive = f" {ADD_PRIMITIVE[split]} "
        bare = np.array([text == primitive for text in padded], dtype=bool)
        in_test = containing(ADD_PRIMITIVE[split]) & ~bare
        in_train = ~in_test & ~bare
        # the bare primitive makes up ADD_PRIMITIVE_SHARE of the train lines (official README)
        repeats = round(int(in_train.sum()) * ADD_PRIMITIVE_SHARE / (1 - ADD_PRIMITIVE_SHARE))
        repeated = [examples[i] for i in np.flatnonzero(bare)] * repeats
    elif split in TEMPLATES:
        templates, turn_form = TEMPLATES[split]
        turn = containing(turn_form)  # in neither split
        template = np.any([containing(t) for t in templates], axis=0)
        in_test = template & ~turn
        in_train = ~template & ~turn
    else:
        raise UserError(f"unknown SCAN split {split!r}; {choices_hint(split, SPLITS)}")
    train = [examples[i] for i in np.flatnonzero(in_train)] + repeated
    return train, [examples[i] for i in np.flatnonzero(in_test)]


# --- official files ---


def _require_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise UserError(
            f"SCAN official_dir {str(directory)!r} is not a directory; get the files from {OFFICIAL_SOURCE}"
        )


def official_file(directory: Path, split: str, part: str) -> Path:
    """Locate ``tasks_<part>_<split>.txt`` in ``directory`` or its official sub-folder."""
    _require_directory(directory)
    name = f"tasks_{part}_{split}.txt"
    candidates = [directory / OFFICIAL_FOLDERS[split] / name, directory / name]
    for path in candidates:
        if path.is_file():
            return path
    raise UserError(
        f"SCAN file {name} not found (looked for {candidates[0]} and {candidates[1]}); "
        f"get {OFFICIAL_FOLDERS[split]}/{name} from {OFFICIAL_SOURCE}"
    )


def read_official(path: Path) -> list[Example]:
    """Read a file of ``IN: <command> OUT: <actions>`` lines; errors name ``file:line``."""
    known_words, known_actions = set(INPUT_WORDS), set(ACTIONS)
    examples: list[Example] = []
    with path.open(encoding="utf-8") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            match = _LINE.match(line)
            if match is None or not match.group(1).split() or not match.group(2).split():
                shown = line if len(line) <= 60 else line[:57] + "..."
                raise UserError(
                    f"{path}:{number}: malformed SCAN line {shown!r}; expected 'IN: <command> OUT: <actions>'"
                )
            command, actions = tuple(match.group(1).split()), tuple(match.group(2).split())
            unknown = [w for w in command if w not in known_words] + [
                a for a in actions if a not in known_actions
            ]
            if unknown:
                raise UserError(f"{path}:{number}: unknown SCAN token {unknown[0]!r}")
            examples.append((command, actions))
    return examples


def _official_parts(config: SCANConfig) -> tuple[list[Example], list[Example]]:
    directory = Path(config.official_dir).expanduser()
    if config.split.startswith("length_cutoff_"):
        # Resplit the full official command list; no split file exists for these cutoffs.
        _require_directory(directory)
        path = directory / "tasks.txt"
        if not path.is_file():
            raise UserError(
                f"SCAN file tasks.txt not found in {directory}; get tasks.txt from {OFFICIAL_SOURCE}"
            )
        return split_parts(config.split, read_official(path))
    return (
        read_official(official_file(directory, config.split, "train")),
        read_official(official_file(directory, config.split, "test")),
    )


# --- the task ---


def _build(config: SCANConfig, seed: int) -> TaskData:
    rng_split, rng_roles = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    if config.official_dir:
        train_part, test_part = _official_parts(config)
        source = str(Path(config.official_dir).expanduser())
    else:
        train_part, test_part = split_parts(config.split, generate_examples(), rng_split)
        source = "grammar"
    roles = split_roles(
        train_part,
        test_part,
        valid_iid_fraction=config.valid_iid_fraction,
        valid_ood_fraction=config.valid_ood_fraction,
        iid_test=config.split == "simple",
        rng=rng_roles,
    )
    input_vocab, output_vocab = Vocabulary.build(list(INPUT_WORDS)), Vocabulary.build(list(ACTIONS))
    splits = {
        name: encode_split(examples, input_vocab, output_vocab, lambda example: len(example[1]))
        for name, examples in roles.items()
    }
    sizes = ", ".join(f"{name} {len(split)}" for name, split in splits.items())
    return TaskData(
        name="scan",
        kind="seq2seq",
        input_vocab=input_vocab,
        output_vocab=output_vocab,
        splits=splits,
        description=(
            f"SCAN {config.split} split (Lake & Baroni 2018; thesis 4.1.1) from {source}: {sizes}. "
            + (
                "IID split: no OOD validation split."
                if config.split == "simple"
                else f"valid_ood = {config.valid_ood_fraction:.0%} of the test part."
            )
        ),
        metadata={"split": config.split, "source": source, "group": "output length"},
    )


@TASKS.register(
    "scan",
    SCANConfig,
    "SCAN commands -> actions (seq2seq): simple, length, addprim_*, template_*, length_cutoff_22..40 "
    "(thesis 4.1.1, Tab. 4.1)",
)
def build_scan(config: SCANConfig, seed: int) -> TaskData:
    """Build (or load from the cache) SCAN for ``config`` and ``seed`` (CATALOG §1.1, thesis 4.1.1).

    Tasks read from ``official_dir`` are not cached (reading the files takes ~0.1 s and they are the
    source of truth).
    """
    _validate(config)
    if config.official_dir:
        return _build(config, seed)
    key = {k: v for k, v in asdict(config).items() if k != "official_dir"} | {"seed": int(seed)}
    return cached("scan", VERSION, key, lambda: _build(config, seed))


# --- export ---


def official_lines(data: TaskData, part: str) -> list[str]:
    """``IN: ... OUT: ...`` lines of the official ``part``: "train" = train + valid_iid, "test" = the rest."""
    return [f"IN: {' '.join(x)} OUT: {' '.join(y)}" for x, y in part_examples(data, part)]


def export_official(data: TaskData, part: str, out: str | Path) -> list[Path]:
    """Write the official ``tasks_<part>_<split>.txt`` content of ``part`` to the file ``out``."""
    lines = official_lines(data, part)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return [out]
