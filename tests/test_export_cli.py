"""``recombine export``: official file formats of SCAN and PCFG SET (CATALOG §1.1, §1.2), and its errors.

The reference for SCAN is the official files in ../shared/data/scan (multisets of lines); for PCFG
SET the exported pair is read back with the official loader and checked with the interpreter.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from recombine import tasks
from recombine.cli import main
from recombine.tasks.pcfg_set import evaluate
from recombine.tasks.seq2seq_parts import part_examples
from shared_data import requires_shared_data, shared_file


@pytest.fixture(autouse=True)
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECOMBINE_NO_CACHE", "1")  # building SCAN is faster than unpickling it


def lines(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines())


@requires_shared_data
@pytest.mark.parametrize(
    ("split", "folder", "part"),
    [
        ("addprim_jump", "add_prim_split", "train"),
        ("addprim_jump", "add_prim_split", "test"),
        ("template_around_right", "template_split", "test"),
    ],
)
def test_export_scan_equals_official_files(
    split: str, folder: str, part: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export" / f"{part}.txt"
    assert main(["export", "scan", "--split", split, "--part", part, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert lines(out) == lines(shared_file("scan", folder, f"tasks_{part}_{split}.txt"))


@requires_shared_data
def test_export_scan_simple_from_official_files(tmp_path: Path) -> None:
    root = shared_file("scan")
    out = tmp_path / "train.txt"
    argv = ["export", "scan", "--split", "simple", "--part", "train", "--out", str(out)]
    assert main([*argv, "--set", f"official_dir={root}", "--seed", "4"]) == 0
    assert lines(out) == lines(root / "simple_split" / "tasks_train_simple.txt")


def test_export_pcfg_round_trip(tmp_path: Path) -> None:
    common = ["--split", "systematicity", "--set", "n_examples=400", "--seed", "2"]
    assert main(["export", "pcfg", *common, "--part", "train", "--out", f"{tmp_path}/official/"]) == 0
    assert main(["export", "pcfg", *common, "--part", "test", "--out", str(tmp_path / "official")]) == 0
    assert main(["export", "pcfg", *common, "--part", "test", "--out", str(tmp_path / "prefix")]) == 0
    assert (tmp_path / "prefix.src").read_text() == (tmp_path / "official" / "test.src").read_text()
    for part in ("train", "test"):
        sources = (tmp_path / "official" / f"{part}.src").read_text().splitlines()
        targets = (tmp_path / "official" / f"{part}.tgt").read_text().splitlines()
        assert [" ".join(evaluate(s.split())) for s in sources] == targets
    generated = tasks.get("pcfg", seed=2, split="systematicity", n_examples=400)
    loaded = tasks.get("pcfg", seed=2, split="systematicity", official_dir=str(tmp_path / "official"))
    for part in ("train", "test"):
        assert Counter(part_examples(loaded, part)) == Counter(part_examples(generated, part))
    assert sum(len(s) for s in generated.splits.values()) == 400


def test_tasks_lists_the_new_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "length_cutoff" in listed["scan"] and "systematicity" in listed["pcfg"]


BAD_EXPORTS = [
    (
        ["export", "ctl", "--split", "x", "--part", "train", "--out", "f"],
        "no official file format for task 'ctl'",
    ),
    (["export", "scan", "--split", "lenght", "--part", "train", "--out", "f"], "valid choices: length"),
    (["export", "scan", "--split", "length", "--part", "valid", "--out", "f"], "invalid choice: 'valid'"),
    (["export", "scan", "--split", "length", "--part", "train"], "required: --out"),
    (
        [
            "export",
            "scan",
            "--split",
            "length",
            "--part",
            "test",
            "--out",
            "f",
            "--set",
            "official_dir=/nonexist",
        ],
        "is not a directory",
    ),
    (
        [
            "export",
            "pcfg",
            "--split",
            "productivity",
            "--part",
            "test",
            "--out",
            "f",
            "--set",
            "n_exampels=5",
        ],
        "valid choices",
    ),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_EXPORTS, ids=[" ".join(a[1:4]) for a, _ in BAD_EXPORTS])
def test_export_errors_are_one_line(
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse errors exit from inside parse_args
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert not (tmp_path / "f").exists()
