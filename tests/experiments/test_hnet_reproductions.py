"""The HNET reproductions (Fig. 2B-C, 3B-F, 4B-C, 4E-F): quick runs end to end, resume, the summaries."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from recombine.experiments import REPRODUCTIONS
from recombine.experiments.block_architecture_grid import TRIALS_FILE
from recombine.experiments.hnet_goals import HnetGoalsConfig, run_hnet_goals
from recombine.experiments.hnet_hyperteacher import HnetHyperteacherConfig, hyperteacher_rows
from recombine.experiments.hnet_meta_learning import MetricSummary, build_task, mean_of, run_trial, verdict
from recombine.experiments.scripted_reproduction import ScriptedReproduction, run_scripted

HNET = ["hnet-teacher", "hnet-hyperteacher", "hnet-preferences", "hnet-goals"]


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every HNET reproduction in quick mode (one seed), once for the whole module."""
    root = tmp_path_factory.mktemp("hnet")
    outs = {}
    for name in HNET:
        reproduction = REPRODUCTIONS[name]
        assert isinstance(reproduction, ScriptedReproduction)
        run_scripted(reproduction, root / name, quick=True)
        outs[name] = root / name
    return outs


def _check_trial(trial: dict[str, Any]) -> None:
    for key in ("train_loss", "ood_loss"):
        assert math.isfinite(trial[key]) and trial[key] >= 0
    for key in ("train_accuracy", "ood_accuracy", "module_alignment"):
        assert trial[key] is None or 0.0 <= trial[key] <= 1.0
    assert trial["decodability_r2"] is None or trial["decodability_r2"] <= 1.0
    assert trial["diverged_at"] is None and trial["seconds"] > 0 and trial["n_parameters"] > 0
    assert [h["step"] for h in trial["history"]] == [1, 2]  # quick: 2 outer steps, evaluated every step


@pytest.mark.parametrize("name", HNET)
def test_quick_run_writes_every_row_and_trial(quick_runs: dict[str, Path], name: str) -> None:
    out = quick_runs[name]
    results = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    assert results["reproduction"] == name and results["complete"] and (out / f"{name}.png").is_file()
    rows = {r["name"] for r in results["rows"]}
    assert rows and all(f"| {r['label']} |" in report for r in results["rows"])
    # one trials entry per distinct trial; every row's seed is covered by exactly one of them
    assert len(results["trials"]) == results["n_trials"] == results["n_trials_planned"]
    covered = [row for trial in results["trials"] for row in trial["rows"]]
    assert sorted(covered) == sorted(rows) and len(covered) == len(set(covered))
    for trial in results["trials"]:
        _check_trial(trial)
    assert results["claims"] and all(line in report for line in results["claims"])
    lines = (out / TRIALS_FILE).read_text().splitlines()
    assert len(lines) == len(results["trials"])


def test_rows_of_the_same_trial_share_it_and_the_panels_have_their_learners(
    quick_runs: dict[str, Path],
) -> None:
    hyper = json.loads((quick_runs["hnet-hyperteacher"] / "results.json").read_text())
    shared = [t["rows"] for t in hyper["trials"] if len(t["rows"]) > 1]
    # K = 2 of Fig. 3E is the compositional row of Fig. 3B-D (K = 2 by default)
    assert sorted(shared) == sorted(
        [f"3B-D: {n}, compositional", f"3E: {n}, K=2"]
        for n in ("linear_hnet", "nonlinear_hnet", "anil", "maml")
    )
    panels = {r["panel"] for r in hyper["rows"]}
    assert panels == {"3B-D", "3E", "3F"}
    report = (quick_runs["hnet-hyperteacher"] / "report.md").read_text()
    assert "Tab. A3" in report and "Tab. A2" in report  # M = 4: K = 2 and K = 1 paper numbers
    teacher = json.loads((quick_runs["hnet-teacher"] / "results.json").read_text())
    assert all(t["module_alignment"] is not None for t in teacher["trials"])
    assert all(t["module_alignment"] is None for t in hyper["trials"])  # only the C.1.2 student has one
    goals = json.loads((quick_runs["hnet-goals"] / "results.json").read_text())
    assert {t["task"]["support"] for t in goals["trials"]} == {"compositional", "non_compositional"}
    assert all(t["ood_accuracy"] is not None for t in goals["trials"])  # the kl / cross-entropy task
    prefs = json.loads((quick_runs["hnet-preferences"] / "results.json").read_text())
    assert all(t["ood_accuracy"] is None for t in prefs["trials"])  # MSE on action values


