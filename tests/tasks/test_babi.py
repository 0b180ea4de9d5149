"""bAbI loader (thesis 2.3): the official line format, story boundaries, multi-word answers, the step
layout with thinking steps, error rates against a loop, and one-line errors. The official files are not
in ../shared, so the tests write files in the official format by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.tasks.babi import (
    ANSWER,
    NO_TARGET,
    THINK,
    BabiConfig,
    BabiQuestion,
    build_babi,
    error_rates,
    read_babi,
    read_babi_file,
    summarise_errors,
)

# two stories of task 1 (the second has two questions), in the official format (note the space
# before the first tab of a question line)
QA1 = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
1 Daniel went back to the hallway.
2 Sandra moved to the garden.
3 Where is Daniel? \thallway\t1
4 John moved to the office.
5 Where is John? \toffice\t4
"""
# task 8 (lists/sets): comma-separated answers of several words
QA8 = """1 Mary got the football there.
2 Mary took the apple there.
3 What is Mary carrying? \tfootball,apple\t1 2
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_official_lines_become_stories_with_questions_answers_and_supporting_facts(tmp_path: Path) -> None:
    path = (
        write(tmp_path, {"qa1_single-supporting-fact_train.txt": QA1})
        / "qa1_single-supporting-fact_train.txt"
    )
    stories = read_babi_file(path, task=1)
    assert len(stories) == 2 and all(s.task == 1 for s in stories)
    assert stories[0].items[0] == ("mary", "moved", "to", "the", "bathroom", ".")
    assert stories[0].questions == [BabiQuestion(("where", "is", "mary", "?"), ("bathroom",), (1,))]
    assert [q.answers for q in stories[1].questions] == [("hallway",), ("office",)]
    assert [q.supporting for q in stories[1].questions] == [(1,), (4,)]
    assert len(stories[1].items) == 5


def test_steps_put_thinking_steps_after_each_question_and_one_answer_step_per_word(tmp_path: Path) -> None:
    write(tmp_path, {"qa8_train.txt": QA8, "qa8_valid.txt": QA8, "qa8_test.txt": QA8})
    data = build_babi(BabiConfig(data_dir=str(tmp_path), tasks=[8], thinking_steps=2))
    inputs, targets = data.parts["test"].inputs[0], data.parts["test"].targets[0]
    words = [data.words[i] for i in inputs]
    sentence_words = "mary got the football there . mary took the apple there . what is mary carrying ?"
    expected = sentence_words.split(" ")
    assert words == expected + [THINK, THINK, ANSWER, ANSWER]
    answers = [data.answers[t] if t != NO_TARGET else None for t in targets]
    assert answers == [None] * (len(expected) + 2) + ["football", "apple"]
    assert data.answers == ["apple", "football"]
    assert data.words[:3] == ["<pad>", THINK, ANSWER] and len(set(data.words)) == len(data.words)


def test_without_a_valid_file_a_seeded_part_of_train_is_held_out(tmp_path: Path) -> None:
    many = "".join(f"1 Mary went to room{k}.\n2 Where is Mary? \troom{k}\t1\n" for k in range(20))
    write(
        tmp_path, {"qa1_single-supporting-fact_train.txt": many, "qa1_single-supporting-fact_test.txt": QA1}
    )
    config = BabiConfig(data_dir=str(tmp_path), tasks=[1], valid_fraction=0.25)
    parts = read_babi(config)
    assert (len(parts["train"]), len(parts["valid"]), len(parts["test"])) == (15, 5, 2)
    names = [{s.questions[0].answers for s in parts[p]} for p in ("train", "valid")]
    assert not names[0] & names[1]
    assert read_babi(config)["valid"] == parts["valid"]  # deterministic
    other = read_babi(BabiConfig(data_dir=str(tmp_path), tasks=[1], valid_fraction=0.25, seed=1))
    assert other["valid"] != parts["valid"]
    # a task's held-out stories do not depend on which other tasks are read, nor on their order
    write(tmp_path, {"qa2_two-supporting-facts_train.txt": many, "qa2_two-supporting-facts_test.txt": QA1})
    both = read_babi(BabiConfig(data_dir=str(tmp_path), tasks=[2, 1], valid_fraction=0.25))
    assert [s for s in both["valid"] if s.task == 1] == parts["valid"]


def test_error_rates_match_a_loop_and_solved_means_below_five_percent(tmp_path: Path) -> None:
    write(tmp_path, {"qa1_train.txt": QA1, "qa1_test.txt": QA1, "qa8_train.txt": QA8, "qa8_test.txt": QA8})
    data = build_babi(BabiConfig(data_dir=str(tmp_path), tasks=[1, 8], valid_fraction=0.5))
    test = data.parts["test"]
    rng = np.random.default_rng(0)
    predictions = [np.where(rng.random(len(t)) < 0.5, t, (t + 1) % len(data.answers)) for t in test.targets]
    rates = error_rates(predictions, test)
    for task in (1, 8):
        wrong = total = 0
        for p, t, k in zip(predictions, test.targets, test.tasks, strict=True):
            for step in range(len(t)):
                if k == task and t[step] != NO_TARGET:
                    total += 1
                    wrong += int(p[step] != t[step])
        assert rates[task] == pytest.approx(wrong / total)
    assert error_rates(test.targets, test) == {1: 0.0, 8: 0.0}
    summary = summarise_errors({1: 0.0, 2: 0.049, 3: 0.05, 4: 0.5})
    assert summary["failed_tasks"] == 2 and summary["mean_error"] == pytest.approx(0.14975)
    assert summary["solved"] == {1: True, 2: True, 3: False, 4: False}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 Mary moved.\nx Where?\tbathroom\t1\n", ":2: malformed bAbI line 'x Where.*line number"),
        ("1 Mary moved.\n3 John went.\n", ":2: .*line number 3 follows 1"),
        ("1 Mary moved.\n2 Where is Mary?\n", ":2: .*a question needs"),
        ("1 Mary moved.\n2 Where is Mary?\t\t1\n", ":2: .*expected 'question"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\tone\n", ":2: .*supporting lines numbers"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "qa1_train.txt"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        read_babi_file(path, 1)


def test_missing_files_and_bad_configs_are_one_line_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="bAbI directory .* not found; get .*tasks_1-20_v1-2"):
        read_babi(BabiConfig(data_dir=str(tmp_path / "nowhere")))
    write(tmp_path, {"qa1_train.txt": QA1})
    with pytest.raises(UserError, match="bAbI task 1 has no test file"):
        read_babi(BabiConfig(data_dir=str(tmp_path), tasks=[1]))
    for bad in ({"tasks": [0]}, {"tasks": [1, 1]}, {"thinking_steps": -1}, {"valid_fraction": 1.0}):
        with pytest.raises(UserError):
            BabiConfig(**bad)  # type: ignore[arg-type]
