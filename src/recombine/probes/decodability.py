"""Linear decodability of ground-truth task latents from learned task embeddings (HNET 4.1, Fig. 3C-D).

HNET section 4.1: "we train a linear decoder to predict the ground truth task latent variables of a task
given the learned embeddings of the student on a validation set and then test linear decoding performance
on the OOD set". The decoder is affine least squares (optionally ridge-regularised, the intercept never
penalised), ``z ~ W e + c``, fit on the validation tasks; the score is the coefficient of determination on
the OOD tasks,

    R^2 = 1 - sum_{t,j} (z_tj - z_hat_tj)^2 / sum_{t,j} (z_tj - mean_t z_tj)^2,

pooled over latent dimensions (variance-weighted), so latent dimensions that are constant on the OOD
set (a module never active there) do not make the score undefined. ``R^2 = 1`` for an exact affine
relation; it is about 0 (negative when the decoder overfits) when embeddings carry no information.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recombine.errors import UserError


@dataclass
class LinearDecoder:
    """Affine map ``z = embeddings @ weight + bias``."""

    weight: np.ndarray  # [embedding dim, latent dim]
    bias: np.ndarray  # [latent dim]

    def predict(self, embeddings: np.ndarray) -> np.ndarray:
        return embeddings @ self.weight + self.bias


def fit_linear_decoder(embeddings: np.ndarray, latents: np.ndarray, ridge: float = 0.0) -> LinearDecoder:
    """Least squares (minimum-norm when under-determined) with an unpenalised intercept."""
    if embeddings.ndim != 2 or latents.ndim != 2 or len(embeddings) != len(latents):
        raise UserError("embeddings and latents must be [tasks, dim] arrays with the same number of tasks")
    if ridge < 0:
        raise UserError(f"ridge must be >= 0, got {ridge}")
    e_mean, z_mean = embeddings.mean(axis=0), latents.mean(axis=0)
    e, z = embeddings - e_mean, latents - z_mean
    if ridge > 0 and e.shape[1] > e.shape[0]:  # wide (e.g. MAML: every parameter): the same solution,
        weight = e.T @ np.linalg.solve(e @ e.T + ridge * np.eye(e.shape[0]), z)  # a tasks x tasks system
    elif ridge > 0:
        weight = np.linalg.solve(e.T @ e + ridge * np.eye(e.shape[1]), e.T @ z)
    else:
        weight = np.linalg.lstsq(e, z, rcond=None)[0]
    return LinearDecoder(weight=weight, bias=z_mean - e_mean @ weight)


def r2_score(latents: np.ndarray, predictions: np.ndarray) -> float:
    """Variance-weighted coefficient of determination pooled over latent dimensions."""
    residual = ((latents - predictions) ** 2).sum()
    total = ((latents - latents.mean(axis=0)) ** 2).sum()
    if total == 0:
        raise UserError("the scored latents are constant; R^2 is undefined")
    return float(1.0 - residual / total)


def linear_decodability(
    fit_embeddings: np.ndarray,
    fit_latents: np.ndarray,
    score_embeddings: np.ndarray,
    score_latents: np.ndarray,
    ridge: float = 0.0,
) -> float:
    """HNET 4.1: fit the decoder on (validation) tasks, return its R^2 on other (OOD) tasks."""
    decoder = fit_linear_decoder(fit_embeddings, fit_latents, ridge)
    return r2_score(score_latents, decoder.predict(score_embeddings))
