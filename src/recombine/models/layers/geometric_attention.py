"""Geometric attention of the Neural Data Router (Csordás PhD thesis, Sec. 5.1.2).

Each query ``i`` scores every key ``j`` independently with a sigmoid (thesis eq. 5.6 / 5.10),
``P[i, j] = sigmoid(logits[i, j])``, and the attention weight is the probability that ``j`` is the
*closest* matching key (thesis eq. 5.7)::

    A[i, j] = P[i, j] * prod_{k in S_ij} (1 - P[i, k])

where ``S_ij`` holds the keys strictly closer to ``i`` than ``j`` (thesis eq. 5.8). At equal distance
the key to the right of ``i`` counts as closer. The diagonal is zeroed and never enters a product.

Implementation: for every query row the keys are visited in closeness order
``i, i+1, i-1, i+2, i-2, ...`` (out-of-range positions skipped, so each row is a permutation of
``0..N-1``). Putting ``i`` itself first (with ``log(1 - P[i, i])`` forced to 0) makes
``S_ij`` exactly the set of keys visited before ``j``, so the product is an exclusive cumulative product
of ``1 - P`` (sum of ``log(1 - P)``) along that order; time and memory are O(N^2). On the CPU the
forward and the backward are one compiled kernel each (:mod:`recombine.models.layers.closeness_scan`,
numba) that computes ``P`` on the fly, walks each query row in that order and writes ``A`` (or the
gradient) directly; on other devices, or with ``implementation="torch"``, it is computed in log space
with a gather into the closeness order, ``cumsum`` and a gather back.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from recombine.models.layers import closeness_scan

__all__ = ["IMPLEMENTATIONS", "GeometricSelfAttention", "geometric_attention_weights"]

#: ``auto``: the compiled scan on CPU tensors, the gather/cumsum one elsewhere
IMPLEMENTATIONS = ("auto", "compiled", "torch")

_T = TypeVar("_T")


class _ClosenessIndex(NamedTuple):
    """Index tensors (``[N, N]``, int64) encoding the closeness order of thesis eq. 5.8 for every query.

    Row ``i`` visits the keys in the order ``i, i+1, i-1, i+2, i-2, ...`` (out-of-range positions
    skipped, so every row is a permutation of ``0..N-1``); ``order[i, r]`` is the key visited at step
    ``r`` and ``rank[i, j]`` the step at which key ``j`` is visited. Visiting ``i`` first (its term is
    forced to 0) makes ``S_ij`` exactly the set of keys visited before ``j``.
    """

    shifted_order: torch.Tensor  # order shifted right by one step: [i, order[i, 0], ..., order[i, N-2]]
    rank: torch.Tensor  # inverse permutation of order
    reversed_order: torch.Tensor  # order[i, N-1-r]
    reversed_rank: torch.Tensor  # N-1-rank: inverse permutation of reversed_order


@functools.lru_cache(maxsize=64)
def _closeness_index(n: int, device: torch.device) -> _ClosenessIndex:
    with torch.inference_mode(False):  # cached: must stay usable by autograd after an inference call
        pos = torch.arange(n, device=device)
        offset = pos[None, :] - pos[:, None]  # j - i
        # Step in the infinite visiting sequence i, i+1, i-1, i+2, i-2, ...: a key right of i at
        # distance d comes at 2d - 1, a key left of i at 2d. Ties thus go to the right (thesis eq. 5.8).
        step = torch.where(offset > 0, 2 * offset - 1, -2 * offset)
        order = torch.argsort(step, dim=-1)  # steps are distinct within a row
        rank = torch.argsort(order, dim=-1)
        return _ClosenessIndex(
            shifted_order=torch.cat([pos[:, None], order[:, :-1]], dim=-1),
            rank=rank,
            reversed_order=order.flip(-1),
            reversed_rank=n - 1 - rank,
        )


def _cached(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` through its ``lru_cache``; while torch.compile traces, the uncached function
    (the tables are pure functions of N, and the tracer would otherwise warn that it bypasses the cache)."""
    return function.__wrapped__(*args) if torch.compiler.is_compiling() else function(*args)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=64)
def _upper_triangle(n: int, device: torch.device) -> torch.Tensor:
    """Bool ``[n, n]`` mask, True where ``i <= j`` (query i = row, key j = column)."""
    with torch.inference_mode(False):
        return torch.ones(n, n, dtype=torch.bool, device=device).triu()


