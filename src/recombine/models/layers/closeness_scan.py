"""The two cumulative sums of geometric attention along each query's closeness order, compiled for CPU.

Geometric attention (thesis eqs. 5.7-5.8, :mod:`recombine.models.layers.geometric_attention`) needs, for
every query ``i``, sums over the keys in the order ``i+1, i-1, i+2, i-2, ...`` (ties to the right).
In PyTorch that takes a gather into that order, a cumulative sum and a gather back: three passes over
the ``[..., N, N]`` scores with index tensors, which dominate the cost on a CPU. Here each query row is
walked once, outwards from ``i`` (forward) or inwards towards it (backward), with the key index
computed on the fly. The loops are compiled with numba (``cache=True``: compiled once per machine, then
loaded from ``__pycache__``). Both kernels take ``[rows, N]`` C-contiguous float arrays whose row ``r``
belongs to query ``i = r mod N`` (all leading dims flattened), and write every entry of ``out``.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def log_weights_scan(
    x: np.ndarray, sp: np.ndarray, out: np.ndarray, floor: float
) -> None:  # pragma: no cover
    """``out[i, j] = max(x[i, j] - sp[i, j] - c[i, j], floor)`` with ``c[i, j] = sum_{k in S_ij} sp[i, k]``
    (the log of eq. 5.7 with ``sp = -log(1 - P)``), and ``out[i, i] = floor`` (the zeroed diagonal)."""
    rows, n = x.shape
    for r in range(rows):
        i = r % n
        acc = 0.0  # sum of sp over the keys visited so far: S_ij for the next key j
        for d in range(1, n):
            j = i + d  # at equal distance the right key comes first (eq. 5.8)
            if j < n:
                value = x[r, j] - sp[r, j] - acc
                out[r, j] = value if value > floor else floor
                acc += sp[r, j]
            j = i - d
            if j >= 0:
                value = x[r, j] - sp[r, j] - acc
                out[r, j] = value if value > floor else floor
                acc += sp[r, j]
        out[r, i] = floor


@numba.njit(cache=True, nogil=True)
def logits_gradient_scan(
    grad: np.ndarray, a: np.ndarray, p: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover
    """``out[i, k] = G[i, k] - p[i, k] * R[i, k]`` with ``G = grad * a`` (the gradient w.r.t. log A) and
    ``R[i, k] = sum_{j : k in S_ij or j = k} G[i, j]``, a reversed inclusive cumulative sum along the
    closeness order; ``out[i, i] = 0``."""
    rows, n = grad.shape
    for r in range(rows):
        i = r % n
        acc = 0.0
        for d in range(n - 1, 0, -1):  # the closeness order backwards: at distance d left, then right
            j = i - d
            if j >= 0:
                g = grad[r, j] * a[r, j]
                acc += g
                out[r, j] = g - p[r, j] * acc
            j = i + d
            if j < n:
                g = grad[r, j] * a[r, j]
                acc += g
                out[r, j] = g - p[r, j] * acc
        out[r, i] = 0.0
