from __future__ import annotations

import math

import pytest

from recombine.train.schedules import lr_multiplier


def test_noam_warms_up_linearly_then_decays_as_inverse_sqrt() -> None:
    f = lr_multiplier("noam", warmup_steps=100, total_steps=1000)
    assert f(0) == pytest.approx(1 / 100)
    assert f(49) == pytest.approx(50 / 100)
    assert f(99) == pytest.approx(1.0)
    assert f(399) == pytest.approx(math.sqrt(100 / 400))


def test_constant_and_cosine() -> None:
    assert lr_multiplier("constant", 0, 10)(5) == 1.0
    assert lr_multiplier("constant", 4, 10)(1) == pytest.approx(0.5)
    cosine = lr_multiplier("cosine", 0, 100)
    assert cosine(0) == pytest.approx(1.0)
    assert cosine(50) == pytest.approx(0.5)
    assert cosine(100) == pytest.approx(0.0, abs=1e-12)
