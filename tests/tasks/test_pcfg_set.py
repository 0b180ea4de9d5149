"""PCFG SET (CATALOG §1.2; thesis 4.1.1, 4.3.3): interpreter against the official targets, generator, splits.

References: the official ``dev``/``test`` files in ../shared/data/pcfgset (every target must be
reproduced from its source line), hand-computed function values, and closed-form probabilities of
the conditioned PCFG.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from recombine import tasks
from recombine.errors import UserError
from recombine.tasks import pcfg_set
from recombine.tasks.base import Seq2SeqSplit, TaskData
from recombine.tasks.pcfg_set import PCFGSetConfig, evaluate
from recombine.tasks.seq2seq_parts import part_examples
from shared_data import requires_shared_data, shared_file

FUNCTIONS = {
    "copy", "reverse", "shift", "echo", "swap_first_last", "repeat",
    "append", "prepend", "remove_first", "remove_second",
}  # fmt: skip
PAIRS = {
    ("swap_first_last", "repeat"),
    ("append", "remove_second"),
    ("repeat", "remove_second"),
    ("append", "swap_first_last"),
}
N_SMALL = 3000


def one_line_error(call: Callable[[], object]) -> str:
    with pytest.raises(UserError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def read_pairs(name: str) -> list[tuple[str, str]]:
    sources = shared_file("pcfgset", f"{name}.src").read_text().splitlines()
    targets = shared_file("pcfgset", f"{name}.tgt").read_text().splitlines()
    assert len(sources) == len(targets)
    return list(zip(sources, targets, strict=True))


def decoded(data: TaskData, role: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    split = data.splits[role]
    assert isinstance(split, Seq2SeqSplit)
    return [
        (tuple(data.input_vocab.decode(x)), tuple(data.output_vocab.decode(y)))
        for x, y in zip(split.inputs, split.outputs, strict=True)
    ]


@pytest.fixture(scope="module")
def small() -> Iterator[dict[str, TaskData]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECOMBINE_NO_CACHE", "1")
        yield {
            split: tasks.get("pcfg", seed=0, split=split, n_examples=N_SMALL)
            for split in ("productivity", "systematicity")
        }


@requires_shared_data
@pytest.mark.parametrize("name", ["dev", "test"])
def test_interpreter_reproduces_official_targets(name: str) -> None:
    pairs = read_pairs(name)
    assert len(pairs) in (4860, 9721)
    for number, (source, target) in enumerate(pairs, start=1):
        assert " ".join(evaluate(source.split())) == target, f"{name}.src:{number}"


def test_function_semantics() -> None:
    s = "A1 B2 C3 D4"
    cases = {
        f"copy {s}": "A1 B2 C3 D4",
        f"reverse {s}": "D4 C3 B2 A1",
        f"shift {s}": "B2 C3 D4 A1",
        f"echo {s}": "A1 B2 C3 D4 D4",
        f"swap_first_last {s}": "D4 B2 C3 A1",
        "repeat A1 B2": "A1 B2 A1 B2",
        "append A1 B2 , C3": "A1 B2 C3",
        "prepend A1 B2 , C3": "C3 A1 B2",
        "remove_first A1 B2 , C3 D4": "C3 D4",
        "remove_second A1 B2 , C3 D4": "A1 B2",
        # nesting: binary arguments end at ',' and nested calls take their own arguments first
        "append remove_first A1 , B2 , reverse C3 D4": "B2 D4 C3",
        "prepend shift A1 B2 C3 , append D4 , E5": "D4 E5 B2 C3 A1",
        "echo remove_second repeat A1 , B2": "A1 A1 A1",
    }
    for program, value in cases.items():
        assert " ".join(evaluate(program.split())) == value, program


@pytest.mark.parametrize(
    "program",
    [
        "",
        "A1 B2",
        "copy",
        "append A1 B2",
        "copy A1 , B2",
        "append A1 , ",
        "copy A1 B2 reverse C3",
        "append , A1",
    ],
)
def test_interpreter_rejects_malformed_programs(program: str) -> None:
    with pytest.raises(ValueError):
        evaluate(program.split())


@requires_shared_data
def test_function_count_histogram_is_the_official_corpus() -> None:
    counts = Counter(
        sum(token in FUNCTIONS for token in source.split())
        for name in ("dev", "test")
        for source, _ in read_pairs(name)
    )
    assert dict(counts) == pcfg_set.OFFICIAL_FUNCTION_COUNTS


def test_generated_examples_are_valid(small: dict[str, TaskData]) -> None:
    data = small["productivity"]
    assert data.kind == "seq2seq"
    assert set(data.splits) == {"train", "valid_iid", "valid_ood", "test_ood"}
    assert len(data.input_vocab) == 1 + 10 + 1 + 520 and len(data.output_vocab) == 1 + 520
    examples = [e for role in data.splits for e in decoded(data, role)]
    assert len(examples) == N_SMALL and len({x for x, _ in examples}) == N_SMALL  # distinct programs
    for source, target in examples:
        assert tuple(evaluate(source)) == target
        strings, run = [], 0
        for token in (*source, ","):
            if token in FUNCTIONS or token == ",":
                if run:
                    strings.append(run)
                run = 0
            else:
                run += 1
        assert set(strings) <= {2, 3, 4, 5}
    # the number of functions follows the official histogram, apportioned to N_SMALL examples
    total = sum(pcfg_set.OFFICIAL_FUNCTION_COUNTS.values())
    counts = Counter(sum(t in FUNCTIONS for t in x) for x, _ in examples)
    for n, weight in pcfg_set.OFFICIAL_FUNCTION_COUNTS.items():
        assert abs(counts[n] - N_SMALL * weight / total) < 1, n


def test_productivity_split(small: dict[str, TaskData]) -> None:
    data = small["productivity"]
    for role, split in data.splits.items():
        assert isinstance(split, Seq2SeqSplit)
        n_functions = [sum(t in FUNCTIONS for t in x) for x, _ in decoded(data, role)]
        assert split.group.tolist() == n_functions
        assert (max(n_functions) <= 8) if role in ("train", "valid_iid") else (min(n_functions) >= 9), role
    assert len(data.splits["valid_ood"]) == int(
        0.1 * (len(data.splits["valid_ood"]) + len(data.splits["test_ood"]))
    )


def test_systematicity_split(small: dict[str, TaskData]) -> None:
    data = small["systematicity"]
    for role in data.splits:
        has_pair = [any(p in PAIRS for p in zip(x, x[1:], strict=False)) for x, _ in decoded(data, role)]
        assert all(has_pair) if role in ("valid_ood", "test_ood") else not any(has_pair), role
    test_share = (len(data.splits["valid_ood"]) + len(data.splits["test_ood"])) / N_SMALL
    assert 0.08 < test_share < 0.14  # official systematicity test share: 10,175 / 92,343 = 11.0%


def test_roles_disjoint_and_seeded(small: dict[str, TaskData], monkeypatch: pytest.MonkeyPatch) -> None:
    data = small["systematicity"]
    inputs = {role: {x for x, _ in decoded(data, role)} for role in data.splits}
    roles = list(inputs)
    for i, a in enumerate(roles):
        for b in roles[i + 1 :]:
            assert not inputs[a] & inputs[b], (a, b)
    monkeypatch.delenv("RECOMBINE_NO_CACHE")  # through the on-disk cache: a miss (stored), then a hit
    stored = tasks.get("pcfg", seed=0, split="systematicity", n_examples=N_SMALL)
    again = tasks.get("pcfg", seed=0, split="systematicity", n_examples=N_SMALL)
    for role in data.splits:
        assert decoded(stored, role) == decoded(again, role) == decoded(data, role), role
    other = tasks.get("pcfg", seed=1, split="systematicity", n_examples=300)
    assert not {x for x, _ in decoded(other, "train")} & inputs["train"]


def test_conditioned_pcfg_probabilities() -> None:
    """P(root is unary | n functions): n=1: 0.75 / (0.75 + 0.25 * 0.75) = 0.8;
    n=2: p_u p_n T1 / (p_u p_n T1 + (1 - p_u) 2 (1 - p_n) p_n T1) = 0.75 / (0.75 + 0.375) = 2/3."""
    sampler = pcfg_set._ConditionalSampler(PCFGSetConfig(), 2, np.random.default_rng(0))
    for n, expected in ((1, 0.8), (2, 2 / 3)):
        programs = [sampler.program(n)[0] for _ in range(3000)]
        assert all(sum(t in FUNCTIONS for t in p) == n for p in programs)
        unary = np.mean(
            [p[0] not in ("append", "prepend", "remove_first", "remove_second") for p in programs]
        )
        assert abs(unary - expected) < 0.03, (n, unary)


@requires_shared_data
def test_official_loader(tmp_path: Path) -> None:
    folder = tmp_path / "productivity"
    folder.mkdir()
    for ours, official in (("train", "dev"), ("test", "test")):  # any pair of official files will do
        for suffix in ("src", "tgt"):
            shutil.copy(shared_file("pcfgset", f"{official}.{suffix}"), folder / f"{ours}.{suffix}")
    data = tasks.get("pcfg", split="productivity", official_dir=str(tmp_path))
    for part, official in (("train", "dev"), ("test", "test")):
        expected = Counter((tuple(s.split()), tuple(t.split())) for s, t in read_pairs(official))
        assert Counter(part_examples(data, part)) == expected


@requires_shared_data
def test_official_loader_missing_files() -> None:
    shipped = shared_file("pcfgset")  # has dev and test, not train
    message = one_line_error(lambda: tasks.get("pcfg", split="systematicity", official_dir=str(shipped)))
    assert "train.src not found" in message and "am-i-compositional" in message


def test_official_loader_errors(tmp_path: Path) -> None:
    missing = one_line_error(lambda: tasks.get("pcfg", official_dir=str(tmp_path / "nope")))
    assert "is not a directory" in missing and "am-i-compositional" in missing
    for part in ("train", "test"):
        (tmp_path / f"{part}.src").write_text("copy A1 B2\nreverse A1 B2\n")
        (tmp_path / f"{part}.tgt").write_text("A1 B2\nB2 A1\n")
    (tmp_path / "train.tgt").write_text("A1 B2\n")
    short = one_line_error(lambda: tasks.get("pcfg", official_dir=str(tmp_path)))
    assert short.startswith(f"{tmp_path / 'train.tgt'}:2: file ends early")
    (tmp_path / "train.tgt").write_text("A1 B2\nB2 a1\n")
    unknown = one_line_error(lambda: tasks.get("pcfg", official_dir=str(tmp_path)))
    assert unknown.startswith(f"{tmp_path / 'train.tgt'}:2: unknown PCFG SET token 'a1'")
    (tmp_path / "train.tgt").write_text("A1 B2\nB2 A1\n")
    (tmp_path / "test.src").write_text("copy A1 B2\n\nreverse A1 B2\n")
    (tmp_path / "test.tgt").write_text("A1 B2\nB2 A1\nB2 A1\n")
    empty = one_line_error(lambda: tasks.get("pcfg", official_dir=str(tmp_path)))
    assert empty.startswith(f"{tmp_path / 'test.src'}:2: empty line")


def test_bad_config_values() -> None:
    assert "valid choices: productivity" in one_line_error(lambda: tasks.get("pcfg", split="productive"))
    assert "p_unary" in one_line_error(lambda: tasks.get("pcfg", p_unary=1.5))
    assert "max_string_length" in one_line_error(lambda: tasks.get("pcfg", min_string_length=6))
