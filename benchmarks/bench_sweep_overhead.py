"""Per-trial overhead of the sweep executors (``recombine sweep --executor local|ray``).

Two measurements per executor, both with ``--workers`` trials in flight:

- dispatch: ``--trivial`` trials whose function returns at once: what the executor itself costs per
  trial (thread pool hand-off, or Ray task submission, scheduling and result transfer). For Ray the
  start and stop of the local instance are reported separately (paid once per sweep).
- process: ``--process`` real trials of the sweep's trial function, a ``recombine train``
  subprocess of a tiny CTL run with ``train.steps=1``: Python start-up, imports, task generation
  (cached after the first), model build, one step, evaluation, checkpoints. This floor is what a
  trial costs beyond its training steps, and is the same for both executors.

Usage: ``python benchmarks/bench_sweep_overhead.py [--out FILE] [--workers 2] [--trivial 200] [--process 4]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from recombine.experiments.executors import LocalExecutor, RayExecutor
from recombine.experiments.trial import TrialOutcome, TrialSpec, run_trial
from timing import write_json

TINY = {
    "seed": 1,
    "task": {"name": "ctl", "n_train": 400, "n_valid_iid": 50, "n_valid_ood": 60, "n_test_ood": 40},
    "model": {"name": "ndr", "d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 3},
    "train": {"steps": 1, "batch_size": 16, "eval_every": 1, "log_every": 1, "threads": 1},
}


def trivial_trial(spec: TrialSpec) -> TrialOutcome:
    return TrialOutcome(spec.run, True, 0.0)


def timed(executor: LocalExecutor | RayExecutor, specs: list[TrialSpec], trivial: bool) -> float:
    started = time.perf_counter()
    outcomes = list(executor.run(specs, trivial_trial if trivial else run_trial))
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes if not o.ok]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/sweep_overhead.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trivial", type=int, default=200, help="trivial trials per executor")
    parser.add_argument("--process", type=int, default=4, help="real one-step trials per executor")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray

    results: dict[str, object] = {
        "workers": args.workers,
        "trivial_trials": args.trivial,
        "process_trials": args.process,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "ray": ray.__version__,
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("RECOMBINE_CACHE", str(Path(tmp) / "cache"))
        trivial = [TrialSpec(tmp, f"runs/t{i}", TINY) for i in range(args.trivial)]

        def real(prefix: str) -> list[TrialSpec]:
            return [TrialSpec(tmp, f"runs/{prefix}{i}", {**TINY, "seed": i}) for i in range(args.process)]

        run_trial(TrialSpec(tmp, "runs/warmup", TINY))  # task cache and file-system warm-up
        local = LocalExecutor(args.workers)
        results["local_dispatch_ms_per_trial"] = 1000 * timed(local, trivial, True) / args.trivial
        results["local_process_s_per_trial"] = timed(local, real("local"), False) / args.process

        started = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        results["ray_init_s"] = time.perf_counter() - started
        remote = RayExecutor(args.workers)  # uses the running instance
        timed(remote, trivial[: args.workers], True)  # start the Ray worker processes
        results["ray_dispatch_ms_per_trial"] = 1000 * timed(remote, trivial, True) / args.trivial
        results["ray_process_s_per_trial"] = timed(remote, real("ray"), False) / args.process
        started = time.perf_counter()
        ray.shutdown()
        results["ray_shutdown_s"] = time.perf_counter() - started
    write_json(args.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
