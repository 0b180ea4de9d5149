"""CLI: listing, and errors a user can cause (one line on stderr, exit code 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recombine.cli import main


def test_tasks_and_models_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    names = {m["name"] for m in listed}
    assert {"ndr", "transformer", "transformer_rel", "transformer_rel_gate", "lstm", "bilstm"} <= names
    ndr = next(m for m in listed if m["name"] == "ndr")
    assert ndr["config"]["attention"] == "geometric" and ndr["config"]["copy_gate"] is True
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[0] == "ctl" and "table lookup" in line for line in lines)


RECIPES = Path(__file__).resolve().parents[1] / "recipes"

BAD_INPUTS = [
    (["train", "task=ctll", "model=ndr"], "unknown task 'ctll'; valid choices: ctl"),
    (["train", "task=ctl", "model=ndrr"], "unknown model 'ndrr'; valid choices: ndr"),
    (["train", "task=ctl", "model=ndr", "model.d_modell=3"], "unknown field model"),
    (["train", "task=ctl", "model=ndr", "model.d_model=abc"], "bad value for model"),
    (["train", "task=ctl", "model=ndr", "train.stepz=3"], "valid choices: steps"),
    (["train", "task=ctl", "model=ndr", "train.steps=-1"], "train.steps must be >= 1"),
    (["train", "task=ctl", "model=ndr", "train.lr=fast"], "bad value for train.lr"),
    (["train", "task=ctl", "model=ndr", "task.direction=sideways"], "direction"),
    (["train", "task=ctl", "model=ndr", "model.attention=magic"], "unknown model.attention"),
    (["train", "task=ctl", "model=ndr", "model.n_heads=3"], "not divisible"),
    (
        ["train", "task=ctl", "model=ndr", "trian.steps=3"],
        "unknown config section 'trian'; valid choices: train",
    ),
    (["train", "model=ndr"], "no task given"),
    (["train", "task=ctl", "model=ndr", "steps"], "not of the form key=value"),
    (["train", "task=ctl", "model=ndr", "seed=-4"], "seed must be a non-negative integer"),
    (["train", "missing.yaml"], "recipe 'missing.yaml' does not exist"),
    (["train", "--resume", "/nonexistent/run"], "not a run directory"),
    (["reproduce", "ndr-ctll"], "unknown reproduction 'ndr-ctll'; valid choices: ndr-ctl"),
    (["reproduce", "ndr-ctl", "--seeds", "0"], "--seeds must be >= 1"),
    (
        ["reproduce", "ndr-ctl", "--columns", "backwards"],
        "unknown column 'backwards' for ndr-ctl; valid choices: backward",
    ),
    (["reproduce", "ndr-ctl", "--models", "NRD"], "unknown model label 'NRD' for ndr-ctl; valid choices"),
    (["reproduce", "hnet-goals", "--columns", "A"], "--models and --columns pick cells of grid"),
    (["reproduce", "hnet-goals", "--no-progress"], "--no-progress is for grid reproductions"),
    (["sweep", str(RECIPES / "smfr-algo.yaml"), "--no-progress"], "--no-progress apply to grid recipes"),
    (
        ["reproduce", "selection", "source=/no/such/grid"],
        "selection.source '/no/such/grid' is not a directory",
    ),
    (["reproduce", "selection", "columns=[cutoff-99]"], "valid choices: cutoff-26, cutoff-30"),
    (
        ["reproduce", "selection", "grid=hnet-goals"],
        "must name a grid reproduction; 'hnet-goals' is scripted",
    ),
    (
        ["reproduce", "hnet-goals", "--jobs", "2"],
        "hnet-goals has no `jobs` setting; --jobs applies to grids",
    ),
    (["reproduce", "dnc-repeat-copy", "--jobs", "0"], "jobs must be >= 1; got 0"),
    (["reproduce", "dnc-repeat-copy", "ensemble=0"], "ensemble must be >= 1; got 0"),
    (["reproduce", "dnc-key-value", "--jobs", "2", "jobs=3"], "--jobs 2 and jobs=3 disagree"),
    (["reproduce", "dnc-assoc-recall", "seeds=[0,0]"], "seeds must not repeat; got [0, 0]"),
    (["report", "/nonexistent/dir"], "does not exist"),
    (["archive", "/nonexistent/dir", "archived"], "is not a reproduction or sweep directory"),
    (["frobnicate"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_user_errors_exit_2_with_one_line(
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: ")
    assert expected in err
    assert "Traceback" not in err


def test_bad_recipe_and_existing_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("task: [unclosed\n")
    assert main(["train", str(recipe)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    assert main(["train", "task=ctl", "model=ndr", "--run-dir", str(run)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_error_from_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recombine", "train", "task=ctl", "model=ndr", "model.d_model=x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "bad value for model" in proc.stderr


def test_model_task_kind_mismatch_is_one_line_and_writes_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["train", "task=scan", "model=ndr", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "classifier" in err
    assert not run.exists()


def test_overrides_may_follow_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    argv = ["train", "--run-dir", str(run), "--no-progress", "task=ctl", "task.n_train=100"]
    argv += [
        "task.n_valid_iid=10",
        "task.n_valid_ood=10",
        "task.n_test_ood=10",
        "model=lstm",
        "model.d_model=8",
    ]
    argv += ["train.steps=2", "train.eval_every=1", "train.threads=1"]
    assert main(argv) == 0
    assert (run / "result.json").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["tasks", "extra"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err
