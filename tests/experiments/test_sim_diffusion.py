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
    first_formed_record,
    held_out_probe_swing,
    learning_order,
    path_swing,
)
from recombine.models.concept_diffusion import ConceptDiffusionConfig


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
    # 30 quick steps make no images: the path of the held-out probe is not read, and the report says so
    assert all(r["formed_step"] is None for r in results["runs"]) and "| never |" in text
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


def test_the_path_is_read_from_when_the_training_samples_read_right_for_good() -> None:
    # columns 00, 01, 10, 11; the held-out 11 does not count. Means over 00, 01, 10: 0.9 (an early good
    # checkpoint of blobs), 0.3, 0.6, 1.0
    accuracy = np.array(
        [[0.9, 0.9, 0.9, 0.0], [0.6, 0.2, 0.1, 1.0], [0.7, 0.6, 0.5, 0.0], [1.0, 1.0, 1.0, 0.0]]
    )
    assert first_formed_record(accuracy, [0, 1, 2]) == 2
    assert first_formed_record(accuracy, [0, 1, 2], threshold=0.9) == 3
    assert first_formed_record(accuracy[:2], [0, 1, 2]) is None  # below at the last record
    assert first_formed_record(accuracy[:2], [0, 1, 2], threshold=0.1) == 0


def test_the_held_out_probe_swing_counts_a_detour_reached_before_the_samples_formed() -> None:
    targets = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    # the held-out 11 collapses toward 10 by record 2 (when the samples form), then turns to its target
    path = np.array([[0.5, 0.5], [0.6, 0.4], [0.9, 0.1], [0.95, 0.5], [1.0, 1.0]])
    outputs = np.zeros((5, 4, 2))
    outputs[:, 3] = path
    swing, record, nearest = held_out_probe_swing(outputs, targets, 3, [0, 1, 2], formed=2)
    assert record == 2 and nearest == 2  # nearest the training combination 10
    assert swing == pytest.approx(0.8 / np.sqrt(2))  # distance of (0.9, 0.1) from the diagonal through 1/2
    # records before `formed` do not count, and a straight path has no direction
    assert held_out_probe_swing(outputs, targets, 3, [0, 1, 2], formed=4)[2] is None
    straight = np.zeros((3, 4, 2))
    straight[:, 3] = [[0.5, 0.5], [0.7, 0.72], [1.0, 1.0]]
    swing, _, nearest = held_out_probe_swing(straight, targets, 3, [0, 1, 2], formed=0)
    assert swing < 0.1 and nearest is None


def test_learning_order_against_the_signals() -> None:
    signals = np.array([4.8, 3.5])  # concept 0 stronger
    assert learning_order(np.array([2.0, 5.0]), signals) == "follows"
    assert learning_order(np.array([2.0, np.nan]), signals) == "follows"  # the weaker one never learnt
    assert learning_order(np.array([5.0, 2.0]), signals) == "reversed"
    assert learning_order(np.array([2.0, 2.0]), signals) == "tied"
    assert learning_order(np.array([np.nan, 2.0]), signals) == "none"
    assert learning_order(np.array([5.0, 2.0]), signals[::-1]) == "follows"  # concept 1 stronger


def test_guidance_without_a_null_condition_is_a_user_error() -> None:
    with pytest.raises(UserError, match="condition_dropout"):
        SIMDiffusionRunConfig(model=ConceptDiffusionConfig(condition_dropout=0.0))
    assert (
        SIMDiffusionRunConfig(model=ConceptDiffusionConfig(condition_dropout=0.0), guidance=0.0).guidance == 0
    )


def test_the_default_samples_with_classifier_free_guidance() -> None:
    config = SIMDiffusionRunConfig()
    assert config.guidance > 0 and config.model.condition_dropout > 0


def test_bad_fraction_is_a_user_error() -> None:
    with pytest.raises(UserError, match="fraction"):
        SIMDiffusionRunConfig(fraction=0.5)
