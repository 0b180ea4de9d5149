"""The independent reference for masked models in tests: a copy of the model with the weights a mask
removes set to zero by hand (thesis 3.1, ``w' = w * M``)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from recombine.probes.mask_sets import MaskSet


def zeroed_outside(model: nn.Module, mask: MaskSet) -> nn.Module:
    """A deep copy of ``model`` whose masked parameters are zero wherever ``mask`` is False."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for name, parameter in zeroed.named_parameters():
            if name in mask.masks:
                parameter[~mask[name]] = 0.0
    return zeroed
