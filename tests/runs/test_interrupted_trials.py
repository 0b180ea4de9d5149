"""Interrupted grid trials (stopped, resumable) are told apart from failed ones: their status, their
table cell, and a report line with how far each got and its best evaluation so far, against a grid
written by hand (:mod:`toy_sweep`) with two interrupted trials added."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from recombine.cli import main
from recombine.runs.archive import record_files
from recombine.runs.html_index import read_entry
from recombine.runs.report import collect, render
from recombine.runs.trial_record import is_interrupted, run_status
from recombine.runs.unfinished import with_failed_and_interrupted_counts
from toy_sweep import expected_cells, write_toy_sweep


def _eval(step: int, valid_ood: float, test_ood: float) -> dict:
    splits = {
        "valid_iid": {"accuracy": step / 20},  # best at the last step: must not decide the selection
        "valid_ood": {"accuracy": valid_ood},
        "test_ood": {"accuracy": test_ood},
    }
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
    # A seed 5: its sweep was SIGKILLed, so no failure.json, only the pid of a process that is gone
    killed = root / "runs" / "A--c--seed5"
    killed.mkdir(parents=True)
    (killed / "metrics.jsonl").write_text(json.dumps(_eval(10, 0.25, 0.125)) + "\n")
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    (killed / "trial.pid").write_text(str(process.pid))
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["runs"] += [
        {"variant": "B", "column": "c", "seed": 2, "run": "runs/B--c--seed2"},
        {"variant": "A", "column": "c", "seed": 4, "run": "runs/A--c--seed4"},
        {"variant": "A", "column": "c", "seed": 5, "run": "runs/A--c--seed5"},
    ]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_interrupted_trials_are_counted_and_listed_apart_from_failed_ones(grid: Path) -> None:
    markdown = render(grid, html=True)
    cells = expected_cells()
    a_row = ["A", f"{cells['A'][1]}, 2 interrupted", *cells["A"][2:]]
    assert "| " + " | ".join(a_row) + " |" in markdown
    assert "| B | failed (1), interrupted (1) | – | – | – |" in markdown
    assert "- runs/B--c--seed1: killed by SIGKILL" in markdown  # still a failure
    assert "Interrupted runs (3; the command that started them continues them):" in markdown
    assert (
        "- runs/B--c--seed2: stopped at step 25; best valid_ood so far 0.800 at step 10 (test_ood 0.400)"
        in markdown
    )
    assert "- runs/A--c--seed4: stopped at step 5; no evaluation on a validation split yet" in markdown
    assert (
        "- runs/A--c--seed5: stopped at step 10; best valid_ood so far 0.250 at step 10 (test_ood 0.125)"
        in markdown
    )
    assert "Missing or unfinished runs" not in markdown
    _, results = collect(grid)
    assert results["failed_runs"] == {"runs/B--c--seed1": "killed by SIGKILL"}
    assert results["interrupted_runs"]["runs/B--c--seed2"]["best_step"] == 10
    assert results["interrupted_runs"]["runs/A--c--seed4"] == {"step": 5}
    assert results["table"]["B"]["c"]["interrupted_runs"] == ["runs/B--c--seed2"]
    page = (grid / "report.html").read_text()
    assert "<h2>Interrupted runs (3)</h2>" in page and "<h2>Failed runs (1)</h2>" in page
    entry = read_entry(grid, grid)  # the index over result directories counts them apart too
    assert (entry.runs, entry.finished, entry.failed, entry.interrupted) == (7, 3, 1, 3)


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


def test_the_interrupted_flag_wins_over_the_exit_code_and_cells_count_both_kinds() -> None:
    # a trial a stopped sweep never started has no exit code; the record's flag says it was stopped
    assert is_interrupted(
        {"reason": "not started: the sweep was stopped", "exit_code": None, "interrupted": True}
    )
    assert not is_interrupted({"reason": "x", "exit_code": 130, "interrupted": False})
    assert is_interrupted({"reason": "x", "exit_code": 130})  # a record from before the flag
    assert not is_interrupted(None)
    cell = {"failed_runs": ["a"], "interrupted_runs": ["b", "c"]}
    assert with_failed_and_interrupted_counts("–", cell) == "failed (1), interrupted (2)"
    assert (
        with_failed_and_interrupted_counts("0.50 ± 0.25 (1/3)", cell)
        == "0.50 ± 0.25 (1/3), 1 failed, 2 interrupted"
    )
    assert with_failed_and_interrupted_counts("0.50", {"failed_runs": [], "interrupted_runs": []}) == "0.50"
