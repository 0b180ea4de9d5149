"""SCAN (CATALOG §1.1; thesis 4.1.1, Tab. 4.1, Tab. C.7) against the official files in ../shared/data/scan.

The references are the official files themselves (compared as multisets of lines, so the
add-primitive repetitions count) and counts stated in the official README and the thesis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from recombine import tasks
from recombine.errors import UserError
from recombine.tasks import scan
from recombine.tasks.base import Seq2SeqSplit, TaskData
from recombine.tasks.seq2seq_parts import part_examples
from shared_data import requires_shared_data, shared_file

#: Official line counts (train, test) of every split file (wc -l of the official repository).
OFFICIAL_COUNTS = {
    "simple": (16728, 4182),
    "length": (16990, 3920),
    "addprim_jump": (14670, 7706),
    "addprim_turn_left": (21890, 1208),
    "template_around_right": (15225, 4476),
    "template_opposite_right": (15225, 4476),
    "template_right": (15225, 4476),
    "template_jump_around_right": (18528, 1173),
}
FOLDERS = {
    "simple": "simple_split",
    "length": "length_split",
    "addprim_jump": "add_prim_split",
    "addprim_turn_left": "add_prim_split",
    **{name: "template_split" for name in OFFICIAL_COUNTS if name.startswith("template_")},
}


Builder = Callable[..., TaskData]


@pytest.fixture(scope="module")
def build() -> Iterator[Builder]:
    """``tasks.get("scan", ...)`` memoized within this module, bypassing the on-disk cache.

    Pickling ~40k small arrays costs more than generating SCAN, so the tests build each task once
    in memory; ``test_simple_split_is_seeded_and_iid`` covers the cache.
    """
    built: dict[tuple[object, ...], TaskData] = {}

    def get(split: str, seed: int = 0, **config: object) -> TaskData:
        key = (split, seed, *sorted(config.items()))
        if key not in built:
            built[key] = tasks.get("scan", seed=seed, split=split, **config)
        return built[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECOMBINE_NO_CACHE", "1")
        yield get


def commands(data: TaskData, role: str) -> list[str]:
    split = data.splits[role]
    assert isinstance(split, Seq2SeqSplit)
    return [" ".join(data.input_vocab.decode(x)) for x in split.inputs]


def one_line_error(call: Callable[[], object]) -> str:
    with pytest.raises(UserError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


@requires_shared_data
def test_grammar_reproduces_tasks_txt() -> None:
    official = shared_file("scan", "tasks.txt").read_text().splitlines()
    ours = [f"IN: {' '.join(words)} OUT: {' '.join(actions)}" for words, actions in scan.generate_examples()]
    assert len(official) == len(ours) == len(set(ours)) == 20910
    assert set(ours) == set(official)


@requires_shared_data
@pytest.mark.parametrize("split", [s for s in OFFICIAL_COUNTS if s != "simple"])
def test_split_rules_reproduce_official_files(split: str) -> None:
    """The split rules give the official files line for line (the full task, with its roles, is
    checked end to end against the same files in tests/test_export_cli.py)."""
    parts = scan.split_parts(split, scan.generate_examples())
    for part, examples in zip(("train", "test"), parts, strict=True):
        ours = [f"IN: {' '.join(x)} OUT: {' '.join(y)}" for x, y in examples]
        official = shared_file("scan", FOLDERS[split], f"tasks_{part}_{split}.txt").read_text().splitlines()
        assert Counter(ours) == Counter(official), (split, part)


@requires_shared_data
def test_task_roles_reproduce_official_files(build: Builder) -> None:
    data = build("template_right")
    for part in ("train", "test"):
        official = shared_file("scan", "template_split", f"tasks_{part}_template_right.txt")
        assert Counter(scan.official_lines(data, part)) == Counter(official.read_text().splitlines())


@pytest.mark.parametrize("split", list(OFFICIAL_COUNTS))
def test_official_line_counts(split: str) -> None:
    train, test = scan.split_parts(split, scan.generate_examples(), np.random.default_rng(0))
    assert (len(train), len(test)) == OFFICIAL_COUNTS[split]


def test_add_primitive_repetition_and_rules(build: Builder) -> None:
    for split, primitive, repeats in (
        ("addprim_jump", "jump", 1467),
        ("addprim_turn_left", "turn left", 2189),
    ):
        data = build(split)
        train_part = [" ".join(x) for x, _ in part_examples(data, "train")]
        test_part = [" ".join(x) for x, _ in part_examples(data, "test")]
        assert Counter(train_part)[primitive] == repeats  # 10% of the train lines
        assert repeats * 10 == len(train_part)
        assert primitive not in commands(data, "valid_iid")
        assert all(f" {primitive} " in f" {c} " and c != primitive for c in test_part)
        assert not any(f" {primitive} " in f" {c} " for c in train_part if c != primitive)


def test_template_splits_exclude_the_turn_form(build: Builder) -> None:
    data = build("template_jump_around_right")
    train_part = [" ".join(x) for x, _ in part_examples(data, "train")]
    test_part = [" ".join(x) for x, _ in part_examples(data, "test")]
    assert all("jump around right" in c and "turn around right" not in c for c in test_part)
    assert not any("jump around right" in c or "turn around right" in c for c in train_part)
    assert len(train_part) + len(test_part) == 20910 - 1209  # 1,209 commands contain "turn around right"


def test_roles_are_disjoint_and_groups_are_output_lengths(build: Builder) -> None:
    data = build("length")
    assert data.kind == "seq2seq"
    assert set(data.splits) == {"train", "valid_iid", "valid_ood", "test_ood"}
    assert data.selection_split == "valid_ood"
    assert len(data.input_vocab) == 14 and len(data.output_vocab) == 7  # 13 words, 6 actions, <pad>
    sets = {role: set(commands(data, role)) for role in data.splits}
    assert sum(len(s) for s in sets.values()) == 20910
    assert len(set.union(*sets.values())) == 20910
    for role, split in data.splits.items():
        assert isinstance(split, Seq2SeqSplit)
        assert split.group.tolist() == [len(y) for y in split.outputs], role
    assert max(data.splits["train"].group) <= 22 and max(data.splits["valid_iid"].group) <= 22
    assert min(data.splits["valid_ood"].group) >= 24 and min(data.splits["test_ood"].group) >= 24


def test_length_cutoff_26_matches_thesis_counts(build: Builder) -> None:
    data = build("length_cutoff_26")
    sizes = {role: len(split) for role, split in data.splits.items()}
    # thesis Tab. C.7: 16,458 train, 1,828 IID validation, 2,624 generalization test
    assert sizes["train"] == 16458 and sizes["valid_iid"] == 1828
    assert sizes["valid_ood"] + sizes["test_ood"] == 2624 and sizes["valid_ood"] == 262


def test_all_length_cutoffs() -> None:
    examples = scan.generate_examples()
    assert 23 not in {len(actions) for _, actions in examples}  # so "length" (<= 22 / >= 24) is cutoff 22
    assert scan.split_parts("length", examples) == scan.split_parts("length_cutoff_22", examples)
    for cutoff in range(22, 41):
        train, test = scan.split_parts(f"length_cutoff_{cutoff}", examples)
        assert len(train) + len(test) == 20910
        assert max(len(y) for _, y in train) <= cutoff < min(len(y) for _, y in test)


def test_simple_split_is_seeded_and_iid(build: Builder) -> None:
    first, other = build("simple", seed=1), build("simple", seed=2)
    again = tasks.get("scan", split="simple", seed=1)  # rebuilt, not memoized
    assert set(first.splits) == {"train", "valid_iid", "test_iid"}  # IID: no OOD validation split
    for role in first.splits:
        assert commands(first, role) == commands(again, role), role
    assert set(commands(first, "test_iid")) != set(commands(other, "test_iid"))
    assert len(first.splits["train"]) + len(first.splits["valid_iid"]) == 16728
    assert len(first.splits["test_iid"]) == 4182
    assert not set(commands(first, "train")) & set(commands(first, "test_iid"))


@requires_shared_data
def test_official_loader_equals_generator(build: Builder) -> None:
    loaded = build("length", official_dir=str(shared_file("scan")))
    generated = build("length")
    assert loaded.metadata["source"] != generated.metadata["source"]
    for role in generated.splits:
        assert commands(loaded, role) == commands(generated, role), role
    # the cutoff resplits read the official tasks.txt
    cutoff = tasks.get("scan", split="length_cutoff_40", official_dir=str(shared_file("scan")))
    assert sum(len(s) for s in cutoff.splits.values()) == 20910


def test_official_loader_flat_layout(tmp_path: Path) -> None:
    (tmp_path / "tasks_train_simple.txt").write_text("IN: walk OUT: I_WALK\nIN: jump OUT: I_JUMP\n" * 5)
    (tmp_path / "tasks_test_simple.txt").write_text("IN: walk left OUT: I_TURN_LEFT I_WALK\n")
    data = tasks.get("scan", split="simple", official_dir=str(tmp_path))  # simple_split/ is optional
    assert Counter(scan.official_lines(data, "train")) == {
        "IN: walk OUT: I_WALK": 5,
        "IN: jump OUT: I_JUMP": 5,
    }
    assert scan.official_lines(data, "test") == ["IN: walk left OUT: I_TURN_LEFT I_WALK"]


def test_official_loader_errors(tmp_path: Path) -> None:
    missing = one_line_error(lambda: tasks.get("scan", split="length", official_dir=str(tmp_path / "nope")))
    assert "is not a directory" in missing and "github.com/brendenlake/SCAN" in missing
    message = one_line_error(lambda: tasks.get("scan", split="length", official_dir=str(tmp_path)))
    assert "tasks_train_length.txt not found" in message and "github.com/brendenlake/SCAN" in message
    cutoff = one_line_error(lambda: tasks.get("scan", split="length_cutoff_30", official_dir=str(tmp_path)))
    assert "tasks.txt not found" in cutoff

    train = tmp_path / "tasks_train_length.txt"
    (tmp_path / "tasks_test_length.txt").write_text("IN: jump twice OUT: I_JUMP I_JUMP\n")
    train.write_text("IN: walk OUT: I_WALK\nwalk -> I_WALK\n")
    malformed = one_line_error(lambda: tasks.get("scan", split="length", official_dir=str(tmp_path)))
    assert malformed.startswith(f"{train}:2: malformed SCAN line")
    train.write_text("IN: walk OUT: I_WALK\n\nIN: fly OUT: I_FLY\n")
    unknown = one_line_error(lambda: tasks.get("scan", split="length", official_dir=str(tmp_path)))
    assert unknown.startswith(f"{train}:3: unknown SCAN token 'fly'")


def test_bad_config_values() -> None:
    assert "valid choices: length" in one_line_error(lambda: tasks.get("scan", split="lenght"))
    assert "length_cutoff_41" in one_line_error(lambda: tasks.get("scan", split="length_cutoff_41"))
    assert "[0, 1)" in one_line_error(lambda: tasks.get("scan", valid_ood_fraction=1.5))
