"""Sweeps end to end: recipes, failed trials (one raises, one is SIGKILLed) recorded without stopping
the sweep, re-runs that skip finished trials and resume interrupted ones, the Ray executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS
from recombine.experiments.executors import LocalExecutor, RayExecutor, make_executor
from recombine.experiments.recipe import load_sweep_recipe, reproduction_from_recipe
from recombine.experiments.reproduction import run_trials
from recombine.experiments.trial import TrialOutcome, TrialSpec, train_command
from recombine.runs.listing import find_runs
from recombine.runs.report import collect, render
from recombine.runs.trial_record import read_failure
from tiny_grid import tiny_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize(
    "name",
    [
        "ndr-ctl",
        "dnc-ctl",
        "ndr-depth",
        "ndr-arithmetic",
        "ndr-listops",
        "ctlpp-ar",
        "ctlpp-s",
        "scan-length",
        "trafo-datasets",
    ],
)
def test_recipe_file_is_the_named_reproduction(name: str) -> None:
    reproduction = load_sweep_recipe(RECIPES / f"{name}.yaml")
    assert reproduction == REPRODUCTIONS[name]
    assert reproduction_from_recipe(reproduction.to_recipe()) == reproduction


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colums": {}}, "unknown recipe key 'colums' in recipe; valid choices: columns"),
        ({"variants": None}, "has no 'variants'"),
        ({"seeds": 0}, "seeds in recipe must be an integer >= 1"),
        ({"paper": {"nobody": {"fwd": {"mean": 1, "std": 0}}}}, "paper row 'nobody' is not a variant"),
        ({"paper": {"ok": {"fwd": {"mean": 1}}}}, "must be {mean: M, std: S}"),
        ({"quick_variants": ["ko"]}, "valid choices: ok"),
        ({"column_train": {"bwd": {"steps": 9}}}, "column_train column 'bwd' is not a column"),
        ({"row_axis": "depth"}, "variant 'ok' does not set the row_axis model key 'depth' to a number"),
        ({"depth_axis": ""}, "depth_axis in recipe must be a non-empty label"),
        ({"depth_axis": 3}, "depth_axis in recipe must be a non-empty label"),
    ],
)
def test_malformed_recipes_are_one_line_user_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as error:
        reproduction_from_recipe({**tiny_recipe([{"label": "ok"}]), **change})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_column_train_overrides_reach_only_their_column_and_yield_to_the_row() -> None:
    recipe = tiny_recipe([{"label": "plain"}, {"label": "own", "train": {"steps": 7}}])
    recipe["columns"]["bwd"] = dict(recipe["columns"]["fwd"], direction="backward")
    recipe["column_train"] = {"bwd": {"steps": 50, "lr": 0.5}}
    reproduction = reproduction_from_recipe(recipe)
    plain, own = reproduction.variants
    assert reproduction.run_config(plain, "fwd", 1, quick=False)["train"] == recipe["train"]
    backward = reproduction.run_config(plain, "bwd", 1, quick=False)["train"]
    assert backward == {**recipe["train"], "steps": 50, "lr": 0.5}
    assert reproduction.run_config(own, "bwd", 1, quick=False)["train"]["steps"] == 7
    assert reproduction_from_recipe(reproduction.to_recipe()) == reproduction


def test_quick_steps_beat_a_rows_own_steps() -> None:
    # a baseline that trains longer than the grid (the thesis-size recipes: 200k against 100k) must
    # still run its few quick steps under --quick, while its other overrides stay
    recipe = tiny_recipe([{"label": "long", "train": {"steps": 200_000, "lr": 0.25}}])
    recipe["quick_train"] = {"steps": 3, "eval_every": 1}
    reproduction = reproduction_from_recipe(recipe)
    (long,) = reproduction.variants
    assert reproduction.run_config(long, "fwd", 1, quick=False)["train"]["steps"] == 200_000
    quick = reproduction.run_config(long, "fwd", 1, quick=True)["train"]
    assert (quick["steps"], quick["eval_every"], quick["lr"]) == (3, 1, 0.25)


def test_a_train_recipe_is_not_a_sweep_recipe() -> None:
    with pytest.raises(UserError, match="is a train recipe"):
        load_sweep_recipe(RECIPES / "ctl-ndr.yaml")
    with pytest.raises(UserError, match="valid choices: local, ray"):
        make_executor("slurm")


def _kill_when_checkpointed(run_path: Path, killed: list[int], deadline_s: float = 120.0) -> None:
    """SIGKILL the trial's training process once it has written its first checkpoint."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        pid_file = run_path / "trial.pid"
        if (run_path / "last.pt").exists() and pid_file.exists():
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.01)


