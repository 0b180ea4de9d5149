"""Benchmark one supervised training step of a grid recipe's row on the CPU and on every CUDA GPU present,
side by side in one process (docs/gpu.md).

The step is the trainer's (:func:`recombine.train.fit`) without its bookkeeping (learning-rate schedule,
logging): a random batch drawn on the CPU, moved to the device, loss, backward, gradient clipping (when
``grad_clip`` > 0), AdamW. Timed as the median over ``--steps`` steps after
warm-up, with the GPU synchronised before and after each; the same model weights on every device. Default:
the NDR row of ``recipes/ndr-ctl-gpu.yaml`` (d_model 64, 14 layers, batch 512) on backward CTL.

Usage: ``python benchmarks/bench_training_step_devices.py [--recipe recipes/ndr-ctl-gpu.yaml]
[--row NDR] [--column backward] [--threads 1] [--steps 20] [--out FILE]``. Without a GPU it times the CPU
alone.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from recombine import models, tasks
from recombine.run_config import TrainConfig
from recombine.train.device import describe_device
from recombine.train.objectives import objective_for
from timing import environment, median_times, write_json

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def recipe_row(
    recipe_path: Path, row: str, column: str
) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The recipe's task name, the column's task settings, the row's model settings and the training
    settings (the trainer's defaults, then the recipe's, then the column's)."""
    recipe = yaml.safe_load(recipe_path.read_text())
    if column not in recipe["columns"]:
        raise SystemExit(
            f"{recipe_path.name} has no column {column!r}; it has {', '.join(recipe['columns'])}"
        )
    variants = {v["label"]: v for v in recipe["variants"]}
    if row not in variants:
        raise SystemExit(f"{recipe_path.name} has no row {row!r}; it has {', '.join(variants)}")
    train = {
        **asdict(TrainConfig()),
        **recipe.get("train", {}),
        **recipe.get("column_train", {}).get(column, {}),
    }
    return recipe["task"], dict(recipe["columns"][column]), dict(variants[row]["model"]), train


def time_device(
    device: torch.device, task: Any, model_name: str, model_config: Any, train: dict[str, Any], steps: int
) -> dict[str, Any]:
    torch.manual_seed(0)
    model = models.MODELS.get(model_name).factory(task.spec, model_config).to(device).train()
    objective = objective_for(task.spec, device=device)
    prepared = objective.prepare(task.splits["train"])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=float(train["lr"]), weight_decay=float(train["weight_decay"])
    )
    generator = torch.Generator().manual_seed(0)
    batch_size, grad_clip = int(train["batch_size"]), float(train["grad_clip"])
    balanced = train.get("sampling") == "depth_balanced"

    def training_step() -> None:
        loss, _, _ = objective.loss(model, objective.batch(prepared, batch_size, generator, balanced))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

    wall, cpu = median_times(training_step, steps, warmup=5, device=device)
    return {
        "device": describe_device(device),
        "step_ms": wall * 1e3,
        "step_cpu_ms": cpu * 1e3,
        "steps_per_s": 1.0 / wall,
        "examples_per_s": batch_size / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=str(RECIPES / "ndr-ctl-gpu.yaml"))
    parser.add_argument("--row", default="NDR")
    parser.add_argument("--column", default="backward")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per device")
    parser.add_argument("--out", default="benchmarks/results/training_step_devices.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    task_name, column, model_settings, train = recipe_row(Path(args.recipe), args.row, args.column)
    entry = tasks.TASKS.get(task_name)
    task = entry.factory(dataclasses.replace(entry.default_config(), **column), 0)
    model_name = str(model_settings.pop("name"))
    model_entry = models.MODELS.get(model_name)
    model_config = dataclasses.replace(model_entry.default_config(), **model_settings)

    devices = [torch.device("cpu")] + [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    timings = [time_device(d, task, model_name, model_config, train, args.steps) for d in devices]
    cpu_ms = timings[0]["step_ms"]
    for timing in timings:
        timing["speedup_over_cpu"] = cpu_ms / timing["step_ms"]
        print(
            f"{timing['device']}: {timing['step_ms']:.1f} ms/step, "
            f"{timing['examples_per_s']:,.0f} examples/s, {timing['speedup_over_cpu']:.1f}x the CPU"
        )
    result = {
        "benchmark": "training_step_devices",
        "environment": environment(),
        "settings": {
            "recipe": Path(args.recipe).name,
            "row": args.row,
            "column": args.column,
            "task": {"name": task_name, **column},
            "model": {"name": model_name, **model_settings},
            "batch_size": int(train["batch_size"]),
            "timed_steps": args.steps,
        },
        "devices": timings,
    }
    write_json(args.out, result)


if __name__ == "__main__":
    main()
