"""What a sweep records about a trial beside the run store's own files, and a run's status.

::

    RUN/trial.pid      the pid of the trial's training process while it runs (removed when it ends)
    RUN/failure.json   written when the trial's process failed (exit code, signal, output tail, the
                       config it was given); removed when a later attempt succeeds
    RUN/train.log      the trial's output (stdout and stderr), appended by every attempt

A trial rejected before training (an invalid config) leaves no ``config.yaml``; its
``failure.json`` keeps the config so ``recombine runs`` can still list it.

Status of a run directory (``recombine runs --status``):

- ``finished``: ``result.json`` says ``completed``;
- ``failed``: ``failure.json`` exists, or ``result.json`` gives another status (``diverged``);
- ``interrupted``: ``failure.json`` says the trial was stopped (Ctrl-C, ``kill``, a sweep stopped or timed
  out: exit code 130 or SIGINT / SIGTERM, or never started by a stopped sweep; :func:`is_interrupted`), or
  ``trial.pid`` names a process that no longer exists (the sweep was killed); either way the command that
  started it continues it from its checkpoint;
- ``running``: otherwise (for a run trained outside a sweep: running, or interrupted without a trace).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from recombine.runs.store import RunDir

STATUSES = ("finished", "failed", "running", "interrupted")
FAILURE_FILE = "failure.json"
#: exit codes of a trial that was stopped rather than broken: ``recombine train``'s own answer to Ctrl-C
#: and ``kill`` (130), or the process ended by SIGINT / SIGTERM before it could answer
INTERRUPTED_EXIT_CODES = (130, -signal.SIGINT, -signal.SIGTERM)
PID_FILE = "trial.pid"
TRAIN_LOG = "train.log"


def write_failure(run_path: Path, failure: dict[str, Any]) -> None:
    run_path.mkdir(parents=True, exist_ok=True)
    (run_path / FAILURE_FILE).write_text(json.dumps(failure, indent=2))


def read_failure(run_path: Path) -> dict[str, Any] | None:
    path = run_path / FAILURE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {"reason": "failure.json is corrupt"}


def is_interrupted(failure: dict[str, Any] | None) -> bool:
    """Whether a ``failure.json`` record is a stop (resumable as it is), not a failure: its
    ``interrupted`` flag (also set for a trial the stopped sweep never started), or, in records written
    before the flag, its exit code."""
    if failure is None:
        return False
    flag = failure.get("interrupted")
    return flag if isinstance(flag, bool) else failure.get("exit_code") in INTERRUPTED_EXIT_CODES


def clear_failure(run_path: Path) -> None:
    (run_path / FAILURE_FILE).unlink(missing_ok=True)


def write_pid(run_path: Path, pid: int) -> None:
    (run_path / PID_FILE).write_text(str(pid))


def clear_pid(run_path: Path) -> None:
    (run_path / PID_FILE).unlink(missing_ok=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def run_status(run_path: Path) -> str:
    """One of :data:`STATUSES` (see the module docstring)."""
    result = RunDir(run_path).read_result()
    if result is not None and result.get("status") == "completed":
        return "finished"
    if (run_path / FAILURE_FILE).is_file():
        return "interrupted" if is_interrupted(read_failure(run_path)) else "failed"
    if result is not None:
        return "failed"
    pid_file = run_path / PID_FILE
    if pid_file.is_file():
        text = pid_file.read_text().strip()
        if not text.isdigit() or not _process_alive(int(text)):
            return "interrupted"
    return "running"
