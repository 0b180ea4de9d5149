"""Same config + seed = identical metrics; a run killed with SIGKILL, or stopped by SIGINT / SIGTERM between
two evaluations, and resumed ends identically."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import TINY_RUN
from recombine import run_config
from recombine.train import fit


def comparable(metrics_path: Path) -> list[dict[str, Any]]:
    """Metrics without wall-clock fields."""
    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    for record in records:
        record.pop("examples_per_s", None)
    return records


def tiny_config(*extra: str) -> run_config.RunConfig:
    return run_config.resolve(run_config.parse_overrides([*TINY_RUN, *extra]))


def test_same_seed_same_metrics_different_seed_differs(tmp_path: Path) -> None:
    fit(tiny_config(), tmp_path / "a", progress=False)
    fit(tiny_config(), tmp_path / "b", progress=False)
    fit(tiny_config("seed=4"), tmp_path / "c", progress=False)
    a, b, c = (comparable(tmp_path / name / "metrics.jsonl") for name in "abc")
    assert a == b
    assert a != c
    assert [r["step"] for r in a if r["kind"] == "eval"] == [20, 40, 60]


def _train_command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "recombine", "train", "--no-progress", "--run-dir", str(run_dir), *extra]


def test_sigkill_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    # log_every=7 never divides a checkpoint step below 175: the logging window must survive the kill
    overrides = [*TINY_RUN, "train.steps=400", "train.eval_every=25", "train.log_every=7"]
    reference = tmp_path / "reference"
    fit(run_config.resolve(run_config.parse_overrides(overrides)), reference, progress=False)

    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_train_command(killed, *overrides), env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed / "last.pt").exists():
        assert proc.poll() is None, "training ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)  # let it run past the checkpoint so some metrics must be discarded
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if (killed / "result.json").exists():
        pytest.skip("the run finished before it could be killed (machine too fast for this test)")

    resumed = subprocess.run(_train_command(killed, "--resume", str(killed)), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(killed / "metrics.jsonl") == comparable(reference / "metrics.jsonl")
    final = json.loads((killed / "result.json").read_text())
    expected = json.loads((reference / "result.json").read_text())
    assert final["selected"] == expected["selected"] and final["best_step"] == expected["best_step"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_checkpoints_the_step_in_progress_and_resumes_identically(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # one evaluation, at the very end: every step the stopped run keeps is in its stop-time checkpoint
    overrides = [*TINY_RUN, "train.steps=400", "train.eval_every=400", "train.log_every=7"]
    reference = tmp_path / "reference"
    fit(run_config.resolve(run_config.parse_overrides(overrides)), reference, progress=False)

    stopped = tmp_path / "stopped"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _train_command(stopped, *overrides),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    metrics = stopped / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().strip()):  # the first logging window is written
        assert proc.poll() is None, "training ended before it logged"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    if (stopped / "result.json").exists():
        pytest.skip("the run finished before the signal arrived (machine too fast for this test)")
    assert proc.returncode == 130 and "interrupted: resume with" in stderr, stderr

    checkpoint_step = torch.load(stopped / "last.pt", weights_only=False)["step"]
    logged_steps = [record["step"] for record in comparable(metrics)]
    assert 0 < max(logged_steps) <= checkpoint_step < 400  # no logged step is lost
    resumed = subprocess.run(
        _train_command(stopped, "--resume", str(stopped)), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(metrics) == comparable(reference / "metrics.jsonl")
    final = json.loads((stopped / "result.json").read_text())
    assert final["selected"] == json.loads((reference / "result.json").read_text())["selected"]


def test_nan_loss_stops_with_message_and_keeps_checkpoint(tmp_path: Path) -> None:
    from recombine.train import TrainingDiverged

    config = tiny_config("train.lr=1e30", "train.grad_clip=0", "train.eval_every=1", "train.steps=200")
    with pytest.raises(TrainingDiverged, match="last good checkpoint"):
        fit(config, tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "last.pt").exists()
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "diverged"


def test_extending_a_finished_run_equals_training_longer_from_the_start(tmp_path: Path) -> None:
    from recombine.cli import main

    direct = tmp_path / "direct"
    fit(tiny_config("train.steps=60"), direct, progress=False)
    extended = tmp_path / "extended"
    fit(tiny_config("train.steps=40"), extended, progress=False)
    assert main(["train", "--no-progress", "--resume", str(extended), "train.steps=60"]) == 0
    assert comparable(extended / "metrics.jsonl") == comparable(direct / "metrics.jsonl")
    assert json.loads((extended / "result.json").read_text())["steps"] == 60


def test_extension_refuses_what_would_change_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recombine.cli import main

    run = tmp_path / "run"
    fit(tiny_config("train.steps=20", "train.schedule=cosine"), run, progress=False)
    assert main(["train", "--resume", str(run), "train.steps=40"]) == 2
    assert "cosine" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "train.lr=0.1"]) == 2
    assert "only train.steps" in capsys.readouterr().err
