"""Grid progress reads each trial's last complete metrics record (torn lines, records longer than the first
window read, missing and unreadable files, resumed and rewound runs); it prints lines in a log and a bar on a
terminal, cleared for each trial's line; a tiny grid trains with it on as without."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pseudo_terminal import stderr_on_pseudo_terminal
from recombine.experiments.grid_progress import GridProgress, latest_step
from recombine.experiments.progress import MilestoneLines
from recombine.experiments.recipe import reproduction_from_recipe
from recombine.experiments.reproduction import run_trials
from recombine.experiments.trial import TrialSpec
from recombine.runs.store import TAIL_BYTES
from tiny_grid import tiny_recipe


def write_records(run: Path, steps: list[int], torn: str = "", padding: int = 0) -> None:
    run.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": step, "kind": "train", "note": "x" * padding}) for step in steps]
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines) + torn)


def spec(out: Path, name: str, steps: int) -> TrialSpec:
    return TrialSpec(str(out), f"runs/{name}", {"train": {"steps": steps}})


def test_latest_step_is_the_last_complete_record(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert latest_step(run) == 0  # not started: no file
    write_records(run, [])
    assert latest_step(run) == 0
    write_records(run, [50, 100, 150])
    assert latest_step(run) == 150
    write_records(run, [50, 100], torn='{"step": 150, "kind": "tr')  # killed mid-write
    assert latest_step(run) == 100


def test_latest_step_skips_a_record_cut_by_the_tail_window(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # every record longer than half the window: the window starts inside the second-to-last one
    write_records(run, [1000, 2000, 3000], padding=TAIL_BYTES // 2 + 100)
    assert latest_step(run) == 3000
    write_records(run, [1000, 2000], torn='{"step": 3000', padding=TAIL_BYTES // 2 + 100)
    assert latest_step(run) == 2000


def test_latest_step_widens_the_window_for_records_longer_than_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_records(run, [1000, 2000, 3000], padding=TAIL_BYTES + 100)
    assert latest_step(run) == 3000
    write_records(run, [1000, 2000], torn='{"step": 3000', padding=5 * TAIL_BYTES)
    assert latest_step(run) == 2000
    write_records(run, [], torn='{"step": 3000' + "x" * 3 * TAIL_BYTES)  # only a torn record
    assert latest_step(run) == 0


def test_an_unreadable_file_keeps_the_last_count(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a"
    write_records(run, [30])
    progress = GridProgress([spec(tmp_path, "a", 100)])
    assert progress.bar is not None and progress.bar.n == 30
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()  # reading it raises IsADirectoryError, an OSError
    assert latest_step(run) is None
    progress.poll()
    assert progress.bar.n == 30


def test_the_count_sums_the_trials_steps_capped_at_their_targets(tmp_path: Path) -> None:
    specs = [spec(tmp_path, "a", 100), spec(tmp_path, "b", 300), spec(tmp_path, "c", 200)]
    write_records(tmp_path / "runs" / "a", [50])  # resumed from step 50
    progress = GridProgress(specs)
    assert progress.bar is not None and (progress.bar.total, progress.bar.n) == (600, 50)

    write_records(tmp_path / "runs" / "a", [50, 100, 100])  # the last eval repeats the final step
    write_records(tmp_path / "runs" / "b", [150])
    progress.poll()
    assert progress.bar.n == 250
    write_records(tmp_path / "runs" / "b", [100])  # resumed from an earlier checkpoint: rewound
    progress.poll()
    assert progress.bar.n == 200
    write_records(tmp_path / "runs" / "c", [250])  # an extended run's old records beyond this target
    progress.poll()
    assert progress.bar.n == 400


def test_off_a_terminal_the_thread_prints_the_tenths_as_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [spec(tmp_path, "a", 100), spec(tmp_path, "b", 100)]
    messages: list[str] = []
    with GridProgress(specs, interval=0.01) as progress:
        assert isinstance(progress.bar, MilestoneLines)
        progress.bar.min_seconds = 0.0  # every tenth passed gets its line
        write_records(tmp_path / "runs" / "a", [100])
        progress.write(messages.append, "[1/2] runs/a: done in 1 s")
        deadline = time.monotonic() + 10
        while progress.bar.n < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        write_records(tmp_path / "runs" / "b", [100])
    assert messages == ["[1/2] runs/a: done in 1 s"]
    err = capsys.readouterr().err
    assert "2 runs: 100/200 steps (50 %)" in err and "2 runs: 200/200 steps (100 %)" in err


def test_disabled_it_shows_nothing_and_passes_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages: list[str] = []
    with GridProgress([spec(tmp_path, "a", 10)], disable=True) as progress:
        write_records(tmp_path / "runs" / "a", [10])
        progress.write(messages.append, "done")
    assert progress.bar is None and messages == ["done"] and capsys.readouterr().err == ""


def test_on_a_terminal_the_bar_is_cleared_for_each_message(tmp_path: Path) -> None:
    """A real pseudo-terminal (80 columns) as the child's stderr: the bar, the message on a line of its
    own, then the bar again at the final count."""
    write_records(tmp_path / "runs" / "a", [40])
    code = (
        "import sys\n"
        "from recombine.experiments.grid_progress import GridProgress\n"
        "from recombine.experiments.trial import TrialSpec\n"
        f"spec = TrialSpec({str(tmp_path)!r}, 'runs/a', {{'train': {{'steps': 40}}}})\n"
        "with GridProgress([spec, TrialSpec(spec.out, 'runs/b', spec.config)]) as progress:\n"
        "    progress.write(lambda m: print(m, file=sys.stderr), '[1/2] runs/a: done in 1 s')\n"
    )
    screen = stderr_on_pseudo_terminal(code)
    before, message, after = screen.partition("[1/2] runs/a: done in 1 s")
    assert message and "2 runs" in before and "40/80" in before
    assert before.rstrip(" ").endswith("\r")  # the bar was cleared before the message
    assert "40/80" in after


def test_a_grid_run_with_progress_trains_as_without(tmp_path: Path) -> None:
    reproduction = reproduction_from_recipe(tiny_recipe([{"label": "NDR"}], seeds=2))
    events: list[str] = []
    grid = run_trials(reproduction, tmp_path, seeds=2, quick=False, on_event=events.append, progress=True)
    assert not grid.failed and len(grid.outcomes) == 2
    steps = int(reproduction.train["steps"])
    assert all(latest_step(tmp_path / entry["run"]) == steps for entry in grid.entries)
    assert events[0] == "0 of 2 runs already complete; training 2" and events[-1].startswith("[2/2] ")
