"""Benchmark one meta-training step (HNET Alg. 2): vectorised (torch.func vmap/grad) vs a per-task loop.

One step = inner loop on the support sets of a meta-batch, query loss, first-order outer backward, AdamW
update. Both variants run the same learner on the same hyperteacher batches (interleaved rounds, median
wall time per step after warm-up). Each loop is timed with every inner-optimiser update implementation it
could use (vectorised: ``foreach``, ``fused``; per-task loop: ``for_loop``, ``fused``); the speedup divides
the faster per-task loop by the vectorised loop as the library runs it (``inner_update="auto"``). Every
learner runs with the sizes and inner-loop settings (optimiser, steps, learning rate) that the
``hnet-hyperteacher`` reproduction uses, so the benchmark times the steps that reproduction takes. Usage:
``python benchmarks/bench_bilevel.py [--threads T] [--out benchmarks/results/bilevel.json]``
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
import torch

from recombine.experiments.hnet_hyperteacher import default_learners
from recombine.experiments.hnet_meta_learning import LearnerSetting
from recombine.models.meta_learners import build_meta_learner
from recombine.tasks.hyperteacher import HyperteacherConfig, HyperteacherTask
from recombine.train.bilevel import BilevelConfig, inner_update, meta_loss
from timing import environment, median_times, write_json

#: learner -> its setting in hnet-hyperteacher (CPU-scale versions of HNET C.2.4)
CASES: dict[str, LearnerSetting] = default_learners()


def step_time(name: str, kwargs: dict, config: BilevelConfig, batches: list, repeats: int) -> float:
    torch.manual_seed(0)
    model = build_meta_learner(name, 16, 8, **kwargs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cycle = itertools.cycle(batches)

    def step() -> None:
        optimizer.zero_grad()
        loss, _, _ = meta_loss(model, next(cycle), config)
        loss.backward()
        optimizer.step()

    wall, _ = median_times(step, repeats)  # after one warm-up step
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--meta-batch", type=int, default=32)
    parser.add_argument("--shots", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/bilevel.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = HyperteacherTask(HyperteacherConfig(n_shots=args.shots), seed=0)
    rng = np.random.default_rng(0)
    batches = [task.sample(rng, args.meta_batch) for _ in range(2)]
    results = []
    for name, setting in CASES.items():
        kwargs = setting.model_options(name)
        row = {"learner": name, "config": kwargs, "inner_steps": setting.inner_steps,
               "inner_optimizer": setting.inner_optimizer, "inner_lr": setting.inner_lr}  # fmt: skip
        # every inner-update implementation the two loops could use (bilevel.UPDATE_IMPLEMENTATIONS);
        # the speedup compares what the library runs for the vectorised loop ("auto") with the faster loop
        for vectorised, updates in ((True, ("foreach", "fused")), (False, ("for_loop", "fused"))):
            loop = "vectorised" if vectorised else "per_task_loop"
            for update in updates:
                config = BilevelConfig(
                    inner_steps=setting.inner_steps,
                    inner_lr=setting.inner_lr,
                    inner_optimizer=setting.inner_optimizer,
                    vectorised=vectorised,
                    inner_update=update,
                )
                row[f"{loop}_{update}_ms"] = 1000 * step_time(name, kwargs, config, batches, args.repeats)
        row["vectorised_ms"] = row[f"vectorised_{inner_update(BilevelConfig(), vectorised=True)}_ms"]
        row["per_task_loop_ms"] = min(row["per_task_loop_for_loop_ms"], row["per_task_loop_fused_ms"])
        row["speedup"] = row["per_task_loop_ms"] / row["vectorised_ms"]
        results.append(row)
        print(json.dumps(row))
    report = {
        "benchmark": "bilevel meta-training step, vectorised (torch.func) vs per-task loop",
        "meta_batch": args.meta_batch,
        "shots": args.shots,
        **environment(),
        "results": results,
    }
    write_json(args.out, report)


if __name__ == "__main__":
    main()
