"""Benchmark training DNC seeds as one ensemble (``ensemble=N``) against training them one at a time.

At the thesis's repeated-copy sizes (A.2: LSTM controller 32, 16 cells of 16, one read head, 8 bits + 1
flag), batch 16 per seed, 100 time steps, one Adam step with the per-member gradient clip: the median wall
time of a step of one DNC alone and of an ensemble of ``N`` DNCs
(:func:`recombine.models.ensemble.stack_models`), both compiled per time step (``compile_steps=True``, as in
the reproductions) or both eager. ``seed_steps_per_s`` is seeds x steps per second; ``throughput_ratio`` is
the ensemble's over the single DNC's, i.e. how many times faster ``N`` seeds train as one ensemble than one
after another. Both are measured in one process, one after the other, each compiled afresh.

Usage: ``python benchmarks/bench_dnc_ensemble.py [--threads 1] [--members 3,6] [--out
benchmarks/results/dnc_ensemble.json]``.
"""

from __future__ import annotations

import argparse

import torch

from recombine.experiments.dnc_memory import VARIANTS
from recombine.models.dnc import DNC
from recombine.models.ensemble import clip_grad_norm_per_member, stack_models
from recombine.models.layers.dnc_memory import DNCMemoryConfig
from timing import environment, median_times, write_json

BATCH, TIME_STEPS, WIDTH, CONTROLLER, CELLS, CELL_WIDTH = 16, 100, 9, 32, 16, 16


def build(variant: str, members: int, compile_steps: bool) -> torch.nn.Module:
    masked, dealloc, sharpness = VARIANTS[variant]
    switches = {"masked": masked, "dealloc": dealloc, "sharpness": sharpness}
    memory = DNCMemoryConfig(n_cells=CELLS, cell_width=CELL_WIDTH, n_read_heads=1, **switches)
    models = []
    for seed in range(members):
        torch.manual_seed(seed)
        models.append(DNC(WIDTH, WIDTH, CONTROLLER, memory, compile_steps=compile_steps))
    return models[0] if members == 1 else stack_models(models)


def step_seconds(variant: str, members: int, compile_steps: bool, repeats: int) -> float:
    # each size compiles afresh, with static shapes, as in a reproduction's process (one size per process)
    torch._dynamo.reset()
    model = build(variant, members, compile_steps)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH * members, TIME_STEPS, WIDTH)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        out, _ = model(x)
        out.square().mean().backward()
        if members == 1:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        else:
            clip_grad_norm_per_member(model.parameters(), 10.0)
        optimizer.step()

    step()  # compiles, where compiled
    seconds, _ = median_times(step, repeats)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--members", default="3,6", help="comma-separated ensemble sizes")
    parser.add_argument("--variants", default="dnc,dnc_mds")
    parser.add_argument("--eager", action="store_true", help="eager steps instead of compiled ones")
    parser.add_argument("--out", default="benchmarks/results/dnc_ensemble.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    compile_steps = not args.eager
    results = []
    for variant in args.variants.split(","):
        single = step_seconds(variant, 1, compile_steps, args.repeats)
        for members in (int(m) for m in args.members.split(",")):
            ensemble = step_seconds(variant, members, compile_steps, args.repeats)
            row = {
                "variant": variant,
                "members": members,
                "single_step_s": single,
                "ensemble_step_s": ensemble,
                "single_seed_steps_per_s": 1 / single,
                "ensemble_seed_steps_per_s": members / ensemble,
                "throughput_ratio": members * single / ensemble,
            }
            print(row, flush=True)
            results.append(row)
    write_json(
        args.out,
        {
            "benchmark": "DNC training step: N seeds as one ensemble vs one DNC, A.2 repeated-copy sizes",
            **environment(),
            "compile_steps": compile_steps,
            "batch_per_seed": BATCH,
            "time_steps": TIME_STEPS,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
