"""Benchmark ListOps generation (thesis 5.2.3, D.3.2) against the training run it feeds: issue 4 asks that
generating the 1M-example train set does not dominate a run, and that it is cached.

Measured side by side in one process:

* ``generate``: building the recipe's task (its column's settings, e.g. ``test_ood`` depths 7-8) from
  scratch (1M train examples plus ``valid_iid`` / ``valid_ood`` / ``test_ood``, rejection sampling per
  dependency depth; ``build_listops`` with the cache switched off);
* ``first_build``: the same with an empty cache, i.e. generating plus writing the cache entry (what the
  first run pays);
* ``cache_load``: building it once more from that cache entry, i.e. what every later run pays (the file
  was just written, so it is in the OS's page cache: a little optimistic for a new process);
* ``train_step``: one training step of the ``ndr-listops`` NDR row (d_model 64, 4 heads, d_ff 128, 16
  layers, batch 64, AdamW, gradient clipping) on batches of that task, median over ``--steps`` steps
  after warm-up, and from it the time of the recipe's run (``train.steps`` of
  ``recipes/ndr-listops.yaml``, evaluations not counted).

The result gives generation and cache loading as a fraction of that run.

Usage: ``python benchmarks/bench_listops_generation.py [--threads 1] [--n-train 1000000]
[--out benchmarks/results/listops_generation.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import torch
import yaml
from torch import nn

from recombine import models, tasks
from recombine.train.objectives import objective_for
from timing import environment, median_times, write_json

T = TypeVar("T")
RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "ndr-listops.yaml"


def ndr_row() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The recipe's task settings (its first column), the NDR variant's model settings and the training
    settings."""
    recipe = yaml.safe_load(RECIPE.read_text())
    column = next(iter(recipe["columns"].values()))
    model = next(v["model"] for v in recipe["variants"] if v["label"] == "NDR")
    return dict(column), dict(model), dict(recipe["train"])


def timed(build: Callable[[], T]) -> tuple[float, float, T]:
    """``build()``'s wall and process-CPU seconds, and its value."""
    start, start_cpu = time.perf_counter(), time.process_time()
    value = build()
    return time.perf_counter() - start, time.process_time() - start_cpu, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-train", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/listops_generation.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    column, model_settings, train_settings = ndr_row()
    entry = tasks.TASKS.get("listops")
    config = dataclasses.replace(entry.default_config(), **column, n_train=args.n_train)
    with tempfile.TemporaryDirectory() as cache:
        with mock.patch.dict(os.environ, {"RECOMBINE_CACHE": cache, "RECOMBINE_NO_CACHE": "1"}):
            generate_s, generate_cpu, task = timed(lambda: entry.factory(config, args.seed))
        with mock.patch.dict(os.environ, {"RECOMBINE_CACHE": cache}):
            first_s, _, _ = timed(lambda: entry.factory(config, args.seed))  # generates, writes the entry
            cache_bytes = sum(p.stat().st_size for p in Path(cache).iterdir())
            load_s, load_cpu, _ = timed(lambda: entry.factory(config, args.seed))

    model_entry = models.MODELS.get(str(model_settings.pop("name")))
    model_config = dataclasses.replace(model_entry.default_config(), **model_settings)
    torch.manual_seed(args.seed)
    model = model_entry.factory(task.spec, model_config)
    objective = objective_for(task.spec)
    train = objective.prepare(task.splits["train"])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=float(train_settings["lr"]), weight_decay=float(train_settings["weight_decay"])
    )
    generator = torch.Generator().manual_seed(args.seed)
    batch_size = int(train_settings["batch_size"])
    grad_clip = float(train_settings["grad_clip"])

    def training_step() -> None:
        batch = objective.batch(train, batch_size, generator, False)
        loss, _, _ = objective.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

    model.train()
    step_s, step_cpu = median_times(training_step, args.steps, warmup=3)
    run_steps = int(train_settings["steps"])
    run_s = step_s * run_steps
    sizes = {name: len(split.targets) for name, split in task.splits.items()}
    result = {
        "benchmark": "listops_generation",
        "environment": environment(),
        "task": {**column, "n_train": args.n_train},
        "settings": {
            "n_train": args.n_train,
            "seed": args.seed,
            "timed_steps": args.steps,
            "recipe": RECIPE.name,
        },
        "split_sizes": sizes,
        "generate_s": generate_s,
        "generate_cpu_s": generate_cpu,
        "first_build_s": first_s,
        "cache_load_s": load_s,
        "cache_load_cpu_s": load_cpu,
        "cache_mb": cache_bytes / 2**20,
        "train_step_s": step_s,
        "train_step_cpu_s": step_cpu,
        "run_steps": run_steps,
        "run_s_estimate": run_s,
        "generate_fraction_of_run": generate_s / run_s,
        "first_build_fraction_of_run": first_s / run_s,
        "cache_load_fraction_of_run": load_s / run_s,
    }
    print(
        f"generate {generate_s:.1f} s (with the cache write {first_s:.1f} s), cache load {load_s:.2f} s, "
        f"NDR step {step_s * 1e3:.0f} ms "
        f"(run of {run_steps} steps ~ {run_s / 60:.0f} min): generation {100 * generate_s / run_s:.1f} % "
        f"of the run, cache load {100 * load_s / run_s:.2f} %"
    )
    write_json(args.out, result)


if __name__ == "__main__":
    main()
