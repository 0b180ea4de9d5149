"""Where a supervised run trains: ``--device cpu`` (the default) or a CUDA GPU (``cuda``, ``cuda:N``).

The device is where a run executes, not what it trains, so it is not part of the run's config (a run
trained on a GPU can be resumed, inspected and reported on a CPU, and a grid keeps its manifest); the
run's ``result.json`` records it. Batches are drawn on the CPU from the run's batch generator, so the
examples a run sees do not depend on the device; the numbers it computes do, at float32 rounding
level (different kernels), and CUDA runs are not bit-for-bit repeatable (atomic adds in backward
passes), unlike CPU runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any, TypeVar

import torch

from recombine.errors import UserError

_DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?")

T = TypeVar("T")

CPU = torch.device("cpu")  #: the default device


def resolve_device(name: str) -> torch.device:
    """``name`` as a torch device, or a one-line UserError naming what is wrong."""
    if not _DEVICE_PATTERN.fullmatch(name):
        raise UserError(f"unknown device {name!r}; valid choices: cpu, cuda, cuda:N")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {name}: PyTorch sees no CUDA GPU here; use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UserError(f"--device {name}: there are {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    return device


def describe_device(device: torch.device) -> str:
    """E.g. ``cpu`` or ``cuda:0 (NVIDIA H100 80GB HBM3)``, for a run's result."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


#: set to 1, PyTorch runs float32 matrix products on CUDA in TF32 whatever the program asked for
TF32_OVERRIDE_VARIABLE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def cuda_matmul_precision() -> str:
    """How this process runs float32 matrix products on CUDA, for a GPU run's result: ``"tf32"`` (tensor
    cores, inputs rounded to a 10-bit mantissa, float32 sums) when PyTorch is told to allow it or the
    ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` environment variable forces it (docs/gpu.md), else
    ``"float32"``."""
    if os.environ.get(TF32_OVERRIDE_VARIABLE, "") == "1":
        return "tf32"
    matmul = torch.backends.cuda.matmul
    # PyTorch >= 2.9: ``fp32_precision`` ("none" / "ieee" / "tf32") reflects both APIs, while reading the
    # legacy ``allow_tf32`` raises once the new API has set the flag; older versions only have the latter
    precision = getattr(matmul, "fp32_precision", None)
    tf32 = precision == "tf32" if precision is not None else matmul.allow_tf32
    return "tf32" if tf32 else "float32"


def to_device(batch: T, device: torch.device) -> T:
    """A batch (a tensor, or a tuple / NamedTuple of tensors) with its tensors on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)  # type: ignore[return-value]
    if isinstance(batch, tuple):
        moved: Iterable[Any] = (to_device(item, device) for item in batch)
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)  # type: ignore[return-value]
    return batch
