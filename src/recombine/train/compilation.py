"""``train.compile``: run the training step's forward and backward through ``torch.compile``.

Why: at the sizes the reproductions use, a step is hundreds of small kernels, so on a GPU it is bound
by Python and kernel launches rather than by arithmetic (benchmarks/results/training_step_devices.json:
the NDR's 52 ms H100 step is 51.9 ms of CPU time). ``reduce-overhead`` records the compiled step as
CUDA graphs and replays them, one launch for many kernels; ``default`` and ``max-autotune`` fuse
kernels without graphs. On a CPU the fused code is not reliably faster than eager mode (the NDR's
geometric attention already has its own compiled kernel, which ``torch.compile`` cannot trace, so
under compilation it takes the traceable gather/cumsum path), and the first steps pay for the
compilation: tens of seconds to minutes, again for each new sequence length until the compiler
switches to dynamic shapes. ``benchmarks/bench_training_step_devices.py --compile`` measures both.

Only training steps are compiled; evaluation (with ``test_layers`` and other batch shapes) runs the
same module eagerly, and checkpoints hold the module's own ``state_dict``. Compiled code may sum in
another order than eager code: losses agree to float32 rounding, not bit for bit, and dropout draws
other random numbers, so a compiled run does not repeat an eager run's metrics exactly.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from recombine.run_config import COMPILE_MODES


def for_training(model: nn.Module, mode: str) -> nn.Module:
    """The module the training step calls: ``model`` itself (``off``) or its compiled wrapper, which
    shares its parameters."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}; valid choices: {', '.join(COMPILE_MODES)}")
    if mode == "off":
        return model
    # Dynamo traces through functools.lru_cache helpers (geometric attention's index tables, pure functions
    # of the sequence length) and warns once per helper that the cache is bypassed; that is what we want.
    warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
    return torch.compile(model, mode=None if mode == "default" else mode)  # type: ignore[return-value]