@pytest.mark.slow
def test_failed_trials_are_recorded_and_a_rerun_skips_finished_and_resumes_killed(tmp_path: Path) -> None:
    recipe = reproduction_from_recipe(
        tiny_recipe(
            [
                {"label": "ok"},
                {"label": "invalid", "model": {"n_heads": 3}},  # d_model 16: rejected when the trial starts
                {"label": "killed", "train": {"steps": 100}},
            ]
        )
    )
    killed_run = tmp_path / "runs" / "killed--fwd--seed1"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_checkpointed, args=(killed_run, killed))
    killer.start()
    events: list[str] = []
    grid = run_trials(
        recipe, tmp_path, seeds=1, quick=False, executor=LocalExecutor(2), on_event=events.append
    )
    killer.join()
    assert killed, "the killer never saw a checkpoint"

    outcomes = {o.run: o for o in grid.outcomes}
    assert outcomes["runs/ok--fwd--seed1"].ok
    assert not outcomes["runs/invalid--fwd--seed1"].ok
    assert outcomes["runs/invalid--fwd--seed1"].reason.startswith("exit code 2: error: ")
    assert "not divisible" in outcomes["runs/invalid--fwd--seed1"].reason
    assert outcomes["runs/killed--fwd--seed1"].reason == "killed by SIGKILL"
    invalid = read_failure(tmp_path / "runs" / "invalid--fwd--seed1")
    assert invalid is not None and any("not divisible" in line for line in invalid["output_tail"])
    assert invalid["config"]["model"]["n_heads"] == 3
    statuses = {run.path.name: run.status for run in find_runs(tmp_path)}
    assert statuses == {
        "ok--fwd--seed1": "finished",
        "invalid--fwd--seed1": "failed",
        "killed--fwd--seed1": "failed",
    }

    markdown = render(tmp_path, html=True)
    assert "| invalid | failed (1) |" in markdown and "| killed | failed (1) |" in markdown
    assert "- runs/killed--fwd--seed1: killed by SIGKILL" in markdown
    _, results = collect(tmp_path)
    ok = json.loads((tmp_path / "runs" / "ok--fwd--seed1" / "result.json").read_text())
    assert results["table"]["ok"]["fwd"]["ood"]["values"] == [ok["selected"]["test_ood"]]
    page = (tmp_path / "report.html").read_text()
    assert f"<td>{ok['selected']['test_ood']:.2f} ± 0.00" in page
    assert '<td class="failed">failed (1)</td>' in page and "<td>0.50 ± 0.25</td>" in page

    # the killed run has a config and a checkpoint: the re-run continues it instead of restarting
    spec = TrialSpec(str(tmp_path), "runs/killed--fwd--seed1", {"train": {"steps": 100}})
    assert "--resume" in train_command(spec)
    events.clear()
    rerun = run_trials(
        recipe, tmp_path, seeds=1, quick=False, executor=LocalExecutor(2), on_event=events.append
    )
    assert events[0] == "1 of 3 runs already complete; training 2"
    assert {o.run: o.ok for o in rerun.outcomes} == {
        "runs/invalid--fwd--seed1": False,
        "runs/killed--fwd--seed1": True,
    }
    resumed = json.loads((killed_run / "result.json").read_text())
    assert resumed["status"] == "completed" and resumed["steps"] == 100
    assert read_failure(killed_run) is None
    log = (killed_run / "train.log").read_text()
    assert log.count("run directory:") == 2  # two attempts, one log


@pytest.mark.slow
def test_ray_executor_runs_a_two_trial_sweep_on_a_local_instance(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    recipe = reproduction_from_recipe(tiny_recipe([{"label": "ok", "train": {"steps": 20}}], seeds=2))
    grid = run_trials(recipe, tmp_path, seeds=2, quick=False, executor=RayExecutor(workers=2))
    assert not ray.is_initialized()  # the executor started its own instance and stopped it
    assert sorted(o.run for o in grid.outcomes if o.ok) == ["runs/ok--fwd--seed1", "runs/ok--fwd--seed2"]
    _, results = collect(tmp_path)
    assert results["table"]["ok"]["fwd"]["ood"]["n"] == 2
    again = run_trials(recipe, tmp_path, seeds=2, quick=False, executor=RayExecutor(workers=2))
    assert again.skipped == 2 and again.outcomes == []


@pytest.mark.slow
def test_while_ray_runs_a_sweep_sigterm_keeps_its_meaning(tmp_path: Path) -> None:
    """ray.init makes SIGTERM call sys.exit; the executor puts back the handler the CLI installed."""
    ray = pytest.importorskip("ray")
    sigterm = signal.getsignal(signal.SIGTERM)
    specs = [TrialSpec(str(tmp_path), f"runs/t{i}", {"train": {"steps": 1}}) for i in range(2)]
    outcomes = RayExecutor(workers=1).run(specs, lambda spec: TrialOutcome(spec.run, True, 0.0))
    assert next(outcomes).ok
    assert ray.is_initialized() and signal.getsignal(signal.SIGTERM) == sigterm
    assert [o.ok for o in outcomes] == [True]


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_stops_its_trials_after_their_step(tmp_path: Path) -> None:
    """`kill PID` reaches the sweep process alone: it passes the stop on to its trial, which checkpoints the
    step it was in, and starts no further trial; the same command then resumes."""
    # one evaluation, at the end (tens of seconds): the stop-time checkpoint is the only one before it
    steps = 1500
    recipe = tiny_recipe(
        [{"label": "a", "train": {"steps": steps, "eval_every": steps, "log_every": 7}}], seeds=2
    )
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    grid = tmp_path / "grid"
    command = [
        sys.executable,
        "-m",
        "recombine",
        "sweep",
        str(recipe_path),
        "--out",
        str(grid),
        "--workers",
        "1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = grid / "runs" / "a--fwd--seed1" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().strip()):
        assert sweep.poll() is None, sweep.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first = grid / "runs" / "a--fwd--seed1"
    if (first / "result.json").exists():
        pytest.skip("the trial finished before it could be stopped (machine too fast for this test)")
    sweep.send_signal(signal.SIGTERM)  # the sweep process only, not its process group
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 130 and "interrupted" in stderr, stderr
    assert not (first / "result.json").exists()  # stopped, not trained to the end
    assert not (first / "trial.pid").exists()  # the sweep waited for its trial to end
    logged = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    checkpoint_step = torch.load(first / "last.pt", weights_only=False)["step"]
    assert 0 < max(logged) <= checkpoint_step < steps
    assert not (grid / "runs" / "a--fwd--seed2").exists()  # queued, never started

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    for seed in (1, 2):
        result = json.loads((grid / "runs" / f"a--fwd--seed{seed}" / "result.json").read_text())
        assert result["status"] == "completed" and result["steps"] == steps
