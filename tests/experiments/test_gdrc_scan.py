"""GDRC SCAN jump settings A and B (GDRC §5.2, App. B): the composition of the training sets counted
independently, B's outputs against a hand-written SCAN interpreter, and a quick end-to-end run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.experiments.gdrc_scan import GDRC_SCAN, SEEN, UNSEEN, build_scan_jump, scan_jump_parts
from recombine.experiments.scripted_reproduction import run_scripted

PRIMITIVE_WORDS = ("walk", "look", "run", "jump")


def interpret(command: tuple[str, ...]) -> tuple[str, ...]:
    """SCAN's semantics (Lake & Baroni 2018; CATALOG §1.1), written out independently of the generator."""
    words = list(command)
    for conjunction in ("and", "after"):
        if conjunction in words:
            i = words.index(conjunction)
            first, second = interpret(tuple(words[:i])), interpret(tuple(words[i + 1 :]))
            return first + second if conjunction == "and" else second + first
    repeat = {"twice": 2, "thrice": 3}.get(words[-1], 1)
    if repeat > 1:
        words = words[:-1]
    action = () if words[0] == "turn" else (f"I_{words[0].upper()}",)
    if len(words) == 1:
        phrase = action
    else:
        turn = (f"I_TURN_{words[-1].upper()}",)
        if words[1] == "opposite":
            phrase = turn + turn + action
        elif words[1] == "around":
            phrase = (turn + action) * 4
        else:
            phrase = turn + action
    return phrase * repeat


def syntax(command: tuple[str, ...]) -> tuple[str, ...]:
    return tuple("X" if word in PRIMITIVE_WORDS else word for word in command)


def test_interpreter_matches_hand_written_cases() -> None:
    assert interpret(("jump",)) == ("I_JUMP",)
    assert interpret(("turn", "right", "after", "jump", "twice")) == (
        "I_JUMP",
        "I_JUMP",
        "I_TURN_RIGHT",
    )
    assert interpret(("jump", "left", "twice", "after", "jump", "right")) == (
        "I_TURN_RIGHT", "I_JUMP", "I_TURN_LEFT", "I_JUMP", "I_TURN_LEFT", "I_JUMP",
    )  # fmt: skip
    assert interpret(("look", "around", "left")) == ("I_TURN_LEFT", "I_LOOK") * 4


def test_setting_a_is_the_original_addprim_jump_split() -> None:
    train, test = scan_jump_parts("A", 0)
    assert (len(train), len(test)) == (14670, 7706)  # App. B
    with_jump = [command for command, _ in train if "jump" in command]
    assert len(with_jump) == 1467 and set(with_jump) == {("jump",)}  # 10% of the lines, all bare
    assert all("jump" in command and command != ("jump",) for command, _ in test)
    assert all(actions == interpret(command) for command, actions in train + test)
    assert len({command for command, _ in train}) == 13204  # every jump-free command once, plus "jump"


def test_setting_b_redraws_primitives_uniformly_and_keeps_syntax() -> None:
    train_a, test_a = scan_jump_parts("A", 0)
    train_b, test_b = scan_jump_parts("B", 0)
    assert test_b == test_a and len(train_b) == len(train_a)
    assert Counter(syntax(c) for c, _ in train_b) == Counter(syntax(c) for c, _ in train_a)
    assert all(actions == interpret(command) for command, actions in train_b)  # word-action mapping kept

    occurrences = Counter(word for command, _ in train_b for word in command if word in PRIMITIVE_WORDS)
    total = sum(occurrences.values())
    assert total > 20000
    for word in PRIMITIVE_WORDS:  # uniform: binomial std of a share is sqrt(3/16 / total) < 0.003
        assert occurrences[word] / total == pytest.approx(0.25, abs=0.015)
    # the primitive no longer predicts the syntax: jump's share is the same among bare and longer commands
    bare = [command[0] for command, _ in train_b if len(command) == 1]
    longer = [
        word for command, _ in train_b if len(command) > 1 for word in command if word in PRIMITIVE_WORDS
    ]
    assert len(bare) == 1470  # the 1467 bare "jump" lines and walk, look, run
    assert bare.count("jump") / len(bare) == pytest.approx(0.25, abs=0.05)  # 4 std
    assert longer.count("jump") / len(longer) == pytest.approx(0.25, abs=0.015)
    assert scan_jump_parts("B", 1)[0] != train_b  # B's draws follow the seed


def test_seen_flags_count_test_commands_in_training() -> None:
    for setting in ("A", "B"):
        train, test = scan_jump_parts(setting, 2)
        trained = {command for command, _ in train}
        expected = np.array([SEEN if command in trained else UNSEEN for command, _ in test])
        split = build_scan_jump(setting, 2).splits["test_ood"]
        assert np.array_equal(split.group, expected)
        if setting == "A":
            assert (expected == UNSEEN).all()
        else:
            assert 0 < (expected == SEEN).mean() < 1


def test_unknown_setting_is_one_line() -> None:
    with pytest.raises(UserError, match="unknown GDRC SCAN setting 'C'"):
        scan_jump_parts("C", 0)


def test_quick_reproduction_run(tmp_path: Path) -> None:
    config = GDRC_SCAN.resolve_config(2, True, {})
    assert config.seeds == [0, 1] and config.steps == 10
    report = run_scripted(GDRC_SCAN, tmp_path, quick=True, overrides={"steps": 4, "eval_every": 2})
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["reproduction"] == "gdrc-scan"
    runs = results["runs"]
    assert [run["setting"] for run in runs] == ["A", "B"]
    for run in runs:
        assert run["steps"] == [0, 2, 4] and len(run["batch_accuracy"]) == 4
        assert all(0.0 <= a <= 1.0 for a in run["accuracy"]["test"])
    assert runs[0]["test_seen_share"] == 0.0  # A never trains on a test command
    assert "settings A and B" in report.read_text() and (tmp_path / "gdrc_scan.png").is_file()
