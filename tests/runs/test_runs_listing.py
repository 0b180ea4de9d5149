"""``recombine runs``: discovery, status, filters and output, on run directories written by hand
in the run store's format (no training needed)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from recombine.cli import main
from recombine.errors import UserError
from recombine.runs.listing import filter_runs, find_runs, format_table, varying_fields


def _config(task: str, model: str, seed: int, d_model: int, lr: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "task": {"name": task, "direction": "forward"},
        "model": {"name": model, "d_model": d_model},
        "train": {"steps": 100, "lr": lr},
    }


def _write_run(path: Path, config: dict[str, Any] | None, files: dict[str, Any]) -> None:
    """A run directory: ``config.yaml`` (unless None) and ``files`` (name -> text or JSON data)."""
    path.mkdir(parents=True)
    if config is not None:
        (path / "config.yaml").write_text(yaml.safe_dump(config))
    for name, content in files.items():
        (path / name).write_text(content if isinstance(content, str) else json.dumps(content))


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Five runs in one tree: finished, diverged, failed before training, interrupted, running."""
    metrics = "".join(json.dumps({"kind": "log", "step": s}) + "\n" for s in (10, 20, 30))
    _write_run(
        tmp_path / "a" / "finished",
        _config("ctl", "ndr", 1, 64, 0.001),
        {
            "metrics.jsonl": metrics,
            "result.json": {
                "status": "completed",
                "steps": 100,
                "selected": {"valid_ood": 0.5, "test_ood": 0.25},
            },
        },
    )
    _write_run(
        tmp_path / "a" / "diverged",
        _config("ctl", "lstm", 2, 64, 0.001),
        {"metrics.jsonl": metrics, "result.json": {"status": "diverged", "step": 31}},
    )
    _write_run(
        tmp_path / "b" / "rejected",
        None,
        {"failure.json": {"reason": "exit code 2", "config": _config("scan", "ndr", 1, 16, 0.001)}},
    )
    _write_run(
        tmp_path / "b" / "interrupted",
        _config("ctl", "ndr", 2, 32, 0.0005),
        {"metrics.jsonl": metrics, "trial.pid": str(_dead_pid())},
    )
    _write_run(tmp_path / "b" / "running", _config("ctl", "ndr", 3, 64, 0.001), {"metrics.jsonl": metrics})
    (tmp_path / "a" / "finished" / "events").mkdir()  # not a run, not even a candidate
    return tmp_path


def test_every_run_is_found_with_its_status_and_progress(store: Path) -> None:
    runs = {run.path.name: run for run in find_runs(store)}
    assert {name: run.status for name, run in runs.items()} == {
        "finished": "finished",
        "diverged": "failed",
        "rejected": "failed",
        "interrupted": "interrupted",
        "running": "running",
    }
    assert runs["finished"].step == 100 and runs["finished"].selected == {"valid_ood": 0.5, "test_ood": 0.25}
    assert runs["running"].step == 30 and runs["running"].selected == {}
    assert runs["rejected"].task == "scan" and runs["rejected"].reason == "exit code 2"
    assert runs["diverged"].reason == "status 'diverged'"


def test_filters(store: Path) -> None:
    runs = find_runs(store)

    def names(**kwargs: Any) -> set[str]:
        return {run.path.name for run in filter_runs(runs, **kwargs)}

    assert names(task="scan") == {"rejected"}
    assert names(model="lstm") == {"diverged"}
    assert names(status="failed") == {"diverged", "rejected"}
    assert names(task="ctl", model="ndr", where=["seed=2"]) == {"interrupted"}
    assert names(where=["model.d_model=64", "train.lr=1.0e-3"]) == {"finished", "diverged", "running"}
    assert names(where=["train.lr=5e-4"]) == {"interrupted"}  # YAML 1.1 reads 5e-4 as text
    assert names(where=["task.direction=forward"]) == {r.path.name for r in runs}
    with pytest.raises(
        UserError, match="no run has config field 'model.d_modle'; valid choices: model.d_model"
    ):
        filter_runs(runs, where=["model.d_modle=3"])
    with pytest.raises(UserError, match="unknown status 'done'"):
        filter_runs(runs, status="done")


def test_table_and_json_output(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = format_table(find_runs(store), store).splitlines()
    assert table[0].split() == ["run", "task", "model", "seed", "status", "step", "selected", "accuracies"]
    finished = next(line for line in table if line.startswith("a/finished"))
    assert finished.split() == [
        "a/finished",
        "ctl",
        "ndr",
        "1",
        "finished",
        "100/100",
        "valid_ood",
        "0.500",
    ] + [
        "test_ood",
        "0.250",
    ]

    assert main(["runs", str(store), "--status", "finished", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["path"] for entry in listed] == [str(store / "a" / "finished")]
    assert listed[0]["selected"]["test_ood"] == 0.25 and listed[0]["config"]["model"]["d_model"] == 64
    assert main(["runs", str(store / "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_compare_adds_a_column_for_each_config_field_that_differs(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = find_runs(store)
    # d_model (64/16/32) and lr (1e-3/5e-4) differ; direction and steps are the same everywhere
    assert varying_fields(runs) == ["model.d_model", "train.lr"]
    ctl_64 = filter_runs(runs, task="ctl", where=["model.d_model=64"])
    assert varying_fields(ctl_64) == []  # finished, diverged, running: only seed and model differ
    lacking = [dataclasses.replace(runs[0], config={"a": 1}), dataclasses.replace(runs[0], config={})]
    assert varying_fields(lacking) == ["a"]  # a field one run lacks counts as differing

    assert main(["runs", str(store), "--task", "ctl", "--compare"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:6] == ["run", "task", "model", "seed", "model.d_model", "train.lr"]
    interrupted = next(line for line in table if line.startswith("b/interrupted")).split()
    assert interrupted[4:6] == ["32", "0.0005"]
