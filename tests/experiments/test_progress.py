"""Progress output of the scripted reproductions: one ``[k/N]`` line per finished trial on stderr, and a
step bar on a terminal or a line per tenth of the steps elsewhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pseudo_terminal import stderr_on_pseudo_terminal
from recombine.experiments import REPRODUCTIONS
from recombine.experiments.progress import (
    MIN_SECONDS_BETWEEN_LINES,
    MilestoneLines,
    training_bar,
    trial_done,
)
from recombine.experiments.scripted_reproduction import ScriptedReproduction, run_scripted
from tiny_dnc import TINY_DNC_REPRODUCTION

TRIAL_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+?): (.*)$")

# (name, overrides on top of --quick with --seeds 2, number of trials); each runs in about a second
TINY_RUNS = [
    (
        "dnc-repeat-copy",
        {**TINY_DNC_REPRODUCTION, "variants": ["dnc", "dnc_ds"]},
        4,  # 2 variants x 2 seeds
    ),
    ("gdrc-toy", {"steps": 8, "snapshot_steps": [0, 8], "grid_size": 5}, 2),
    (
        "masks-double-add",
        {"analysis": {"train_steps": 5, "mask": {"steps": 5}, "task": {"n_train": 200, "n_test": 50}}},
        2,
    ),
    ("smfr-double-add", {"steps": 4, "eval_every": 2}, 12),  # the 6 --quick architectures x 2 seeds
]


def trial_lines(stderr: str) -> list[re.Match[str]]:
    return [match for line in stderr.splitlines() if (match := TRIAL_LINE.match(line))]


@pytest.mark.parametrize(("name", "overrides", "n_trials"), TINY_RUNS, ids=[run[0] for run in TINY_RUNS])
def test_a_scripted_reproduction_prints_one_line_per_trial(
    name: str, overrides: dict[str, Any], n_trials: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reproduction = REPRODUCTIONS[name]
    assert isinstance(reproduction, ScriptedReproduction)
    run_scripted(reproduction, tmp_path, seeds=2, quick=True, overrides=overrides)
    captured = capsys.readouterr()
    lines = trial_lines(captured.err)
    assert len(lines) == n_trials
    assert [int(m[1]) for m in lines] == list(range(1, n_trials + 1))
    assert {int(m[2]) for m in lines} == {n_trials}
    names = [m[3] for m in lines]
    assert len(set(names)) == n_trials and all(re.search(r"seed [01]$", n) for n in names)
    assert all(re.search(r"\d s\b", m[4]) for m in lines)  # the wall time
    assert "\r" not in captured.err  # stderr is not a terminal: no step bar
    assert not trial_lines(captured.out)  # progress goes to stderr only


def test_the_trial_line_format(capsys: pytest.CaptureFixture[str]) -> None:
    line = trial_done(3, 6, "dnc_ds seed 1", 203.4, "final eval loss 0.12", steps=2000)
    assert line == "[3/6] dnc_ds seed 1: 2000 steps, 203 s, final eval loss 0.12"
    assert trial_done(1, 2, "seed 0", 1.26) == "[1/2] seed 0: 1.3 s"
    assert capsys.readouterr().err.splitlines() == [line, "[1/2] seed 0: 1.3 s"]


MILESTONE_LINE = re.compile(r"^demo seed 0: (\d+)/(\d+) steps \((\d+) %\), [\d.]+ s, ~[\d.]+ s left$")


@pytest.mark.parametrize(("total", "updates"), [(25, [1] * 25), (7, [1] * 7), (3, [3]), (40, [13, 13, 14])])
def test_off_a_terminal_the_bar_prints_a_line_per_tenth_of_the_steps(
    total: int, updates: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    with MilestoneLines(total, "demo seed 0", min_seconds=0.0) as bar:
        for n in updates:
            bar.update(n)
    assert bar.n == total
    out, err = capsys.readouterr()
    assert out == "" and "\r" not in err
    lines = [MILESTONE_LINE.match(line) for line in err.splitlines()]
    assert all(lines), err
    counts = [int(m[1]) for m in lines]  # type: ignore[index]
    # one line each time the count passes a further tenth, none twice, the last at the end
    tenths = [count * 10 // total for count in counts]
    assert tenths == sorted(set(tenths)) and counts[-1] == total
    expected_tenths = {min(10, sum(updates[: i + 1]) * 10 // total) for i in range(len(updates))} - {0}
    assert set(tenths) == expected_tenths
    assert all(int(m[2]) == total and int(m[3]) == 100 * int(m[1]) // total for m in lines)  # type: ignore[index]


def test_a_resumed_loop_starts_at_its_step_and_prints_only_the_tenths_still_ahead(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A loop resumed at step 55 of 100 (a DNC run continued from its checkpoint): the count starts there, the
    tenths already behind print nothing, each later tenth one line, the last at 100 %."""
    with MilestoneLines(100, "demo seed 0", min_seconds=0.0, initial=55) as bar:
        for _ in range(45):
            bar.update()
    assert bar.n == 100
    counts = [int(m[1]) for m in map(MILESTONE_LINE.match, capsys.readouterr().err.splitlines()) if m]
    assert counts == [60, 70, 80, 90, 100]


def test_a_resumed_loop_waits_for_a_twentieth_of_the_rest_before_its_first_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A grid resumed at 20,900 of 210,000 steps: 100 steps later it passes the 10 % mark, but a time left
    estimated from 100 steps (and the trials' start-up) would be a guess; the first line waits until a
    twentieth of the 189,100 steps left is done, then one line per tenth as before."""
    with MilestoneLines(210_000, "demo seed 0", min_seconds=0.0, initial=20_900) as bar:
        for _ in range(1891):
            bar.update(100)
    counts = [int(m[1]) for m in map(MILESTONE_LINE.match, capsys.readouterr().err.splitlines()) if m]
    assert counts[0] >= 20_900 + 189_100 / 20 and counts[0] < 42_000  # still inside the second tenth
    assert [count * 10 // 210_000 for count in counts] == list(range(1, 11)) and counts[-1] == 210_000


def test_a_postfix_is_appended_to_the_lines_after_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``set_postfix_str`` (tqdm's name, so one loop serves both) ends the later lines with the loop's latest
    number; the lines before it stay as they were."""
    with MilestoneLines(10, "demo seed 0", min_seconds=0.0) as bar:
        bar.update(5)
        bar.set_postfix_str("eval loss 1.5")
        bar.update(5)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and MILESTONE_LINE.match(lines[0])
    assert lines[1].endswith(", eval loss 1.5") and MILESTONE_LINE.match(
        lines[1].removesuffix(", eval loss 1.5")
    )


def test_off_a_terminal_short_loops_stay_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    """``training_bar`` off a terminal: lines at most every ``MIN_SECONDS_BETWEEN_LINES``, so a loop of a
    fraction of a second prints nothing."""
    with training_bar(100, "demo seed 0") as bar:
        for _ in range(100):
            bar.update()
    assert isinstance(bar, MilestoneLines) and bar.min_seconds == MIN_SECONDS_BETWEEN_LINES > 1
    assert capsys.readouterr() == ("", "")


def test_the_bar_shows_on_a_terminal() -> None:
    """A real pseudo-terminal (80 columns) as the child's stderr: the bar is drawn, then cleared."""
    code = (
        "from recombine.experiments.progress import training_bar\n"
        "with training_bar(3, 'demo seed 0') as bar:\n"
        "    for _ in range(3):\n"
        "        bar.update()\n"
    )
    shown = stderr_on_pseudo_terminal(code)
    assert "\rdemo seed 0:" in shown and "0/3" in shown
