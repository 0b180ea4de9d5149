from __future__ import annotations

import math

import pytest

from recombine.runs.aggregate import SeedSummary


def test_mean_std_success_rate_against_hand_computation() -> None:
    values = [1.0, 0.96, 0.5]
    summary = SeedSummary.of(values, threshold=0.95)
    mean = sum(values) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)  # sample std, ddof=1
    assert summary.mean == pytest.approx(mean)
    assert summary.std == pytest.approx(std)
    assert summary.success_rate == pytest.approx(2 / 3)
    assert summary.format() == f"{mean:.2f} ± {std:.2f} (2/3)"


def test_single_seed_has_zero_std_and_empty_is_an_error() -> None:
    assert SeedSummary.of([0.3], 0.95).std == 0.0
    with pytest.raises(ValueError):
        SeedSummary.of([], 0.95)


def test_a_seed_without_the_split_makes_the_summary_nan_not_a_crash() -> None:
    summary = SeedSummary.of([0.97, float("nan")], 0.95)  # a run that never evaluated the IID split
    assert math.isnan(summary.mean) and math.isnan(summary.std)
    assert math.isnan(summary.success_rate)  # unknown, not "one seed failed"
