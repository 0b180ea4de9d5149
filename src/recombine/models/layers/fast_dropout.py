"""Dropout whose keep-mask is drawn as ``torch.rand(...) < 1 - p`` instead of by ``bernoulli_``.

``nn.Dropout`` on the CPU draws its mask with ``Tensor.bernoulli_(1 - p)`` (one double-precision draw
per element), divides it by ``1 - p`` and multiplies. :class:`FastDropout` computes the same thing,
``x * m / (1 - p)`` with ``m_i ~ Bernoulli(1 - p)`` independently, but draws ``m_i = [u_i < 1 - p]``
from ``u_i ~ U[0, 1)`` of ``torch.rand`` (single precision, vectorised), about twice as fast on the
development machine's CPU (``[3470, 128]``: 0.9 ms instead of 2.0 ms per call). The distribution is the
same up to the 2^-24 resolution of the single-precision uniform; the random stream is not, so a seeded
run draws different masks than with ``nn.Dropout``. In evaluation mode (or with ``p = 0``) it is the
identity, as ``nn.Dropout`` is.

A subclass of ``nn.Dropout``, so ``p``, ``inplace`` (ignored: the output is always a new tensor) and
``isinstance`` checks behave as for it.
"""

from __future__ import annotations

import torch
from torch import nn


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the mask drawn as ``torch.rand_like(x) < 1 - p``."""
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = 1.0 - p
    # rand_like -> lt_ writes 1.0 / 0.0 into the same float tensor -> div_ gives the scaled mask
    scaled_mask = torch.rand_like(x).lt_(keep).div_(keep)
    return x * scaled_mask


class FastDropout(nn.Dropout):
    """``nn.Dropout(p)`` with the faster mask of :func:`fast_dropout` (same distribution)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)
