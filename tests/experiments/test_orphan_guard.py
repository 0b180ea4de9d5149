"""A training worker ends with its parent: a pool's worker started with ``end_with_parent`` exits within
seconds of its parent being killed with SIGKILL, instead of finishing its task as an orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from recombine.experiments.orphan_guard import end_with_parent

if __name__ == "__main__":
    guarded = sys.argv[1] == "guarded"
    context = multiprocessing.get_context("spawn")
    guard = {"initializer": end_with_parent, "initargs": (os.getpid(),)} if guarded else {}
    pool = ProcessPoolExecutor(1, mp_context=context, **guard)
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 600)  # the long task an orphan would go on with
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaps, as in some containers, counts as ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("guarded", [True, False], ids=["end_with_parent", "unguarded"])
def test_a_worker_ends_soon_after_its_parent_is_killed(tmp_path: Path, guarded: bool) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), "guarded" if guarded else "plain"], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        # the unguarded worker is the control: it outlives its parent, so the check above can fail
        assert _alive(worker) is not guarded
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)
