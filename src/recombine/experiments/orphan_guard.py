"""Worker processes that end with their parent.

A DNC reproduction with ``--jobs N`` trains in a pool of worker processes while the parent holds the
reproduction directory's lock (:mod:`recombine.runs.directory_lock`). Stopped with Ctrl-C or ``kill``, the
parent terminates its workers itself. Killed with SIGKILL, it cannot: its lock goes with it, but each worker
would go on training its group, possibly for hours, and a resumed reproduction would then train the same runs
beside the orphans. :func:`end_with_parent`, run in each worker as the pool's initializer, watches the parent
from a daemon thread and ends the worker once the parent is gone; the worker's runs resume from their last
checkpoint, as after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
import time

#: how often a worker looks for its parent (seconds)
POLL_S = 1.0


def _watch(parent: int) -> None:
    while os.getppid() == parent:  # an orphan is re-parented (to init or a subreaper)
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def end_with_parent(parent: int) -> None:
    """End this process (SIGTERM) once ``parent`` (the pid of the process that started it, taken there:
    a spawned worker runs its initializer only after seconds of imports, when the parent may be gone
    already) is no longer its parent."""
    threading.Thread(target=_watch, args=(parent,), name="end-with-parent", daemon=True).start()
