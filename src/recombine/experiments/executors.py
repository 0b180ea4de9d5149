"""Executors: who runs the trials of a grid (``recombine sweep --executor local|ray``).

Both run the same function, :func:`recombine.experiments.trial.run_trial`, and yield a
:class:`~recombine.experiments.trial.TrialOutcome` per trial as trials finish.

- ``local``: a pool of ``workers`` threads on this machine, each waiting on one ``recombine train``
  child process (so ``workers`` trainings run at once, each in its own process).
- ``ray``: each trial is a Ray task (1 CPU and ``gpus_per_trial`` GPUs, no retries) on the cluster at
  ``address``, or on a local Ray instance started for the sweep (``workers`` CPUs, the GPUs Ray finds)
  and stopped after it. At most ``workers`` trials are in flight. A trial that reserves GPUs sees only
  those (Ray sets its ``CUDA_VISIBLE_DEVICES``), so it trains with ``--device cuda``. Ray workers must
  see the grid directory at the same path (a shared file system on a real cluster). A Ray task that
  dies (its worker process killed) is recorded as a failed trial by the driver.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Protocol

from recombine.errors import UserError, choices_hint
from recombine.experiments.trial import (
    TrialOutcome,
    TrialSpec,
    allow_trials,
    run_trial,
    stop_running_trials,
)
from recombine.runs.trial_record import write_failure

EXECUTORS = ("local", "ray")

TrialFunction = Callable[[TrialSpec], TrialOutcome]


class Executor(Protocol):
    workers: int

    def run(self, specs: list[TrialSpec], trial: TrialFunction = run_trial) -> Iterator[TrialOutcome]: ...


@dataclass
class LocalExecutor:
    workers: int = 1

    def run(self, specs: list[TrialSpec], trial: TrialFunction = run_trial) -> Iterator[TrialOutcome]:
        if not specs:
            return
        allow_trials()
        pool = ThreadPoolExecutor(max_workers=max(1, self.workers))
        try:
            futures = [pool.submit(trial, spec) for spec in specs]
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            # Ctrl-C, SIGTERM, or the consumer stopped: start no further trial, stop the running ones (each
            # checkpoints after its step) and wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            stop_running_trials()
            pool.shutdown(wait=True)
            allow_trials()  # the stop was this sweep's
            raise
        pool.shutdown()


@dataclass
class RayExecutor:
    workers: int = 1
    address: str | None = None  # None: a local Ray instance with `workers` CPUs
    gpus_per_trial: float = 0.0  # > 0 for trials that train with --device cuda

    def run(self, specs: list[TrialSpec], trial: TrialFunction = run_trial) -> Iterator[TrialOutcome]:
        if not specs:
            return
        try:
            import ray
        except ImportError:
            raise UserError(
                "the ray executor needs Ray: pip install 'recombine[ray]' (or use --executor local)"
            ) from None
        started_here = not ray.is_initialized()
        if started_here:
            sigterm = signal.getsignal(signal.SIGTERM)
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(1, self.workers), include_dashboard=False, log_to_driver=False)
            # ray.init makes SIGTERM call sys.exit; keep the CLI's meaning (as Ctrl-C)
            if sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)
        try:
            gpus = ray.cluster_resources().get("GPU", 0.0)
            if self.gpus_per_trial > gpus:  # Ray would keep the trials waiting for ever
                raise UserError(
                    f"--device cuda: each trial reserves {self.gpus_per_trial:g} GPU(s) "
                    f"but the Ray cluster has {gpus:g}"
                )
            remote_trial = ray.remote(num_cpus=1, num_gpus=self.gpus_per_trial, max_retries=0)(trial)
            waiting = list(specs)
            in_flight: dict[object, tuple[TrialSpec, float]] = {}
            while waiting or in_flight:
                while waiting and len(in_flight) < max(1, self.workers):
                    spec = waiting.pop(0)
                    in_flight[remote_trial.remote(spec)] = (spec, time.perf_counter())
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    spec, started = in_flight.pop(ref)
                    try:
                        yield ray.get(ref)
                    except Exception as e:  # the Ray task itself died: record it here
                        reason = f"Ray task failed: {type(e).__name__}: {str(e).splitlines()[0]}"
                        wall = time.perf_counter() - started
                        write_failure(spec.run_path, {"reason": reason, "config": spec.config})
                        yield TrialOutcome(spec.run, False, wall, reason)
        finally:
            if started_here:
                ray.shutdown()


def make_executor(
    name: str, workers: int = 1, address: str | None = None, gpus_per_trial: float = 0.0
) -> Executor:
    """``gpus_per_trial``: what a Ray trial reserves (trials of a local executor share the GPUs they name)."""
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if gpus_per_trial < 0:
        raise UserError(f"--gpus-per-trial must be >= 0, got {gpus_per_trial:g}")
    if name == "local":
        if address:
            raise UserError("--address is for the ray executor; drop it or use --executor ray")
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(workers, address, gpus_per_trial)
    raise UserError(f"unknown executor {name!r}; {choices_hint(name, EXECUTORS)}")
