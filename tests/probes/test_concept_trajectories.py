"""Concept-space summaries of a dynamics trace: hand-computed cases and the linear model's closed form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.experiments.sim_linear import run_sim_dynamics
from recombine.models.dynamics_models import DynamicsModelConfig, build_dynamics_model
from recombine.probes.concept_trajectories import (
    concept_learning_times,
    largest_rebound,
    output_speed,
    save_dynamics_figure,
)
from recombine.tasks.sim import SIMConfig, build_sim
from recombine.train.full_batch_dynamics import DynamicsTrace, FullBatchDynamicsConfig, train_full_batch


def _hand_trace(outputs: np.ndarray, times: np.ndarray, target: np.ndarray) -> DynamicsTrace:
    losses = 0.5 * ((outputs - target) ** 2).sum(-1)
    return DynamicsTrace(
        steps=np.arange(len(times)),
        times=times,
        train_loss=losses[:, 0],
        probe_outputs=outputs,
        probe_loss=losses,
        probe_names=["11"],
        probe_points=target,
        probe_targets=target,
        jacobians=None,
    )


def test_largest_rebound_of_hand_made_curves() -> None:
    assert largest_rebound(np.array([3.0, 2.0, 2.0, 1.0])) == 0.0
    assert largest_rebound(np.array([3.0, 1.0, 2.0, 0.5, 1.0])) == pytest.approx(1.0)


def test_learning_times_and_speed_on_a_hand_made_trace() -> None:
    times = np.array([0.0, 1.0, 2.0, 3.0])
    # concept 0 reaches half of 2.0 at t=2, concept 1 half of 4.0 at t=1; output moves 1, 2, 3 per step
    outputs = np.array([[0.0, 0.0], [0.6, 2.0], [1.0, 3.0], [2.0, 4.0]])[:, None, :]
    trace = _hand_trace(outputs, times, np.array([[2.0, 4.0]]))
    np.testing.assert_array_equal(concept_learning_times(trace, 0, 2, fraction=0.5), [2.0, 1.0])
    np.testing.assert_array_equal(concept_learning_times(trace, 0, 2, fraction=1.0), [3.0, 3.0])
    assert np.isnan(
        concept_learning_times(_hand_trace(outputs / 2, times, np.array([[2.0, 4.0]])), 0, 2, 1.0)
    ).all()
    mid, speed = output_speed(trace, 0)
    np.testing.assert_allclose(mid, [0.5, 1.5, 2.5])
    np.testing.assert_allclose(speed, [np.hypot(0.6, 2.0), np.hypot(0.4, 1.0), np.hypot(1.0, 1.0)])
    with pytest.raises(UserError):
        concept_learning_times(trace, 0, 2, fraction=0.0)


def test_settled_learning_times_ignore_early_crossings_that_fall_back() -> None:
    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    # concept 0 crosses 1.0 at t=1, falls back at t=2 and stays from t=3; concept 1 is above from the start;
    # the same trace with concept 0 falling back at the last record never settles
    outputs = np.array([[0.0, 3.0], [1.5, 3.0], [0.2, 3.0], [1.1, 3.0], [2.0, 3.0]])[:, None, :]
    trace = _hand_trace(outputs, times, np.array([[2.0, 4.0]]))
    np.testing.assert_array_equal(concept_learning_times(trace, 0, 2, 0.5), [1.0, 0.0])
    np.testing.assert_array_equal(concept_learning_times(trace, 0, 2, 0.5, settled=True), [3.0, 0.0])
    fell_back = outputs.copy()
    fell_back[-1, 0, 0] = 0.1
    assert np.isnan(
        concept_learning_times(
            _hand_trace(fell_back, times, np.array([[2.0, 4.0]])), 0, 2, 0.5, settled=True
        )[0]
    )


def test_linear_model_learns_concepts_in_order_of_signal_at_the_closed_form_times(tmp_path: Path) -> None:
    data = build_sim(
        SIMConfig(dim=4, mu=[1.0, 2.0], sigma=[0.05, 0.05], sigma_rest=0.05, n_per_cluster=100), 0
    )
    model = build_dynamics_model(DynamicsModelConfig(kind="linear", init_scale=1e-6), 4, 0, torch.float64)
    lr = 0.005
    config = FullBatchDynamicsConfig(steps=400, lr=lr, record="every", record_every=1, dtype="float64")
    trace = train_full_batch(model, data.inputs, data.targets, data.probe_points, data.probe_points, config)
    times = concept_learning_times(trace, data.test_probe, 2, fraction=0.5)
    # gradient flow from W0 ~ 0: output_p(t) = mu_p (1 - exp(-a_p t)) reaches mu_p / 2 at t = ln 2 / a_p
    second_moment = np.diag(data.inputs.T @ data.inputs / len(data.inputs))[:2]
    np.testing.assert_allclose(times, np.log(2) / second_moment, rtol=0.03, atol=lr)
    assert times[1] < times[0]  # the stronger concept (mu=2) first
    assert largest_rebound(trace.probe_loss[:, data.test_probe]) == 0.0  # one-layer linear: monotone
    figure = save_dynamics_figure(trace, [1.0, 2.0], tmp_path / "f.png", data.test_probe)
    assert figure.read_bytes()[:4] == b"\x89PNG"


def test_unknown_experiment_setting_names_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="linear, relu_mlp, symmetric_linear"):
        run_sim_dynamics(tmp_path, settings=["quadratic"])