def _gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[..., i, r] = x[..., i, index[i, r]]`` for an ``[N, N]`` index shared by all batch dims."""
    return torch.gather(x, -1, index.expand(x.shape))


class _GeometricWeights(torch.autograd.Function):
    """Thesis eq. 5.7 with a hand-written backward.

    With ``x`` the logits and ``P = sigmoid(x)`` (padded keys: ``P = 0``), ``A[i, j] = P[i, j] * Q[i, j]``
    with ``Q[i, j] = prod_{k in S_ij} (1 - P[i, k])``; in log space ``log A = x - sp - c`` with
    ``sp = softplus(x) = -log(1 - P)`` and ``c[i, j] = sum_{k in S_ij} sp[i, k]``.

    Backward: with ``G = dL/dA * A`` (gradient w.r.t. ``log A``), ``dlog P/dx = 1 - P`` and
    ``dlog(1 - P)/dx = -P``, the gradient is ``dL/dx[i, k] = G[i, k] - P[i, k] * R[i, k]`` where
    ``R[i, k] = sum_{j : k in S_ij or j = k} G[i, j]`` is a reversed inclusive cumsum along the
    closeness order. Only the logits and ``A`` (which ``A @ V`` saves anyway) are kept for backward
    (the compiled path adds one int32 per query row, see below). Half-precision inputs are computed in
    float32.

    Weights below ``sqrt(smallest normal)`` of the compute dtype (~1e-19 in float32, ~1e-154 in float64)
    are flushed to exactly 0. Denormal numbers in ``A``, or in ``dL/dA * A`` in the backward, make
    ``A @ V`` and the backward several times slower on CPUs (and exp's underflow / -inf path is slow).

    ``compiled`` (CPU): one numba kernel each way (:mod:`recombine.models.layers.closeness_scan`) that
    computes ``P`` on the fly, multiplies ``1 - P`` along each query's closeness order in linear space
    and writes ``A`` (backward: ``dL/dx``) directly. A row's walk stops where ``Q`` falls below the
    flush threshold (every farther weight is flushed anyway); the distance it reached (``reach``, int32
    per query row) lets the backward skip the all-zero rest. Otherwise (any device): the log-space form,
    ``c`` by gather / cumsum / gather.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        compiled: bool,
    ) -> torch.Tensor:
        # (The old-style forward with ctx: with setup_context, every apply binds the arguments by
        # inspect.signature, tens of microseconds per call.)
        ctx.compiled = compiled
        dtype = _compute_dtype(logits.dtype)
        if compiled:
            thresh, low = _thresholds(dtype)
            x = logits.to(dtype).contiguous()
            a = torch.empty_like(x)
            reach = torch.empty(x.shape[:-1], dtype=torch.int32)
            closeness_scan.geometric_forward(
                _flat(x), x.shape[-1], _padded_keys(key_padding_mask, x), _flat(a), _flat(reach), thresh, low
            )
        else:
            x = _masked_logits(logits, _padding_bias(key_padding_mask, logits))  # padded keys at -inf
            sp = F.softplus(x)  # thesis eq. 5.6: -log(1 - P) = softplus(x)
            # exp's underflow path is slow as well: exp only sees inputs clamped at log(thresh) - 0.5,
            # zeroed afterwards.
            floor = 0.5 * math.log(torch.finfo(dtype).tiny)
            log_a = _log_weights_by_gather(x, sp).clamp_min_(floor)
            a = F.threshold_(log_a.exp_(), math.exp(floor + 0.5), 0.0)
            reach = None
        a = a.to(logits.dtype)
        ctx.save_for_backward(logits, key_padding_mask, a, reach)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_a: torch.Tensor) -> tuple:  # type: ignore[override]
        logits, key_padding_mask, a, reach = ctx.saved_tensors
        dtype = _compute_dtype(logits.dtype)
        if ctx.compiled:
            x = logits.to(dtype).contiguous()
            grad_logits = torch.empty_like(x)
            closeness_scan.geometric_backward(
                _flat(x), x.shape[-1], _padded_keys(key_padding_mask, x), _flat(a.to(dtype).contiguous()),
                _flat(grad_a.to(dtype).contiguous()), _flat(grad_logits), _flat(reach), _thresholds(dtype)[1],
            )  # fmt: skip
        else:
            p = torch.sigmoid(_masked_logits(logits, _padding_bias(key_padding_mask, logits)))  # 0 if padded
            grad_logits = _logits_gradient_by_gather(grad_a.to(dtype) * a, p)
        return grad_logits.to(logits.dtype), None, None


def _flat(x: torch.Tensor) -> np.ndarray:
    """A contiguous tensor as a flat numpy view (no copy) for the compiled kernels."""
    return x.detach().numpy().ravel()


