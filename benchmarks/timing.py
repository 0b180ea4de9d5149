"""Scaffolding shared by the benchmark scripts: a median-of-repeats timer (and one for forward +
backward), the bytes autograd saves for backward, the environment a result was measured in, and the
JSON result file.

The scripts import it as ``timing`` (they run as ``python benchmarks/bench_*.py``, which puts this
folder on ``sys.path``).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def median_times(
    run: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    *,
    after: Callable[[], object] | None = None,
    device: torch.device | None = None,
) -> tuple[float, float]:
    """Median wall and process-CPU seconds of ``run()`` over ``repeats`` timed calls, after ``warmup``
    untimed ones. ``after()`` follows every call, untimed (e.g. to drop gradients); on a CUDA
    ``device`` the clock starts and stops with the device idle."""
    wall, cpu = [], []
    for step in range(warmup + repeats):
        _sync(device)
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        _sync(device)
        if step >= warmup:
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        if after is not None:
            after()
    return statistics.median(wall), statistics.median(cpu)


def fwd_bwd_ms(
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    grad_out: torch.Tensor,
    warmup: int,
    repeats: int,
    params: Sequence[torch.Tensor] = (),
) -> tuple[float, float]:
    """Median (wall, process CPU) milliseconds of ``fn(*inputs)`` and the backward of ``grad_out`` into
    ``inputs`` and ``params`` (whose gradients are dropped after every call), on the inputs' device."""
    leaves = [*inputs, *params]

    def drop_grads() -> None:
        for t in leaves:
            t.grad = None

    wall, cpu = median_times(
        lambda: torch.autograd.backward(fn(*inputs), grad_out, inputs=leaves),
        repeats,
        warmup,
        after=drop_grads,
        device=inputs[0].device,
    )
    return wall * 1e3, cpu * 1e3


def saved_bytes(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], exclude: Sequence[torch.Tensor] = ()
) -> int:
    """Bytes of the distinct tensors autograd saves for backward during one ``fn(*inputs)``, deduplicated
    by storage; tensors sharing storage with one of ``exclude`` (parameters, inputs) are not counted."""
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    del out
    return sum(seen.values())


def environment(machine: bool = True) -> dict[str, object]:
    """What a result depends on beyond the script's settings: torch's version and thread count, and
    (with ``machine``) the processor."""
    result: dict[str, object] = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    if machine:
        result["machine"] = platform.processor() or platform.machine()
    return result


def write_json(path: str | Path, result: object) -> None:
    """``result`` as indented JSON at ``path`` (its folder created if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
