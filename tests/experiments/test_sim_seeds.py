"""SIM over seeds (CATALOG §1.14): the per-seed measures by hand, the one-layer run against gradient flow,
and the ``sim-linear`` / ``sim-mlp`` reproductions end to end at quick scale."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.experiments.sim_seeds import (
    SIM_LINEAR,
    SIM_MLP,
    SIMSeedsConfig,
    learning_order_follows,
    measure,
    path_detour,
    rebound_minimum_time,
    train_setting,
)


def test_learning_order_by_hand() -> None:
    assert learning_order_follows(np.array([2.0, 1.0]), [1.0, 2.0])
    assert not learning_order_follows(np.array([1.0, 2.0]), [1.0, 2.0])
    assert learning_order_follows(np.array([1.0, 5.0, 3.0]), [3.0, 1.0, 2.0])  # mu unsorted
    assert not learning_order_follows(np.array([1.0, 1.0]), [1.0, 2.0])  # a tie is not an order
    assert not learning_order_follows(np.array([np.nan, 1.0]), [1.0, 2.0])  # never learnt


def test_path_detour_by_hand() -> None:
    target = np.array([1.0, 2.0])
    straight = np.linspace([0.0, 0.0], target, 7)
    assert path_detour(straight, target) == pytest.approx(0.0, abs=1e-12)
    # via the strong cluster's centre (0, 2): its distance to the line through (1, 2) is |0*2 - 2*1| / sqrt(5)
    swing = np.array([[0.0, 0.0], [0.0, 2.0], [1.0, 2.0]])
    assert path_detour(swing, target) == pytest.approx((2 / math.sqrt(5)) / math.sqrt(5), rel=1e-12)
    overshoot = np.array([[0.0, 0.0], [2.0, 4.0], [1.0, 2.0]])  # beyond the target: distance to the endpoint
    assert path_detour(overshoot, target) == pytest.approx(1.0, rel=1e-12)


def test_rebound_minimum_time_by_hand() -> None:
    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert rebound_minimum_time(np.array([3.0, 1.0, 2.0, 0.5, 0.7]), times) == 1.0  # rise 1 from t=1
    assert rebound_minimum_time(np.array([3.0, 2.0, 1.0, 0.5, 0.4]), times) == 0.0  # no rise


def test_one_layer_run_follows_the_closed_form_rates() -> None:
    """From W0 ~ 0 the one-layer flow reaches half of concept p's target at ln 2 / a_p (CATALOG §1.14); its
    probe loss (1/2)||exp(-t Sigma) p||^2 never increases."""
    config = SIMSeedsConfig(settings=["linear"], seeds=[3], steps=1200, n_records=600)
    setting = config.setting("linear")
    data, trace, flow = train_setting(setting, 3)
    run = measure(config, setting, 3, data, trace, flow)
    mu = np.asarray(setting.task.mu)
    rates = mu**2 / len(mu) + np.asarray(setting.task.sigma) ** 2
    expected = math.log(2) / rates
    assert np.allclose(run.learning_times, expected, rtol=0.03)  # record grid ~1.2 %, sample moments
    assert run.order_follows_mu
    assert run.train_loss_monotonic and not run.probe_loss_non_monotonic
    assert run.closed_form_gap is not None and run.closed_form_gap < 0.05


def test_unknown_setting_is_one_line() -> None:
    with pytest.raises(UserError, match="unknown SIM setting 'quadratic'"):
        SIMSeedsConfig(settings=["quadratic"])


@pytest.mark.parametrize("reproduction", [SIM_LINEAR, SIM_MLP], ids=lambda r: r.name)
def test_reproduction_quick_run(reproduction, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = reproduction.resolve_config(2, True, {})
    assert config.seeds == [0, 1]
    assert config.settings == reproduction.defaults["settings"]
    report = run_scripted(reproduction, tmp_path, seeds=2, quick=True)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["reproduction"] == reproduction.name
    assert len(results["runs"]) == 2 * len(config.settings)
    text = report.read_text()
    for name in config.settings:
        assert f"## {name}" in text
        assert (tmp_path / f"sim_{name}_seeds.png").is_file()
        assert (tmp_path / f"sim_{name}_seed0.png").is_file()
    assert (tmp_path / "sim_linear_closed_form.png").is_file() == ("linear" in config.settings)
    for run in results["runs"]:  # learnt concepts at the test probe's target, in the order of mu_p
        if run["order_follows_mu"]:
            finite = [t for t in run["learning_times"] if t == t]
            assert finite == sorted(finite, reverse=True)