@functools.cache
def _thresholds(dtype: torch.dtype) -> tuple[np.floating, np.floating]:
    """``(thresh, low)`` for a compute dtype, as numpy scalars of that dtype: weights below
    ``thresh = e**0.5 * sqrt(smallest normal)`` (~1.8e-19 in float32, ~2.5e-154 in float64) are flushed
    to 0; logits below ``low`` (-86.3 in float32, -707.4 in float64) count as ``P = 0`` in the compiled
    kernels, P being below the smallest normal number there."""
    tiny = torch.finfo(dtype).tiny
    scalar = np.dtype(str(dtype).removeprefix("torch.")).type
    return scalar(math.exp(0.5 * math.log(tiny) + 0.5)), scalar(math.log(tiny) + 1.0)


def _padded_keys(key_padding_mask: torch.Tensor | None, x: torch.Tensor) -> np.ndarray:
    """The key padding mask as the compiled kernels take it: bool ``[matrices, N]`` (``[0, N]`` if none)."""
    n = x.shape[-1]
    if key_padding_mask is None:
        return np.zeros((0, n), dtype=np.bool_)
    mask = key_padding_mask.to(torch.bool).expand(*x.shape[:-2], n)
    return mask.reshape(x.shape[:-2].numel(), n).contiguous().numpy()


def _padding_bias(key_padding_mask: torch.Tensor | None, logits: torch.Tensor) -> torch.Tensor | None:
    """Padded keys get ``P = 0`` (never enter a product, zero weight): an additive -inf bias on the logits."""
    if key_padding_mask is None:
        return None
    mask = key_padding_mask.to(device=logits.device, dtype=torch.bool)
    bias = torch.zeros(mask.shape, device=logits.device, dtype=_compute_dtype(logits.dtype))
    return bias.masked_fill_(mask, -math.inf)[..., None, :]


def _log_weights_by_gather(x: torch.Tensor, sp: torch.Tensor) -> torch.Tensor:
    """``log A = x - sp - c`` (diagonal -inf), ``c`` by gather / cumsum / gather (any device)."""
    index = _cached(_closeness_index, x.shape[-1], x.device)
    sp.diagonal(dim1=-2, dim2=-1).zero_()  # k = i never enters a product (thesis eq. 5.8)
    # thesis eq. 5.7/5.8: c = exclusive cumsum of -log(1 - P) along the closeness order of each row.
    reordered = _gather_rows(sp, index.shifted_order).cumsum_(-1)
    log_a = torch.sub(x, sp)  # log P
    c = torch.gather(reordered, -1, index.rank.expand(reordered.shape), out=sp)
    log_a.sub_(c)  # thesis eq. 5.7: log A = log P + sum_{k in S_ij} log(1 - P_ik)
    log_a.diagonal(dim1=-2, dim2=-1).fill_(-math.inf)  # A_ii = 0
    return log_a


def _logits_gradient_by_gather(g: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``dL/dx = G - P * R`` with ``G = dL/dA * A`` and ``R`` the reversed inclusive cumsum of ``G`` along
    the closeness order (any device)."""
    index = _cached(_closeness_index, g.shape[-1], g.device)
    reordered = _gather_rows(g, index.reversed_order).cumsum_(-1)
    r = _gather_rows(reordered, index.reversed_rank)
    p.diagonal(dim1=-2, dim2=-1).zero_()  # the diagonal is excluded too: no gradient
    return g.addcmul_(p, r, value=-1.0)


def _masked_logits(logits: torch.Tensor, padding_bias: torch.Tensor | None) -> torch.Tensor:
    x = logits.to(_compute_dtype(logits.dtype))
    return x if padding_bias is None else x + padding_bias


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32 (half-precision inputs are computed in float32, float64 stays float64)."""
    return torch.promote_types(dtype, torch.float32)


def geometric_attention_weights(
    logits: torch.Tensor, key_padding_mask: torch.Tensor | None = None, implementation: str = "auto"
) -> torch.Tensor:
    """Geometric attention weights from pre-sigmoid match scores.

    Args:
        logits: ``[..., N, N]`` pre-sigmoid scores; dim -2 indexes queries ``i``, dim -1 keys ``j``.
        key_padding_mask: optional bool ``[..., N]`` (broadcastable to the batch dims of ``logits``),
            True marks a padded key. Padded keys get ``P = 0``: zero weight and no effect on the
            weights of other keys.
        implementation: ``auto`` (default: the compiled scan for CPU tensors, the gather/cumsum one on
            other devices), ``compiled`` or ``torch``. Both give the same values and gradients.

    Returns:
        ``A`` of the same shape as ``logits``, ``A[i, j] = P[i, j] * prod_{k in S_ij} (1 - P[i, k])``
        with a zero diagonal. Rows sum to at most 1 (not normalised).
    """
    n = logits.shape[-1]
    if logits.shape[-2] != n:
        raise ValueError(f"geometric attention needs square [..., N, N] logits, got {tuple(logits.shape)}")
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown implementation {implementation!r}; valid choices: {', '.join(IMPLEMENTATIONS)}"
        )
    # under torch.compile (recombine.train.compilation) ``auto`` takes the traceable path: the numba scan
    # is opaque to it
    compiled = implementation == "compiled" or (
        implementation == "auto" and logits.device.type == "cpu" and not torch.compiler.is_compiling()
    )
    if compiled and logits.device.type != "cpu":
        raise ValueError(f"the compiled scan runs on CPU tensors; got a {logits.device.type} tensor")
    return _GeometricWeights.apply(logits, key_padding_mask, compiled)


