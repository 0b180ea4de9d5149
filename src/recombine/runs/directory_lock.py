"""One writer per directory: a run or a reproduction is trained by at most one process at a time.

Two processes training the same run directory (``recombine train --resume RUN`` while RUN still trains,
or a second ``recombine reproduce ... --out DIR`` on a directory another one is filling) interleave
their lines in ``metrics.jsonl`` and overwrite each other's checkpoints; neither run can be trusted
afterwards. Every writer therefore holds the directory's lock file (``LOCK_FILE``) while it works, and
a second writer stops at once with one line (exit code 2) instead of waiting.

The lock is an OS file lock (``flock`` through the `filelock` package, which torch already depends on):
the kernel releases it when its process ends, however it ends, so a run killed with SIGKILL never
leaves a stale lock behind and resumes as before. The (empty) lock file stays in the directory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import filelock

from recombine.errors import UserError

LOCK_FILE = ".recombine.lock"

#: directories this process holds: the holding thread and how many of its ``with`` blocks hold each. The lock
#: is re-entrant within one thread (a reproduction that holds its directory renders its report under the same
#: lock); another thread of the process is refused like another process.
_held: dict[Path, tuple[int, int]] = {}
_held_guard = threading.Lock()


def _in_use(directory: Path) -> UserError:
    return UserError(
        f"{directory} is in use: another recombine process is writing to it; "
        "wait for it to end or stop it, then run this again"
    )


@contextmanager
def exclusive_use(directory: str | Path) -> Iterator[None]:
    """Hold ``directory``'s lock (creating the directory) for the ``with`` block; a UserError when
    another process or thread holds it. Within one thread the lock is re-entrant. A directory this call
    created and the block left empty (a config error before anything was written, say) is removed again."""
    directory = Path(directory)
    key, me = directory.resolve(), threading.get_ident()
    with _held_guard:
        holder = _held.get(key)
        if holder is not None and holder[0] != me:
            raise _in_use(directory)
        if holder is not None:
            _held[key] = (me, holder[1] + 1)
    if holder is not None:
        try:
            yield
        finally:
            with _held_guard:
                _held[key] = (me, _held[key][1] - 1)
        return
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(directory / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise _in_use(directory) from None
    with _held_guard:
        _held[key] = (me, 1)
    try:
        yield
    finally:
        with _held_guard:
            del _held[key]
        try:
            with suppress(OSError):  # another process may be opening the lock file right now
                if created and [entry.name for entry in directory.iterdir()] == [LOCK_FILE]:
                    (directory / LOCK_FILE).unlink()  # still held: nobody else is inside
                    directory.rmdir()
        finally:
            lock.release()
