"""Interrupted grid trials (stopped, resumable) are told apart from failed ones: their status, their
table cell, and a report line with how far each got and its best evaluation so far, against a grid
written by hand (:mod:`toy_sweep`) with two interrupted trials added."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from recombine.cli import main
from recombine.runs.archive import record_files
from recombine.runs.report import collect, render
from recombine.runs.trial_record import run_status
from toy_sweep import expected_cells, write_toy_sweep


def _eval(step: int, valid_ood: float, test_ood: float) -> dict:
    splits = {"valid_ood": {"accuracy": valid_ood}, "test_ood": {"accuracy": test_ood}}
    return {"kind": "eval", "step": step, "splits": splits}


def _interrupted_run(root: Path, name: str, records: list[dict], exit_code: int = 130) -> None:
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 2\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "train.log").write_text("interrupted: resume with `recombine train --resume RUN`\n")
    failure = {"reason": "exit code 130: interrupted", "exit_code": exit_code}
    (run / "failure.json").write_text(json.dumps(failure))


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    root = write_toy_sweep(tmp_path)
    # B seed 2: valid_ood 0.8 first at step 10 and again at 20 (the first best is selected), logged to 25
    records = [_eval(10, 0.8, 0.4), _eval(20, 0.8, 0.7), {"kind": "train", "step": 25}]
    _interrupted_run(root, "B--c--seed2", records)
    _interrupted_run(root, "A--c--seed4", [{"kind": "train", "step": 5}], exit_code=-signal.SIGTERM)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["runs"] += [
        {"variant": "B", "column": "c", "seed": 2, "run": "runs/B--c--seed2"},
        {"variant": "A", "column": "c", "seed": 4, "run": "runs/A--c--seed4"},
    ]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_interrupted_trials_are_counted_and_listed_apart_from_failed_ones(grid: Path) -> None:
    markdown = render(grid, html=True)
    cells = expected_cells()
    a_row = ["A", f"{cells['A'][1]}, 1 interrupted", *cells["A"][2:]]
    assert "| " + " | ".join(a_row) + " |" in markdown
    assert "| B | failed (1), interrupted (1) | – | – | – |" in markdown
    assert "- runs/B--c--seed1: killed by SIGKILL" in markdown  # still a failure
    assert "Interrupted runs (2; the same command continues them):" in markdown
    assert (
        "- runs/B--c--seed2: stopped at step 25; best valid_ood so far 0.800 at step 10 (test_ood 0.400)"
        in markdown
    )
    assert "- runs/A--c--seed4: stopped at step 5; no evaluation yet" in markdown
    assert "Missing or unfinished runs" not in markdown
    _, results = collect(grid)
    assert results["failed_runs"] == {"runs/B--c--seed1": "killed by SIGKILL"}
    assert results["interrupted_runs"]["runs/B--c--seed2"]["best_step"] == 10
    assert results["interrupted_runs"]["runs/A--c--seed4"] == {"step": 5}
    assert results["table"]["B"]["c"]["interrupted_runs"] == ["runs/B--c--seed2"]
    page = (grid / "report.html").read_text()
    assert "<h2>Interrupted runs (2)</h2>" in page and "<h2>Failed runs (1)</h2>" in page


def test_status_and_archive_of_interrupted_and_failed_trials(
    grid: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_status(grid / "runs" / "B--c--seed2") == "interrupted"
    assert run_status(grid / "runs" / "A--c--seed4") == "interrupted"  # ended by SIGTERM
    assert run_status(grid / "runs" / "B--c--seed1") == "failed"  # killed by SIGKILL: no exit code
    for code, status in ((1, "failed"), (-signal.SIGKILL, "failed"), (-signal.SIGINT, "interrupted")):
        failure = grid / "runs" / "B--c--seed2" / "failure.json"
        failure.write_text(json.dumps({"reason": "x", "exit_code": code}))
        assert run_status(failure.parent) == status
    assert main(["runs", str(grid), "--status", "interrupted"]) == 0
    listed = capsys.readouterr().out
    assert "A--c--seed4" in listed and "B--c--seed1" not in listed
    assert grid / "runs" / "A--c--seed4" / "train.log" in record_files(grid / "runs" / "A--c--seed4")
