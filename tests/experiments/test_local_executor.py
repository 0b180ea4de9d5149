"""The local executor runs trials ``workers`` at a time, and once interrupted starts no further trial, not
even one a worker thread has already taken from the queue."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from recombine.experiments.executors import LocalExecutor
from recombine.experiments.trial import (
    NOT_STARTED,
    TrialOutcome,
    TrialSpec,
    allow_trials,
    run_trial,
    stop_running_trials,
)


def specs(n: int) -> list[TrialSpec]:
    return [TrialSpec("/nonexistent", f"runs/trial{i}", {"train": {"steps": 1}}) for i in range(n)]


def test_every_trial_runs_and_at_most_workers_at_once() -> None:
    running, most, lock = 0, 0, threading.Lock()

    def trial(spec: TrialSpec) -> TrialOutcome:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return TrialOutcome(spec.run, True, 0.05)

    outcomes = list(LocalExecutor(2).run(specs(6), trial))
    assert sorted(o.run for o in outcomes) == sorted(s.run for s in specs(6))
    assert most == 2


def test_an_interrupt_starts_no_further_trial() -> None:
    started: list[str] = []

    def trial(spec: TrialSpec) -> TrialOutcome:
        started.append(spec.run)
        time.sleep(0.1)
        return TrialOutcome(spec.run, True, 0.1)

    outcomes = LocalExecutor(1).run(specs(5), trial)
    next(outcomes)  # the first trial finished; the second may have started
    with pytest.raises(KeyboardInterrupt):
        outcomes.throw(KeyboardInterrupt)  # Ctrl-C while the sweep waits for the next trial
    time.sleep(0.3)  # a trial wrongly left queued would start now
    assert started in (["runs/trial0"], ["runs/trial0", "runs/trial1"])


def test_a_trial_taken_from_the_queue_after_the_stop_does_not_start(tmp_path: Path) -> None:
    spec = TrialSpec(str(tmp_path), "runs/a", {"train": {"steps": 1}})
    stop_running_trials()  # what the executor does on Ctrl-C, before it waits for its worker threads
    try:
        outcome = run_trial(spec)
    finally:
        allow_trials()
    assert not outcome.ok and outcome.reason == NOT_STARTED
    assert not (tmp_path / "runs").exists()  # no run directory, no failure record: nothing was attempted
