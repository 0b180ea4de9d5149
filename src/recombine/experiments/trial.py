"""One trial of a grid: a ``recombine train`` subprocess into its own run directory.

The one trial function behind ``recombine reproduce`` and ``recombine sweep``, whichever executor
runs it (a local pool or Ray tasks). Training happens in a child process, so a trial that raises,
runs out of memory or is killed ends as a :class:`TrialOutcome` with ``ok=False`` and a
``failure.json`` in its run directory (see :mod:`recombine.runs.trial_record`); it never raises
into the sweep. A run directory holding a ``config.yaml`` is resumed (``recombine train --resume``,
extended to the requested steps), anything else starts afresh.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recombine.errors import UserError
from recombine.runs.directory_lock import exclusive_use
from recombine.runs.store import RunDir
from recombine.runs.trial_record import (
    INTERRUPTED_EXIT_CODES,
    TRAIN_LOG,
    clear_failure,
    clear_pid,
    write_failure,
    write_pid,
)

TAIL_LINES = 20


@dataclass(frozen=True)
class TrialSpec:
    """What a trial needs, picklable for Ray: the grid directory, the run and its config."""

    out: str  # the grid directory (absolute); the run lives at out/run
    run: str  # e.g. "runs/NDR--backward--seed1"
    config: dict[str, Any]  # nested run config (seed, task, model, train)
    threads: int = 0  # train.threads for a fresh run (0: leave the config's value)
    device: str = "cpu"  # recombine train --device (not part of the config: see recombine.train.device)
    compile_mode: str = "off"  # recombine train --compile (not part of the config either)

    @property
    def run_path(self) -> Path:
        return Path(self.out) / self.run

    @property
    def steps(self) -> int:
        return int(self.config["train"]["steps"])


@dataclass(frozen=True)
class TrialOutcome:
    run: str
    ok: bool
    wall_time_s: float
    reason: str = ""  # why it failed, one line
    # stopped, not broken: the same command continues it (trial_record.is_interrupted)
    interrupted: bool = False


def config_overrides(config: dict[str, Any]) -> list[str]:
    """A nested run config as ``recombine train`` overrides (``seed=1 task.name=ctl ...``)."""
    overrides = [f"seed={config['seed']}"]
    for section in ("task", "model", "train"):
        for key, value in config[section].items():
            # a string as typed, except the empty one: ``key=`` would parse as null
            text = json.dumps(value) if not isinstance(value, str) or not value else value
            overrides.append(f"{section}.{key}={text}")
    return overrides


def steps_done(run_path: Path) -> int:
    """Steps of a completed run, -1 when it is not complete."""
    result = RunDir(run_path).read_result()
    return result["steps"] if result is not None and result.get("status") == "completed" else -1


def is_done(spec: TrialSpec) -> bool:
    return steps_done(spec.run_path) >= spec.steps


def train_command(spec: TrialSpec) -> list[str]:
    run_path = spec.run_path
    command = [sys.executable, "-m", "recombine", "train", "--no-progress", "--run-dir", str(run_path)]
    if spec.device != "cpu":
        command += ["--device", spec.device]
    if spec.compile_mode != "off":
        command += ["--compile", spec.compile_mode]
    if (run_path / "config.yaml").exists():  # continue an interrupted run, or extend a finished one
        return command + ["--resume", str(run_path), f"train.steps={spec.steps}"]
    command += config_overrides(spec.config)
    if spec.threads:
        command.append(f"train.threads={spec.threads}")
    return command


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


#: the ``recombine train`` processes this interpreter's trials are waiting on (one per worker thread), and
#: whether the sweep was stopped; a trial starts its process under the lock only while it was not
_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()
_stopped = threading.Event()
NOT_STARTED = "not started: the sweep was stopped"


def allow_trials() -> None:
    """Let trials start (again): a sweep calls this before it starts its first."""
    _stopped.clear()


def stop_running_trials() -> None:
    """Start no further trial process, and send SIGTERM to every one still running: each finishes its step,
    writes ``last.pt`` and exits (:mod:`recombine.stop_signals`). For a sweep stopped by a signal its trials
    did not get (``kill PID`` of the sweep alone); for those that did, a second SIGTERM changes nothing."""
    with _running_lock:
        _stopped.set()
        for process in _running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)


def run_trial(spec: TrialSpec) -> TrialOutcome:
    """Train (or resume) one run; record a failure instead of raising."""
    if _stopped.is_set():
        return TrialOutcome(spec.run, False, 0.0, NOT_STARTED, interrupted=True)
    run_path = spec.run_path
    # another process trains this run: leave its records alone (its own process would refuse anyway); one
    # taking the run between this probe and our `recombine train` child could still see them touched
    try:
        with exclusive_use(run_path):
            pass
    except UserError as e:
        return TrialOutcome(spec.run, False, 0.0, str(e))
    run_path.mkdir(parents=True, exist_ok=True)
    clear_failure(run_path)  # this attempt's outcome replaces the last one's
    log_path = run_path / TRAIN_LOG
    started = time.perf_counter()
    with log_path.open("ab") as log:
        offset = log.tell()
        process, code = None, None
        try:
            with _running_lock:  # no process starts once stop_running_trials has run
                if _stopped.is_set():
                    reason = NOT_STARTED
                else:
                    process = subprocess.Popen(train_command(spec), stdout=log, stderr=subprocess.STDOUT)
                    _running.add(process)
        except OSError as e:
            reason = f"could not start training: {e}"
        if process is not None:
            write_pid(run_path, process.pid)
            try:
                code = process.wait()
            finally:
                with _running_lock:
                    _running.discard(process)
                clear_pid(run_path)
            reason = ""
    wall = time.perf_counter() - started
    if code == 0 and steps_done(run_path) >= spec.steps:
        return TrialOutcome(spec.run, True, wall)
    with log_path.open("rb") as log:
        log.seek(offset)
        tail = log.read().decode(errors="replace").splitlines()[-TAIL_LINES:]
    if not reason:
        result = RunDir(run_path).read_result()
        status = None if result is None else result.get("status")
        reason = _describe_exit(code) if code else f"training ended with status {status!r}"
        last_line = next((line.strip() for line in reversed(tail) if line.strip()), "")
        if code and code > 0 and last_line:  # the error message or the traceback's last line
            reason += f": {last_line}"
    interrupted = reason == NOT_STARTED or code in INTERRUPTED_EXIT_CODES  # stopped, not broken
    write_failure(
        run_path,
        {
            "reason": reason,
            "exit_code": code,
            "interrupted": interrupted,
            "output_tail": tail,  # stdout and stderr of this attempt (stderr carries the errors)
            "wall_time_s": wall,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "config": spec.config,
        },
    )
    return TrialOutcome(spec.run, False, wall, reason, interrupted=interrupted)
