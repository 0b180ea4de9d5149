"""Benchmark ``DNC(compile_steps=True)`` against the eager DNC: one Adam training step (forward, backward,
update) per size and variant, and what compiling costs up front.

Sizes:

* ``repeat_copy_a2``: the thesis's repeated-copy setting (A.2: LSTM controller 32, 16 cells of 16, one
  read head, 8 bits + 1 flag per input), batch 16, 100 time steps (a sequence of 7 copies of 7 words);
* ``repeat_copy_cpu``: the ``dnc-repeat-copy`` reproduction's default (6 cells, 6 bits), 30 time steps;
* ``ctl_classifier``: the DNC of thesis Tab. 5.1 at its CTL sizes (controller 200, 21 cells of 200,
  4 read heads), batch 256, 11 time steps.

For each: the median wall time of an eager step and of a compiled step (after warm-up), the seconds
the first compiled call took (compiling from scratch: the script points inductor at an empty cache
directory unless ``--warm-cache``), and the number of training steps after which compiling has paid
for itself. Both models start from the same weights; the script also records the difference between
their first-step losses.

Usage: ``python benchmarks/bench_dnc_compile.py [--threads 1] [--out benchmarks/results/dnc_compile.json]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time

import torch

from recombine.experiments.dnc_memory import VARIANTS
from recombine.models.dnc import DNC
from recombine.models.layers.dnc_memory import DNCMemoryConfig
from timing import environment, median_times, write_json

#: name -> (batch, time steps, input/output size, controller, cells, cell width, read heads)
SIZES: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "repeat_copy_a2": (16, 100, 9, 32, 16, 16, 1),
    "repeat_copy_cpu": (16, 30, 7, 32, 6, 16, 1),
    "ctl_classifier": (256, 11, 200, 200, 21, 200, 4),
}
#: the variants measured (their M / D / S switches: recombine.experiments.dnc_memory.VARIANTS)
MEASURED_VARIANTS = ("dnc", "dnc_mds")


def training_step(model: DNC, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    out, _ = model(x)
    loss = out.square().mean()
    loss.backward()
    optimizer.step()
    return float(loss)


def measure(size: str, variant: str, repeats: int) -> dict[str, object]:
    batch, steps, width, controller, cells, cell_width, heads = SIZES[size]
    masked, dealloc, sharpness = VARIANTS[variant]
    memory = DNCMemoryConfig(
        n_cells=cells,
        cell_width=cell_width,
        n_read_heads=heads,
        masked=masked,
        dealloc=dealloc,
        sharpness=sharpness,
    )
    torch.manual_seed(0)
    eager = DNC(width, width, controller, memory)
    compiled = copy.deepcopy(eager)
    compiled.compile_steps = True
    x = torch.randn(batch, steps, width)
    optimizers = {m: torch.optim.Adam(m.parameters(), lr=1e-4) for m in (eager, compiled)}

    first_eager = training_step(eager, optimizers[eager], x)
    started = time.perf_counter()
    first_compiled = training_step(compiled, optimizers[compiled], x)
    compile_seconds = time.perf_counter() - started
    eager_s, _ = median_times(lambda: training_step(eager, optimizers[eager], x), repeats)
    compiled_s, _ = median_times(lambda: training_step(compiled, optimizers[compiled], x), repeats)
    saved = eager_s - compiled_s
    return {
        "size": size,
        "variant": variant,
        "batch": batch,
        "time_steps": steps,
        "eager_step_s": eager_s,
        "compiled_step_s": compiled_s,
        "speedup": eager_s / compiled_s,
        "first_compiled_call_s": compile_seconds,
        "break_even_steps": (compile_seconds - compiled_s) / saved if saved > 0 else None,
        "first_step_loss_difference": abs(first_eager - first_compiled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated subset of {list(SIZES)}")
    parser.add_argument("--warm-cache", action="store_true", help="keep inductor's on-disk cache")
    parser.add_argument("--out", default="benchmarks/results/dnc_compile.json")
    args = parser.parse_args()
    if not args.warm_cache:  # read when compiling starts, so setting it here is in time
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    torch.set_num_threads(args.threads)
    results = []
    for size in args.sizes.split(","):
        for variant in MEASURED_VARIANTS:
            row = measure(size, variant, args.repeats)
            print(row, flush=True)
            results.append(row)
    write_json(
        args.out,
        {
            "benchmark": "DNC training step, eager vs compile_steps=True (torch.compile per time step)",
            **environment(),
            "compile_cache": "warm (on-disk cache)" if args.warm_cache else "cold (an empty cache)",
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
