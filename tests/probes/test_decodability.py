"""Linear decodability R^2 (HNET 4.1): exact affine relations, independent noise, a closed form."""

from __future__ import annotations

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.probes.decodability import fit_linear_decoder, linear_decodability, r2_score


def test_exact_affine_relation_gives_r2_one_on_new_points() -> None:
    rng = np.random.default_rng(0)
    mixing, offset = rng.normal(size=(5, 3)), rng.normal(size=3)
    e_fit, e_score = rng.normal(size=(40, 5)), rng.normal(size=(30, 5))
    assert linear_decodability(
        e_fit, e_fit @ mixing + offset, e_score, e_score @ mixing + offset
    ) == pytest.approx(1.0)


def test_independent_noise_gives_r2_near_zero() -> None:
    rng = np.random.default_rng(1)
    r2 = linear_decodability(
        rng.normal(size=(4000, 4)),
        rng.normal(size=(4000, 3)),
        rng.normal(size=(4000, 4)),
        rng.normal(size=(4000, 3)),
    )
    assert abs(r2) < 0.01


def test_one_dimensional_in_sample_r2_is_the_squared_correlation() -> None:
    rng = np.random.default_rng(2)
    e = rng.normal(size=(200, 1))
    z = 0.7 * e + rng.normal(size=(200, 1))
    decoder = fit_linear_decoder(e, z)
    r2 = r2_score(z, decoder.predict(e))
    assert r2 == pytest.approx(np.corrcoef(e[:, 0], z[:, 0])[0, 1] ** 2)


def test_ridge_shrinks_towards_the_mean_and_constant_targets_raise() -> None:
    rng = np.random.default_rng(3)
    e = rng.normal(size=(50, 2))
    z = e @ np.array([[1.0], [2.0]])
    strong = fit_linear_decoder(e, z, ridge=1e9)
    np.testing.assert_allclose(strong.predict(e), z.mean(), atol=1e-5)
    with pytest.raises(UserError, match="constant"):
        r2_score(np.ones((5, 2)), np.zeros((5, 2)))


def test_wide_embeddings_take_the_dual_ridge_solution_with_the_primal_value() -> None:
    """More embedding dimensions than tasks (MAML's embedding is every parameter): the tasks x tasks system
    gives the decoder of the dimension x dimension one, (E^T E + r I)^-1 E^T z = E^T (E E^T + r I)^-1 z."""
    rng = np.random.default_rng(4)
    e, z = rng.normal(size=(12, 40)), rng.normal(size=(12, 3))
    decoder = fit_linear_decoder(e, z, ridge=0.5)
    centred_e, centred_z = e - e.mean(axis=0), z - z.mean(axis=0)
    primal = np.linalg.solve(centred_e.T @ centred_e + 0.5 * np.eye(40), centred_e.T @ centred_z)
    np.testing.assert_allclose(decoder.weight, primal, atol=1e-10)
    np.testing.assert_allclose(decoder.predict(e).mean(axis=0), z.mean(axis=0), atol=1e-10)