#: the smallest row sum ``normalize=True`` divides by (a row of zeros stays zero)
NORMALIZE_EPS = 1e-12


class GeometricSelfAttention(nn.Module):
    """Multi-head geometric self-attention with directional encoding (thesis eqs. 5.6-5.10).

    Per head ``h`` (thesis eq. 5.10)::

        P_ij = sigmoid(alpha_h * (W_q h_i + b_q)^T W_k h_j + beta_h * D_ij + gamma_h)
        D_ij = W_LR h_i + b_LR  if i <= j  else  W_RL h_i + b_RL       (thesis eq. 5.9)

    ``alpha``, ``beta``, ``gamma`` are learned per head, initialised to ``1/sqrt(d_head)``, 1, 0.
    Dropout is applied to the content query only (thesis App. D.3.3). The output of each head is
    ``A @ V`` with the (unnormalised) geometric weights ``A``, followed by the output projection.
    ``normalize=True`` divides each row of ``A`` by its sum first (rows of zeros stay zero), as the
    authors' released code does by default; the thesis's equations do not.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, normalize: bool = False) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads

        self.query = nn.Linear(d_model, d_model)  # W_q, b_q
        self.key = nn.Linear(d_model, d_model, bias=False)  # W_{k,E} (no bias in eq. 5.10)
        self.value = nn.Linear(d_model, d_model)  # W_v
        self.out = nn.Linear(d_model, d_model)  # W_o
        # thesis eq. 5.9: [W_LR; W_RL] with biases [b_LR; b_RL], one scalar per head each.
        self.direction = nn.Linear(d_model, 2 * n_heads)

        self.alpha = nn.Parameter(torch.full((n_heads,), 1.0 / math.sqrt(self.d_head)))
        self.beta = nn.Parameter(torch.ones(n_heads))
        self.gamma = nn.Parameter(torch.zeros(n_heads))
        self.query_dropout = nn.Dropout(dropout)
        self.normalize = normalize

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_head).transpose(1, 2)  # [B, H, N, d_head]

    def forward(
        self, h: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            h: ``[B, N, d_model]`` input states.
            key_padding_mask: optional bool ``[B, N]``, True marks padding.

        Returns:
            ``(out [B, N, d_model], attention [B, n_heads, N, N])``.
        """
        b, n, _ = h.shape
        q = self._split_heads(self.query_dropout(self.query(h)))
        k = self._split_heads(self.key(h))
        v = self._split_heads(self.value(h))

        # thesis eq. 5.9: D_ij uses the LR projection for i <= j and the RL projection for i > j.
        direction = self.direction(h).view(b, n, 2, self.n_heads).permute(2, 0, 3, 1)  # [2, B, H, N]
        d_lr, d_rl = direction[0].unsqueeze(-1), direction[1].unsqueeze(-1)  # [B, H, N, 1]
        d = torch.where(_cached(_upper_triangle, n, h.device), d_lr, d_rl)

        # thesis eq. 5.10
        logits = (
            self.alpha[:, None, None] * (q @ k.transpose(-1, -2))
            + self.beta[:, None, None] * d
            + self.gamma[:, None, None]
        )
        mask = key_padding_mask[:, None, :] if key_padding_mask is not None else None  # [B, 1, N]
        attention = geometric_attention_weights(logits, mask)
        if self.normalize:  # L1 over the sources; the weights are >= 0
            attention = attention / attention.sum(-1, keepdim=True).clamp_min(NORMALIZE_EPS)

        out = (attention @ v).transpose(1, 2).reshape(b, n, self.d_model)
        return self.out(out), attention
