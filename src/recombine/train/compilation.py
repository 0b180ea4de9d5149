"""``--compile MODE``: run the supervised training step's forward and backward through ``torch.compile``.

Why: at the sizes the reproductions use, a step is hundreds of small kernels. On a GPU such a step is
expected to be bound by Python and kernel launches rather than by arithmetic; what was measured on an H100
(docs/gpu.md) is that three NDR runs sharing the GPU each trained at ~70% of one run's speed, so one run
leaves the GPU mostly idle. ``reduce-overhead`` records the compiled step as CUDA graphs and replays them,
one launch for many kernels; ``default`` fuses kernels without graphs; ``max-autotune`` also tunes the
matrix products and uses CUDA graphs, ``max-autotune-no-cudagraphs`` tunes without them.

On a CPU the fused code is not reliably faster than eager mode: the NDR's geometric attention has its own
numba kernel, which ``torch.compile`` cannot trace, so under compilation it takes the gather/cumsum path.
The first steps pay for the compilation (tens of seconds to minutes), again for each new sequence length
until the compiler switches to dynamic shapes. ``benchmarks/bench_training_step_devices.py --compile``
measures both.

Like the device, the mode is a property of a training session, not of the run's config: a run started
compiled on a GPU resumes eagerly on a CPU. Only training steps are compiled; evaluation (with
``test_layers`` and other batch shapes) runs the same module eagerly, and checkpoints hold the module's own
``state_dict``. Compiled code may sum in another order than eager code: losses agree to float32 rounding,
not bit for bit, and dropout draws other random numbers, so a compiled run does not repeat an eager run's
metrics exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from recombine.errors import UserError, choices_hint

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def resolve_compile_mode(name: str) -> str:
    """``name`` if it is a compile mode; else a one-line :class:`UserError` with the choices."""
    if name not in COMPILE_MODES:
        raise UserError(f"unknown compile mode {name!r}; {choices_hint(name, COMPILE_MODES)}")
    return name


def for_training(model: nn.Module, mode: str) -> nn.Module:
    """The module the training step calls: ``model`` itself (``off``) or its compiled wrapper, which
    shares its parameters."""
    if resolve_compile_mode(mode) == "off":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)  # type: ignore[return-value]