def test_a_rerun_trains_only_the_trials_missing_from_trials_jsonl(
    quick_runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "goals"
    shutil.copytree(quick_runs["hnet-goals"], out)
    before = json.loads((out / "results.json").read_text())
    lines = (out / TRIALS_FILE).read_text().splitlines()
    (out / TRIALS_FILE).write_text("\n".join(lines[:5]) + "\n" + lines[5][:20])  # + a line cut by a crash
    config = REPRODUCTIONS["hnet-goals"].resolve_config(None, True, {})
    assert isinstance(config, HnetGoalsConfig)
    result = run_hnet_goals(out, config)
    assert len(result.trained) == len(lines) - 5
    after = json.loads((out / "results.json").read_text())
    first = {t["key"]: t for t in before["trials"]}
    for trial in after["trials"][:5]:  # read back, not retrained
        assert trial == first[trial["key"]]
    assert run_hnet_goals(out, config).trained == []


def test_summary_sem_verdicts_and_group_means() -> None:
    summary = MetricSummary.of([0.2, 0.4, None, float("nan")])
    assert summary is not None and summary.n == 2 and summary.mean == pytest.approx(0.3)
    assert summary.sem == pytest.approx(0.1)  # std (ddof 1) 0.1414 / sqrt(2)
    assert MetricSummary.of([None, None]) is None
    diverged = MetricSummary.of([float("nan")])
    assert diverged is not None and diverged.format() == "diverged"
    rows = {"a": {"m": MetricSummary.of([1.0])}, "b": {"m": MetricSummary.of([3.0])}, "c": {"m": None}}
    assert mean_of(rows, ["a", "b", "c"], "m") == 2.0 and mean_of(rows, ["c"], "m") is None
    assert verdict(0.5, 0.4, True) == "holds" and verdict(0.5, 0.4, False) == "does not hold"
    assert verdict(None, 0.4, True) == "not measured"


def test_hyperteacher_rows_use_m8_for_connectivity_and_scale_the_overparameterized_students() -> None:
    rows = hyperteacher_rows(HnetHyperteacherConfig())
    modules = {r.task["support"]: r.task["n_modules"] for r in rows if r.panel == "3B-D"}
    assert modules == {"compositional": 4, "non_compositional": 4, "connected": 8, "disconnected": 8}
    sizes = [(r.setting.n_hidden, r.setting.n_modules, r.task["n_hidden"]) for r in rows if r.panel == "3F"]
    assert sizes == [(16, 4, 16), (32, 8, 16), (64, 16, 16)]  # h-hat = f h, M-hat = f M, teacher h = 16
    compositional = next(r for r in rows if r.name == "3B-D: nonlinear_hnet, compositional")
    assert compositional.paper == {"train_accuracy": 0.98, "ood_accuracy": 0.909}  # Tab. A3


def test_a_trial_is_the_same_with_a_fresh_task_and_with_one_other_rows_have_used() -> None:
    """Rows on one task share the task object (its moment cache); that must not change any result."""
    config = REPRODUCTIONS["hnet-hyperteacher"].resolve_config(None, True, {})
    assert isinstance(config, HnetHyperteacherConfig)
    rows = [
        r for r in hyperteacher_rows(config) if r.panel == "3B-D" and r.task["support"] == "compositional"
    ]
    training = config.training
    fresh = run_trial(rows[0], 0, training)
    shared = build_task(rows[0].task, 0)
    run_trial(rows[2], 0, training, shared)  # ANIL first: the task's cache now holds other tasks too
    again = run_trial(rows[0], 0, training, shared)
    for metric in ("train_loss", "ood_loss", "train_accuracy", "ood_accuracy", "decodability_r2"):
        assert getattr(again, metric) == getattr(fresh, metric)
    assert again.history == fresh.history
