"""Geometric attention weights and their gradient along each query's closeness order, compiled for CPU.

Geometric attention (thesis eqs. 5.7-5.8, :mod:`recombine.models.layers.geometric_attention`) weighs key
``j`` of query ``i`` by ``A[i, j] = P[i, j] * prod_{k in S_ij} (1 - P[i, k])``, the product running over
the keys closer to ``i`` in the order ``i+1, i-1, i+2, i-2, ...`` (ties to the right). In PyTorch that
takes several passes over the ``[..., N, N]`` scores (softplus, a gather into that order, a cumulative
sum, a gather back, exp; sigmoid and the same gathers again in the backward), most with a fresh
``[..., N, N]`` tensor. Here the forward and the backward are one compiled kernel each, which reads its
inputs once and writes its output once:

* the element-wise part (``P = sigmoid(x)`` and ``1 - P``; the backward's ``G = dL/dA * A``) runs on a
  chunk of a few thousand scores at a time into scratch buffers that stay in cache. The exponential
  is a polynomial with exact power-of-two scaling (:func:`_exp_nonpositive`, a few ulp) so that the
  loop vectorises (numba has no vectorised ``exp`` without Intel's SVML).
* each query row is then walked outwards from ``i`` (forward) or inwards towards it (backward) with the
  key index computed on the fly (no index tensors). The forward multiplies ``1 - P`` in linear space,
  two distances (four keys) per step with the carried product updated once per step; the backward's
  reversed cumulative sum of ``G`` splits into the keys right and left of ``i`` (the keys closer than
  ``i + d`` are those at distance ``< d`` on both sides; ``i - d`` adds ``i + d``).

Weights below ``thresh`` (see :func:`geometric_forward`) are flushed to 0; once the running product of
``1 - P`` falls below it, every farther weight of the row is below it too, so the walk stops there,
writes zeros for the rest of the row and records the distance it reached. The backward walks only that
far: beyond it ``A`` is 0, so the gradient is 0 as well.

The kernels take flat C-contiguous arrays of ``rows * n`` scores whose row ``r`` belongs to query
``i = r mod n`` (all leading dims flattened), float32 or float64, and write every entry of ``out``.
float32 is computed in float32 throughout: weights and gradients stay within a few 1e-6 (relative; the
gradients relative to their largest entry) of float64 along rows of 256 keys, as the PyTorch
implementation in float32 does. They are compiled with numba (``cache=True``: once per machine, then
loaded from ``__pycache__``).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

__all__ = ["geometric_backward", "geometric_forward"]

# Contraction to FMA and reciprocal / sign-of-zero freedom only (no "ninf": logits may be -inf).
_FASTMATH = {"contract", "arcp", "nsz"}
# error_model="numpy": no ZeroDivisionError checks, which would keep the loops from vectorising.
_JIT = {"cache": True, "nogil": True, "fastmath": _FASTMATH, "error_model": "numpy", "boundscheck": False}
# Scores per chunk of the element-wise pass: its scratch buffers and the chunk of inputs stay in the L1
# cache (4096 was up to 1.5x slower at N = 256).
_CHUNK = 1024
# Unsigned indices: numba adds no negative-index wrap-around, so the loops load contiguously.
_U = np.uint64
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)


@intrinsic
def _pow2(typingctx, k):  # pragma: no cover
    """``2.0 ** k`` for an integer-valued float ``k`` in the normal range of its type, by building the
    exponent bits (``ldexp`` is not vectorised)."""
    if k not in (types.float32, types.float64):
        return None
    bits, mantissa, bias = (32, 23, 127) if k == types.float32 else (64, 52, 1023)
    int_type = ir.IntType(bits)

    def codegen(context, builder, signature, args):
        exponent = builder.fptosi(args[0], int_type)
        exponent = builder.add(exponent, ir.Constant(int_type, bias))
        return builder.bitcast(builder.shl(exponent, ir.Constant(int_type, mantissa)), args[0].type)

    return k(k), codegen


def _exp_nonpositive(t):  # pragma: no cover
    """``exp(t)`` for ``log(smallest normal) < t <= 0`` (typed by :func:`_exp_nonpositive_impl`)."""
    raise NotImplementedError


# Taylor coefficients 1 / k! (highest degree first) after reduction to |r| <= ln(2) / 2: degree 13 gives
# < 2 ulp in float64, degree 7 in float32.
_TAYLOR64 = tuple(1.0 / float(np.prod(np.arange(1, k + 1))) for k in range(14))[::-1]
_TAYLOR32 = tuple(np.float32(c) for c in _TAYLOR64[-8:])


@overload(_exp_nonpositive, jit_options={"fastmath": _FASTMATH}, inline="always")
def _exp_nonpositive_impl(t):  # pragma: no cover
    if t == types.float64:
        log2e, ln2_hi, ln2_lo, half, coefficients = (
            1.4426950408889634,
            6.93147180369123816490e-01,
            1.90821492927058770002e-10,
            0.5,
            _TAYLOR64,
        )
    elif t == types.float32:
        log2e, ln2_hi, ln2_lo, half, coefficients = (
            np.float32(1.4426950408889634),
            np.float32(0.693359375),
            np.float32(-2.12194440e-4),
            np.float32(0.5),
            _TAYLOR32,
        )
    else:
        return None

    def impl(t):
        k = np.floor(t * log2e + half)  # t = k ln 2 + r
        r = (t - k * ln2_hi) - k * ln2_lo  # Cody-Waite: ln 2 in two parts keeps r exact
        poly = coefficients[0]
        for c in numba.literal_unroll(coefficients[1:]):
            poly = poly * r + c
        return poly * _pow2(k)

    return impl


def _sigmoid_pair(t, low):  # pragma: no cover
    """``(P, 1 - P)`` with ``P = sigmoid(t)``; ``P = 0`` (and ``1 - P = 1``) for ``t < low``."""
    raise NotImplementedError


@overload(_sigmoid_pair, jit_options={"fastmath": _FASTMATH}, inline="always")
def _sigmoid_pair_impl(t, low):  # pragma: no cover
    if t not in (types.float32, types.float64):
        return None
    one = np.float32(1.0) if t == types.float32 else 1.0
    zero = np.float32(0.0) if t == types.float32 else 0.0

    def impl(t, low):
        # e = exp(-|t|) <= 1 never overflows; clamped at ``low`` it stays a normal number (a denormal or
        # zero would slow the exp down); for t < low, P is 0 and 1 - P is 1 (padded keys: t = -inf).
        m = -abs(t)
        e = _exp_nonpositive(m if m > low else low)
        inv = one / (one + e)
        tail = e * inv  # sigmoid(-|t|)
        if t >= zero:
            return inv, tail
        if t >= low:
            return tail, inv
        return zero, one

    return impl


@numba.njit(**_JIT)
def _probabilities(x, start, stop, low, p, q):  # pragma: no cover
    """``p[e - start], q[e - start] = P, 1 - P`` of the scores ``x[start:stop]`` (vectorised)."""
    for e in range(_U(start), _U(stop)):
        p[e - _U(start)], q[e - _U(start)] = _sigmoid_pair(x[e], low)


@numba.njit(**_JIT)
def _probabilities_and_products(x, a, grad, start, stop, low, p, g):  # pragma: no cover
    """``p[e - start] = P`` of ``x[start:stop]`` and ``g[e - start] = grad * a`` (vectorised)."""
    for e in range(_U(start), _U(stop)):
        p[e - _U(start)] = _sigmoid_pair(x[e], low)[0]
        g[e - _U(start)] = grad[e] * a[e]


@numba.njit(**_JIT)
def geometric_forward(x, n, padded, out, reach, thresh, low):  # pragma: no cover
    """Geometric attention weights (thesis eq. 5.7) of the flat scores ``x`` (``rows * n``, row ``r`` =
    query ``r mod n``) into ``out``: ``A[i, j] = P[i, j] * prod_{k in S_ij} (1 - P[i, k])``, ``A[i, i] = 0``.

    ``padded``: bool ``[rows / n, n]``, True for keys with ``P = 0`` (padding), or ``[0, n]`` for none.
    Weights below ``thresh`` are written as 0; a row's walk stops where the product of ``1 - P`` falls
    below ``thresh`` and ``reach[r]`` is the largest key distance it visited. ``thresh`` and ``low``
    (logits below it count as ``P = 0``, see :func:`_sigmoid_pair`) are of ``x``'s dtype.
    """
    rows = x.shape[0] // n if n > 0 else 0
    chunk_rows = max(1, _CHUNK // max(n, 1))
    p = np.empty(chunk_rows * n, x.dtype)  # P and 1 - P of a chunk of rows
    q = np.empty(chunk_rows * n, x.dtype)
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        _probabilities(x, r0 * n, r1 * n, low, p, q)
        if padded.shape[0] > 0:
            for r in range(r0, r1):
                for j in range(n):
                    if padded[r // n, j]:
                        p[(r - r0) * n + j] = 0.0
                        q[(r - r0) * n + j] = 1.0
        for r in range(r0, r1):
            i = r % n
            s = (r - r0) * n + i  # the diagonal's index in p / q ...
            o = r * n + i  # ... and in out
            near = min(i, n - 1 - i)  # keys at distances 1..near exist on both sides of i
            far = max(i, n - 1 - i)
            side = 1 if n - 1 - i > i else -1  # the side with keys at distances near+1..far
            # prod (1 - P) over the keys visited so far: Q of the next key (float32 for float32 inputs)
            product = _ONE
            d = 1  # the next distance
            # Both sides, two distances per step: keys i+d, i-d, i+d+1, i-d-1 in this order, the
            # carried product updated once per step (the products within a step are off that chain).
            while d < near and product >= thresh:
                k1 = _U(s + d)
                k2 = _U(s - d)
                k3 = _U(s + d + 1)
                k4 = _U(s - d - 1)
                product2 = product * q[k1]
                product3 = product2 * q[k2]
                product4 = product3 * q[k3]
                a = p[k1] * product
                out[_U(o + d)] = a if a >= thresh else _ZERO
                a = p[k2] * product2
                out[_U(o - d)] = a if a >= thresh else _ZERO
                a = p[k3] * product3
                out[_U(o + d + 1)] = a if a >= thresh else _ZERO
                a = p[k4] * product4
                out[_U(o - d - 1)] = a if a >= thresh else _ZERO
                product *= (q[k1] * q[k2]) * (q[k3] * q[k4])
                d += 2
            if d == near and product >= thresh:  # an odd number of distances on both sides
                a = p[_U(s + d)] * product
                out[_U(o + d)] = a if a >= thresh else _ZERO
                product2 = product * q[_U(s + d)]
                a = p[_U(s - d)] * product2
                out[_U(o - d)] = a if a >= thresh else _ZERO
                product = product2 * q[_U(s - d)]
                d += 1
            while d < far and product >= thresh:  # one side only, two keys per step
                k1 = _U(s + side * d)
                k2 = _U(s + side * (d + 1))
                a = p[k1] * product
                out[_U(o + side * d)] = a if a >= thresh else _ZERO
                a = p[k2] * (product * q[k1])
                out[_U(o + side * (d + 1))] = a if a >= thresh else _ZERO
                product *= q[k1] * q[k2]
                d += 2
            if d == far and product >= thresh:
                a = p[_U(s + side * d)] * product
                out[_U(o + side * d)] = a if a >= thresh else _ZERO
                d += 1
            d -= 1  # the last distance visited; every farther weight is below thresh
            for j in range(_U(r * n), _U(o - min(d, i))):
                out[j] = 0.0
            for j in range(_U(o + min(d, n - 1 - i) + 1), _U(r * n + n)):
                out[j] = 0.0
            out[_U(o)] = 0.0
            reach[r] = d


@numba.njit(**_JIT)
def geometric_backward(x, n, padded, a, grad, out, reach, low):  # pragma: no cover
    """Gradient w.r.t. the scores ``x`` of :func:`geometric_forward` given ``grad = dL/dA`` (same layout):
    ``out[i, k] = G[i, k] - P[i, k] * R[i, k]`` with ``G = grad * A`` (the gradient w.r.t. ``log A``) and
    ``R[i, k] = sum_{j : k in S_ij or j = k} G[i, j]``, a reversed inclusive cumulative sum along the
    closeness order; ``out[i, i] = 0``. ``a`` and ``reach`` are the forward's output and reach: keys
    farther than ``reach`` have ``A = 0``, hence ``G = 0`` and ``R = 0``, and get 0.
    """
    rows = x.shape[0] // n if n > 0 else 0
    chunk_rows = max(1, _CHUNK // max(n, 1))
    p = np.empty(chunk_rows * n, x.dtype)  # P and G of a chunk of rows
    g = np.empty(chunk_rows * n, x.dtype)
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        _probabilities_and_products(x, a, grad, r0 * n, r1 * n, low, p, g)
        if padded.shape[0] > 0:
            for r in range(r0, r1):
                for j in range(n):
                    if padded[r // n, j]:
                        p[(r - r0) * n + j] = 0.0
        for r in range(r0, r1):
            i = r % n
            s = (r - r0) * n + i
            o = r * n + i
            far = reach[r]
            near = min(i, n - 1 - i)
            side = 1 if n - 1 - i > i else -1
            total = _ZERO  # R of the key just visited (float32 for float32 inputs)
            for d in range(far, near, -1):  # the closeness order backwards: one side only ...
                k = _U(s + side * d)
                total += g[k]
                out[_U(o + side * d)] = g[k] - p[k] * total
            for d in range(min(far, near), 0, -1):  # ... then i-d before i+d
                k = _U(s - d)
                total += g[k]
                out[_U(o - d)] = g[k] - p[k] * total
                k = _U(s + d)
                total += g[k]
                out[_U(o + d)] = g[k] - p[k] * total
            for j in range(_U(r * n), _U(o - min(far, i))):
                out[j] = 0.0
            for j in range(_U(o + min(far, n - 1 - i) + 1), _U(r * n + n)):
                out[j] = 0.0
            out[_U(o)] = 0.0
