"""Run a Python snippet in a child process whose stderr is a real pseudo-terminal, for tests of what progress
bars draw on a terminal (tqdm draws nothing when stderr is not one)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest


def stderr_on_pseudo_terminal(code: str, columns: int = 80) -> str:
    """Everything the child ``python -c code`` wrote to its stderr, a terminal of ``columns`` columns; the
    test is skipped where the platform has no ``termios``; the child must exit with status 0."""
    termios = pytest.importorskip("termios")
    import fcntl

    parent, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen([sys.executable, "-c", code], stderr=child, stdout=subprocess.DEVNULL)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 4096)
        except OSError:  # Linux: EIO once the child has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(parent)
    assert process.wait(timeout=60) == 0
    return b"".join(chunks).decode()
