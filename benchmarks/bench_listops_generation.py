"""Benchmark ListOps generation (thesis 5.2.3, D.3.2) against the training run it feeds: issue 4 asks that
generating the 1M-example train set does not dominate a run, and that it is cached.

Measured side by side in one process:

* ``generate``: building the task from scratch (1M train examples plus ``valid_iid`` / ``valid_ood`` /
  ``test_ood``, rejection sampling per dependency depth; ``build_listops`` with the cache switched off);
* ``cache_load``: building it again from a warm cache (a temporary cache directory written by the first
  cached build), i.e. what every run after the first pays;
* ``train_step``: one training step of the ``ndr-listops`` NDR row (d_model 64, 4 heads, d_ff 128, 16
  layers, batch 64, AdamW) on batches of that task, median over ``--steps`` steps after warm-up, and
  from it the time of the recipe's run (``train.steps`` of ``recipes/ndr-listops.yaml``, evaluations
  not counted).

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
from pathlib import Path

import torch
import yaml

from recombine import models, tasks
from recombine.train.objectives import objective_for
from timing import environment, median_times, write_json

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "ndr-listops.yaml"


def ndr_row() -> tuple[dict[str, object], dict[str, object]]:
    """The NDR variant's model settings and the recipe's training settings."""
    recipe = yaml.safe_load(RECIPE.read_text())
    model = next(v["model"] for v in recipe["variants"] if v["label"] == "NDR")
    return dict(model), dict(recipe["train"])


def timed(build: object) -> tuple[float, float, object]:
    start, start_cpu = time.perf_counter(), time.process_time()
    value = build()  # type: ignore[operator]
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

    entry = tasks.TASKS.get("listops")
    config = dataclasses.replace(entry.default_config(), n_train=args.n_train)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["RECOMBINE_CACHE"] = cache
        os.environ["RECOMBINE_NO_CACHE"] = "1"
        generate_s, generate_cpu, task = timed(lambda: entry.factory(config, args.seed))
        del os.environ["RECOMBINE_NO_CACHE"]
        entry.factory(config, args.seed)  # writes the cache entry
        cache_bytes = sum(p.stat().st_size for p in Path(cache).iterdir())
        load_s, load_cpu, _ = timed(lambda: entry.factory(config, args.seed))

    model_settings, train_settings = ndr_row()
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

    def training_step() -> None:
        batch = objective.batch(train, batch_size, generator, False)
        loss, _, _ = objective.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    model.train()
    step_s, step_cpu = median_times(training_step, args.steps, warmup=3)
    run_steps = int(train_settings["steps"])
    run_s = step_s * run_steps
    sizes = {name: len(split.targets) for name, split in task.splits.items()}
    result = {
        "benchmark": "listops_generation",
        "environment": environment(),
        "settings": {
            "n_train": args.n_train,
            "seed": args.seed,
            "timed_steps": args.steps,
            "recipe": RECIPE.name,
        },
        "split_sizes": sizes,
        "generate_s": generate_s,
        "generate_cpu_s": generate_cpu,
        "cache_load_s": load_s,
        "cache_load_cpu_s": load_cpu,
        "cache_mb": cache_bytes / 2**20,
        "train_step_s": step_s,
        "train_step_cpu_s": step_cpu,
        "run_steps": run_steps,
        "run_s_estimate": run_s,
        "generate_fraction_of_run": generate_s / run_s,
        "cache_load_fraction_of_run": load_s / run_s,
    }
    print(
        f"generate {generate_s:.1f} s, cache load {load_s:.2f} s, NDR step {step_s * 1e3:.0f} ms "
        f"(run of {run_steps} steps ~ {run_s / 60:.0f} min): generation {100 * generate_s / run_s:.1f} % "
        f"of the run, cache load {100 * load_s / run_s:.2f} %"
    )
    write_json(args.out, result)


if __name__ == "__main__":
    main()
