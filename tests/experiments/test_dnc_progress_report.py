"""``recombine report`` on a DNC reproduction that has not finished: the progress report of its kept and
checkpointed runs, with the steps to the convergence threshold a plain loop over the training loss finds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from dnc_in_progress import SETTINGS, stopped_reproduction
from recombine.cli import main
from recombine.experiments import REPRODUCTIONS
from recombine.experiments.dnc_memory import chance_loss
from recombine.experiments.dnc_progress_report import reproduction_config
from recombine.experiments.dnc_trial_checkpoint import load_training_state
from recombine.experiments.dnc_trial_listing import dnc_trials


def first_step_below(train_loss: np.ndarray, threshold: float, window: int) -> int | None:
    """The first step t >= window with mean(train_loss[t - window:t]) < threshold, by a plain loop."""
    for t in range(window, len(train_loss) + 1):
        if sum(train_loss[t - window : t]) / window < threshold:
            return t
    return None


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dnc") / "repro"
    stopped_reproduction(out)
    return out


def row(text: str, variant: str, seed: int) -> list[str]:
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[:2] == [variant, str(seed)]:
            return cells
    raise AssertionError(f"no row for {variant} seed {seed} in\n{text}")


def test_progress_report_of_the_runs_so_far(reproduction: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept, running = dnc_trials(reproduction)
    task = kept.task
    window = SETTINGS["smooth"]
    # a threshold the kept run's moving average crosses, and the checkpointed run's may not: from its curve
    averages = np.convolve(kept.train_loss, np.ones(window) / window, mode="valid")
    threshold = float(np.sort(averages)[1]) + 1e-6  # above the second-lowest average: crossed at least once
    fraction = threshold / chance_loss(task)
    assert 0 < fraction < 1, "the tiny runs' loss no longer crosses a threshold the config accepts"
    config_file = reproduction / "experiment.yaml"
    values = yaml.safe_load(config_file.read_text())
    config_file.write_text(yaml.safe_dump({**values, "threshold_fraction": fraction}))

    assert main(["report", str(reproduction), "--html"]) == 0
    out = capsys.readouterr().out
    assert f"html: {reproduction / 'progress.html'}" in out
    assert (reproduction / "progress.md").read_text() in out
    assert (reproduction / "progress.html").stat().st_size > 0
    assert (reproduction / "progress_loss.png").read_bytes()[:4] == b"\x89PNG"
    assert not (reproduction / "report.md").exists()  # the reproduction's own report is still to come
    assert "1 of 2 runs kept, 1 checkpointed, 0 not started" in out

    expected_kept = first_step_below(kept.train_loss, threshold, window)
    assert expected_kept is not None
    cells = row(out, "dnc_ds", 0)
    assert cells[2:4] == ["kept", "6/6"]
    assert float(cells[4]) == pytest.approx(kept.eval_loss, rel=1e-2)
    assert cells[7] == str(expected_kept)

    state = load_training_state(running_checkpoint(reproduction, running.name))
    expected_running = first_step_below(state.train_loss, threshold, window)
    cells = row(out, "dnc_ds", 1)
    assert cells[2:4] == ["checkpoint", "3/6"]
    assert float(cells[4]) == pytest.approx(state.evaluations[-1][1], rel=1e-2)
    assert cells[7] == ("-" if expected_running is None else str(expected_running))
    reached = [step for step in (expected_kept, expected_running) if step is not None]
    summary = f"| dnc_ds | {len(reached)} of 2 | {', '.join(map(str, sorted(reached)))} |"
    assert summary in out


def running_checkpoint(reproduction: Path, name: str) -> Path:
    return reproduction / "trials" / "partial" / f"{name}.pt"


def test_runs_not_started_and_runs_of_other_settings(
    reproduction: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows are the config's variants x seeds: a seed without a run is 'not started'; a kept run of other
    settings (here 6 steps, where the config now asks 12) is counted and left out."""
    copy = tmp_path / "repro"
    shutil.copytree(reproduction, copy)
    config_file = copy / "experiment.yaml"
    values = yaml.safe_load(config_file.read_text())
    config_file.write_text(yaml.safe_dump({**values, "seeds": [0, 1, 2]}))
    assert main(["report", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "1 of 3 runs kept, 1 checkpointed, 1 not started" in out
    assert row(out, "dnc_ds", 2)[2:4] == ["not started", "-"]
    summary = next(line for line in out.splitlines() if line.startswith("| dnc_ds | ") and " of 3 |" in line)
    assert summary.split("|")[2].strip().endswith("of 3")  # seeds past the threshold, out of the config's 3

    config_file.write_text(yaml.safe_dump({**values, "steps": 12}))
    assert main(["report", str(copy)]) == 0
    captured = capsys.readouterr()
    assert "0 of 2 runs kept, 0 checkpointed, 2 not started" in captured.out
    assert [row(captured.out, "dnc_ds", seed)[2] for seed in (0, 1)] == ["not started", "not started"]
    assert f"1 kept run of other settings in {copy} is left out" in captured.out
    assert "progress_loss.png" not in captured.out  # no run of the config has started: no figure
    assert "matches no run of experiment.yaml" in captured.err  # the 6-step checkpoint, said by the listing


def test_unfinished_reproduction_of_another_kind_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # started and killed before writing its report: sim-linear's own config
    config = REPRODUCTIONS["sim-linear"].resolve_config(None, True, {})
    (tmp_path / "experiment.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no report.md yet" in err


@pytest.mark.parametrize("name", ["dnc-repeat-copy", "dnc-assoc-recall", "dnc-key-value"])
def test_each_reproduction_reads_back_as_its_own_config(name: str, tmp_path: Path) -> None:
    """dnc-key-value's fields are a subset of dnc-repeat-copy's: its experiment.yaml fits both classes."""
    config = REPRODUCTIONS[name].resolve_config(None, True, {})
    (tmp_path / "experiment.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))
    assert reproduction_config(tmp_path) == config


def test_unreadable_checkpoint_is_not_a_run_not_started(
    reproduction: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "repro"
    shutil.copytree(reproduction, copy)
    _, running = dnc_trials(copy)
    running_checkpoint(copy, running.name).write_bytes(b"cut short")
    assert main(["report", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 runs kept, 0 checkpointed, 1 unreadable (see `recombine runs`), 0 not started" in out
    assert row(out, "dnc_ds", 1)[2] == "unreadable"
