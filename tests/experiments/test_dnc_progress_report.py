"""``recombine report`` on a DNC reproduction that has not finished: the progress report of its kept and
checkpointed runs, with the steps to the convergence threshold a plain loop over the training loss finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from dnc_in_progress import SETTINGS, stopped_reproduction
from recombine.cli import main
from recombine.experiments.dnc_memory import chance_loss
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
    assert "1 of 2 runs kept, 1 checkpointed" in out

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


def test_unfinished_reproduction_without_runs_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "experiment.yaml").write_text("seeds: [0]\n")  # started, killed before any run was kept
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no report.md yet" in err
