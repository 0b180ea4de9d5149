"""``recombine evaluate RUN``: a stored checkpoint evaluated again gives the numbers the run logged for it,
``--test-layers`` changes the number of shared-layer steps, and user errors are one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_RUN
from recombine import run_config
from recombine.cli import main
from recombine.runs.reevaluation import evaluate_run
from recombine.runs.store import RunDir
from recombine.train import fit
from recombine.train.supervised import SELECTED_MODEL_KEYS


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("reevaluation") / "ndr"
    fit(run_config.resolve(run_config.parse_overrides(TINY_RUN)), run, progress=False)
    return run


def logged_evaluation(run: Path, step: int) -> dict:
    return next(r["splits"] for r in RunDir(run).read_metrics() if r["kind"] == "eval" and r["step"] == step)


@pytest.mark.parametrize("checkpoint", ["best", "last"])
def test_the_checkpoint_evaluates_to_what_the_run_logged_at_its_step(
    trained_run: Path, checkpoint: str
) -> None:
    result = evaluate_run(trained_run, checkpoint)
    logged = logged_evaluation(trained_run, result.step)
    assert result.step == (RunDir(trained_run).read_result() or {}).get(
        "best_step" if checkpoint == "best" else "steps"
    )
    (evaluation,) = result.evaluations
    assert evaluation.test_layers is None and result.configured_layers == 3  # n_layers of TINY_RUN
    assert set(evaluation.splits) == set(logged)
    for name, values in logged.items():
        assert evaluation.splits[name]["accuracy"] == values["accuracy"]
        assert evaluation.splits[name]["per_depth"] == values["per_depth"]
        assert evaluation.splits[name]["loss"] == pytest.approx(values["loss"], rel=1e-6)


def test_best_holds_the_selected_model_without_the_state_only_resuming_needs(trained_run: Path) -> None:
    run = RunDir(trained_run)
    best, last = run.load_checkpoint("best"), run.load_checkpoint("last")
    training_state = {"optimizer", "scheduler", "batch_rng", "torch_rng", "log_window"}
    assert set(best) == set(SELECTED_MODEL_KEYS) and not training_state & set(best)
    assert training_state <= set(last)
    assert best["step"] == best["best_step"] == (run.read_result() or {}).get("best_step")
    # AdamW keeps two moments per weight: without them the file is about a third of last.pt
    assert run.checkpoint_path("best").stat().st_size < 0.5 * run.checkpoint_path("last").stat().st_size


def test_test_layers_equal_to_the_trained_depth_changes_nothing_and_others_change_the_model(
    trained_run: Path,
) -> None:
    result = evaluate_run(trained_run, test_layers=[None, 3, 1, 6], splits=["valid_ood"])
    configured, same, fewer, more = (e.splits["valid_ood"] for e in result.evaluations)
    assert same == configured
    assert fewer["loss"] != configured["loss"] and more["loss"] != configured["loss"]
    assert [e.test_layers for e in result.evaluations] == [None, 3, 1, 6]


def test_cli_table_and_json(trained_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["--test-layers", "3, 5", "--splits", "valid_ood, test_ood"]  # spaces after commas are fine
    assert main(["evaluate", str(trained_run), *arguments]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["test", "layers", "valid_ood", "test_ood"]
    assert [line.split()[0] for line in table[2:4]] == ["3", "5"]
    assert main(["evaluate", str(trained_run), "--checkpoint", "last", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["checkpoint"] == "last" and payload["evaluations"][0]["test_layers"] is None
    logged = logged_evaluation(trained_run, payload["step"])
    evaluated = payload["evaluations"][0]["splits"]
    assert set(evaluated) == set(logged)
    # the loss tells checkpoints apart (this tiny run's accuracy barely moves)
    for name, values in logged.items():
        assert evaluated[name]["accuracy"] == values["accuracy"]
        assert evaluated[name]["loss"] == pytest.approx(values["loss"], rel=1e-6)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--test-layers", "x"], "comma-separated integers"),
        (["--test-layers", "0"], "test layers must be >= 1"),
        (["--test-layers", "3,0"], "test layers must be >= 1"),
        (["--splits", "train_ood"], "no split 'train_ood'"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--device", "tpu"], "tpu"),
    ],
)
def test_user_errors_are_one_line(
    trained_run: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert main(["evaluate", str(trained_run), *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and message in error and "\n" not in error


def test_not_a_run_and_a_model_without_shared_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evaluate", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    run = tmp_path / "unshared"
    overrides = [*TINY_RUN, "model.shared_layers=false", "train.steps=2", "train.eval_every=2"]
    fit(run_config.resolve(run_config.parse_overrides(overrides)), run, progress=False)
    assert main(["evaluate", str(run), "--test-layers", "4"]) == 2
    assert "shared_layers" in capsys.readouterr().err
