"""sim-diffusion (SIM seed §5, Fig. 6): the scripted reproduction resolves and runs end to end (tiny scale).

Also the experiment's own geometry helpers against hand-computed cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.experiments.scripted_reproduction import ScriptedReproduction, run_scripted
from recombine.experiments.sim_diffusion import (
    SIM_DIFFUSION,
    SIMDiffusionRunConfig,
    checkpoint_steps,
    path_swing,
)


def reproduction() -> ScriptedReproduction:
    return SIM_DIFFUSION


def test_quick_config_resolves_with_seeds_and_nested_overrides() -> None:
    config = reproduction().resolve_config(2, True, {})
    assert config.seeds == [0, 1]
    assert config.steps == 30 and config.model.hidden == 32 and config.task.n_per_combination == 8
    assert config.task.held_out == ["11"]


def test_quick_run_writes_a_report_results_and_figures(tmp_path: Path) -> None:
    report = run_scripted(reproduction(), tmp_path, seeds=2, quick=True)
    text = report.read_text()
    assert "learning order at the test probe 11" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert [run["seed"] for run in results["runs"]] == [0, 1]
    run = results["runs"][0]
    outputs, targets = np.array(run["probe_outputs"]), np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    assert outputs.shape == (len(run["steps"]), 4, 2)
    np.testing.assert_allclose(run["probe_loss"], 0.5 * ((outputs - targets) ** 2).sum(-1), rtol=1e-6)
    for name in ("sim_diffusion_seed0.png", "sim_diffusion_seed1.png", "sim_diffusion_seeds.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "sim_diffusion_samples.png").is_file()


def test_checkpoints_start_at_zero_and_end_at_the_last_step() -> None:
    steps = checkpoint_steps(1000, 5)
    assert steps[0] == 0 and steps[-1] == 1000 and np.all(np.diff(steps) > 0)
    np.testing.assert_array_equal(checkpoint_steps(1000, 5), [0, 1, 10, 100, 1000])  # 0, then 10^0..10^3


def test_path_swing_is_the_largest_distance_from_the_straight_line() -> None:
    path = np.array([[0.5, 0.5], [0.9, 0.5], [1.0, 1.0]])  # detours along concept 0 before reaching (1, 1)
    swing, record = path_swing(path, np.array([1.0, 1.0]))
    assert record == 1
    assert swing == pytest.approx(0.4 / np.sqrt(2))  # distance of (0.9, 0.5) from the diagonal
    assert path_swing(np.array([[0.5, 0.5], [0.75, 0.75], [1, 1]]), np.array([1.0, 1.0]))[0] == pytest.approx(
        0
    )


def test_bad_fraction_is_a_user_error() -> None:
    with pytest.raises(UserError, match="fraction"):
        SIMDiffusionRunConfig(fraction=0.5)
