"""One writer per directory: a second process that would train a run, a grid or a scripted reproduction
while another one does is refused with one line (exit 2) and changes nothing; a writer killed with
SIGKILL leaves no lock behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import TINY_RUN
from recombine import run_config
from recombine.errors import UserError
from recombine.experiments.trial import TrialSpec, run_trial
from recombine.runs.directory_lock import LOCK_FILE, exclusive_use
from recombine.train import fit
from tiny_dnc import TINY_DNC_REPRODUCTION
from tiny_grid import tiny_recipe

HOLD = """
import sys, time
from recombine.runs.directory_lock import exclusive_use
with exclusive_use(sys.argv[1]):
    print("held", flush=True)
    time.sleep(3600)  # until the test kills it
"""


TRY = """
import sys
import threading
from recombine.errors import UserError
from recombine.runs.directory_lock import exclusive_use
try:
    with exclusive_use(sys.argv[1]):
        print("acquired")
except UserError:
    print("refused")
"""


def _recombine(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recombine", *args], capture_output=True, text=True, timeout=120
    )


def _refused_in_one_line(result: subprocess.CompletedProcess[str], directory: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {directory} is in use: {_reason()}"], result.stderr


def _reason() -> str:
    return "another recombine process is writing to it; wait for it to end or stop it, then run this again"


@pytest.fixture
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start a process holding a directory's lock; yields a function taking the directory."""
    processes: list[subprocess.Popen[str]] = []

    def hold(directory: Path) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True
        )
        processes.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        return process

    yield hold
    for process in processes:
        process.kill()
        process.wait()


def test_resuming_a_run_another_process_trains_is_refused_and_a_killed_trainer_leaves_no_lock(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    overrides = [*TINY_RUN, "train.eval_every=25"]
    long_run = [*overrides, "train.steps=1000000"]  # never finishes before it is killed
    command = [sys.executable, "-m", "recombine", "train", "--no-progress", "--run-dir", str(run), *long_run]
    trainer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (run / "last.pt").exists():
            assert trainer.poll() is None, "training ended before its first checkpoint"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        metrics_before = (run / "metrics.jsonl").read_text()
        second = _recombine("train", "--no-progress", "--resume", str(run))
        assert trainer.poll() is None
        _refused_in_one_line(second, run)
        assert (run / "metrics.jsonl").read_text().startswith(metrics_before)  # not truncated by the second
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()

    checkpoint_step = torch.load(run / "last.pt", weights_only=False)["step"]
    stop_at = f"train.steps={checkpoint_step + 25}"
    config = run_config.resolve(run_config.parse_overrides([*overrides, stop_at]))
    result = fit(config, run, resume=True, progress=False)  # the dead trainer holds nothing
    assert result["status"] == "completed" and result["steps"] == checkpoint_step + 25


def test_a_fresh_run_into_a_locked_directory_writes_nothing(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    holder(run)
    _refused_in_one_line(_recombine("train", "--no-progress", "--run-dir", str(run), *TINY_RUN), run)
    assert sorted(path.name for path in run.iterdir()) == [LOCK_FILE]


def test_a_second_sweep_into_a_grid_directory_in_use_is_refused(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe([{"label": "NDR"}])))
    out = tmp_path / "grid"
    holder(out)
    _refused_in_one_line(_recombine("sweep", str(recipe), "--out", str(out)), out)
    assert not (out / "manifest.json").exists() and not (out / "runs").exists()


def test_a_second_scripted_reproduction_into_its_directory_in_use_is_refused(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "dnc"
    holder(out)
    overrides = [f"{key}={value}" for key, value in TINY_DNC_REPRODUCTION.items()]
    _refused_in_one_line(_recombine("reproduce", "dnc-repeat-copy", "--out", str(out), *overrides), out)
    assert sorted(path.name for path in out.iterdir()) == [LOCK_FILE]


def test_the_lock_is_free_again_after_its_holder_is_killed(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path / "run"
    process = holder(directory)
    with pytest.raises(UserError, match="is in use"), exclusive_use(directory):
        pass
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    with exclusive_use(directory):  # the kernel dropped the dead process's lock
        (directory / "written").write_text("mine")
    assert (directory / "written").read_text() == "mine"


def test_within_one_process_the_lock_is_reentrant_and_held_until_the_outer_block_ends(
    tmp_path: Path,
) -> None:
    probe = [sys.executable, "-c", TRY, str(tmp_path / "run")]
    with exclusive_use(tmp_path / "run"):
        with exclusive_use(tmp_path / "run"):  # the same writer: a report rendered under its grid's lock
            pass
        assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "refused"
    assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "acquired"


def test_a_directory_the_lock_created_and_nothing_filled_is_removed_again(tmp_path: Path) -> None:
    with pytest.raises(ValueError), exclusive_use(tmp_path / "empty"):
        raise ValueError("a config error before anything was written")
    assert not (tmp_path / "empty").exists()
    with exclusive_use(tmp_path / "filled"):
        (tmp_path / "filled" / "config.yaml").write_text("seed: 1\n")
    assert (tmp_path / "filled" / "config.yaml").exists()
    (tmp_path / "existing").mkdir()
    with exclusive_use(tmp_path / "existing"):
        pass
    assert (tmp_path / "existing").is_dir()  # it was there before: not ours to remove


def test_a_grid_trial_leaves_a_run_another_process_trains_untouched(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "grid" / "runs" / "NDR--fwd--seed1"
    holder(run)
    spec = TrialSpec(str(tmp_path / "grid"), "runs/NDR--fwd--seed1", run_config.parse_overrides(TINY_RUN))
    outcome = run_trial(spec)
    assert not outcome.ok and outcome.reason == f"{run} is in use: {_reason()}"
    assert sorted(path.name for path in run.iterdir()) == [LOCK_FILE]  # no train.log, trial.pid, failure.json


def test_another_thread_is_refused_and_every_spelling_of_a_path_is_one_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    errors: list[Exception] = []

    def other_thread() -> None:
        try:
            with exclusive_use(tmp_path / "real"):
                pass
        except UserError as e:
            errors.append(e)

    with exclusive_use("real"):
        with exclusive_use(tmp_path / "link"), exclusive_use(tmp_path / "real"):  # this thread: re-entrant
            pass
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert len(errors) == 1 and "is in use" in str(errors[0])
    thread = threading.Thread(target=other_thread)  # released: now the other thread may
    thread.start()
    thread.join()
    assert len(errors) == 1
