"""Benchmark one supervised training step of a grid recipe's row on the CPU and on every CUDA GPU present,
side by side in one process (docs/gpu.md).

The step is the trainer's (:func:`recombine.train.fit`) without its bookkeeping (learning-rate schedule,
logging): a random batch drawn on the CPU, moved to the device, loss, backward, gradient clipping (when
``grad_clip`` > 0), AdamW. Timed as the median over ``--steps`` steps after
warm-up, with the GPU synchronised before and after each; the same model weights on every device. Default:
the NDR row of ``recipes/ndr-ctl-gpu.yaml`` (d_model 64, 14 layers, batch 512) on backward CTL.

Usage: ``python benchmarks/bench_training_step_devices.py [--recipe recipes/ndr-ctl-gpu.yaml]
[--row NDR] [--column backward] [--threads 1] [--steps 20] [--compile off] [--devices all] [--out FILE]``.
Without a GPU it times the CPU alone.

``--compile off,reduce-overhead`` times each device once per compile mode (``recombine train --compile``,
:mod:`recombine.train.compilation`). A compiled mode first runs ``--compile-warmup`` untimed steps (the
first step compiles; new sequence lengths recompile until the compiler turns to dynamic shapes) and
reports their wall time as ``warmup_s``. ``--devices cuda`` leaves the CPU out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recombine import run_config
from recombine.errors import UserError
from recombine.experiments.recipe import load_sweep_recipe
from recombine.experiments.reproduction import Reproduction
from recombine.run_config import RunConfig
from recombine.tasks.base import TaskData
from recombine.train.compilation import COMPILE_MODES, for_training, resolve_compile_mode
from recombine.train.device import describe_device, resolve_device
from recombine.train.objectives import objective_for
from recombine.train.supervised import build_model, build_task
from timing import environment, median_times, write_json

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def recipe_row_config(recipe_path: Path, row: str, column: str) -> RunConfig:
    """The run config the sweep would train for ``row`` x ``column`` of the grid recipe (seed 0)."""
    recipe = load_sweep_recipe(recipe_path)
    if not isinstance(recipe, Reproduction):
        raise SystemExit(f"{recipe_path.name} names a scripted experiment, not a grid of supervised runs")
    (variant,) = recipe.select_variants([row], quick=False)
    (column,) = recipe.select_columns([column])
    return run_config.resolve(recipe.run_config(variant, column, seed=0, quick=False))


def time_device(
    device: torch.device, config: RunConfig, task: TaskData, steps: int, compile_mode: str, warmup: int
) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(config, task).to(device).train()
    step_model = for_training(model, compile_mode)
    objective = objective_for(task.spec, config.train.label_smoothing, device)
    prepared = objective.prepare(task.splits["train"])
    train = config.train
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    generator = torch.Generator().manual_seed(0)
    balanced = train.sampling == "depth_balanced"

    def training_step() -> None:
        loss, _, _ = objective.loss(
            step_model, objective.batch(prepared, train.batch_size, generator, balanced)
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()

    warmup_start = time.perf_counter()
    for _ in range(warmup):
        training_step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    warmup_s = time.perf_counter() - warmup_start
    wall, cpu = median_times(training_step, steps, warmup=0, device=device)
    return {
        "device": describe_device(device),
        "compile": compile_mode,
        "warmup_steps": warmup,
        "warmup_s": warmup_s,
        "step_ms": wall * 1e3,
        "step_cpu_ms": cpu * 1e3,
        "steps_per_s": 1.0 / wall,
        "examples_per_s": train.batch_size / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=str(RECIPES / "ndr-ctl-gpu.yaml"))
    parser.add_argument("--row", default="NDR")
    parser.add_argument("--column", default="backward")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per device")
    parser.add_argument(
        "--compile", default="off", help=f"comma-separated compile modes: {', '.join(COMPILE_MODES)}"
    )
    parser.add_argument("--compile-warmup", type=int, default=20, help="untimed steps of a compiled mode")
    parser.add_argument("--devices", default="all", help="comma-separated, e.g. cpu,cuda:0 (default: all)")
    parser.add_argument("--out", default="benchmarks/results/training_step_devices.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    try:  # every bad option is one line, before anything is timed
        modes = [resolve_compile_mode(mode) for mode in args.compile.split(",")]
        if args.devices == "all":
            devices = [torch.device("cpu")] + [
                torch.device("cuda", i) for i in range(torch.cuda.device_count())
            ]
        else:
            devices = [resolve_device(name) for name in args.devices.split(",")]
        config = recipe_row_config(Path(args.recipe), args.row, args.column)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    task = build_task(config)
    timings = [
        time_device(device, config, task, args.steps, mode, 5 if mode == "off" else args.compile_warmup)
        for device in devices
        for mode in modes
    ]
    baseline = timings[0]  # the first device's first mode (by default: the CPU, eager)
    for timing in timings:
        timing["speedup_over_first"] = baseline["step_ms"] / timing["step_ms"]
        print(
            f"{timing['device']}, compile {timing['compile']}: {timing['step_ms']:.1f} ms/step "
            f"({timing['step_cpu_ms']:.1f} ms CPU), {timing['examples_per_s']:,.0f} examples/s, "
            f"{timing['speedup_over_first']:.1f}x {baseline['device']} {baseline['compile']}; "
            f"{timing['warmup_steps']} warm-up steps {timing['warmup_s']:.1f} s"
        )
    result = {
        "benchmark": "training_step_devices",
        "environment": environment(),
        "settings": {
            "recipe": Path(args.recipe).name,
            "row": args.row,
            "column": args.column,
            "run_config": config.to_dict(),
            "timed_steps": args.steps,
            "compile": modes,  # the modes timed (the run config has no compile setting)
        },
        "devices": timings,
    }
    write_json(args.out, result)


if __name__ == "__main__":
    main()
