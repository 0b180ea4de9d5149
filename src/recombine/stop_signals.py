"""Stop a training loop between two steps when asked to (Ctrl-C, ``kill``, a job scheduler's SIGTERM).

Why: a run checkpoints at its evaluations, every ``train.eval_every`` steps. Interrupted anywhere else, it
used to lose the steps since the last evaluation, which on a time-limited GPU or a slow CPU run can be
many minutes. Instead, the first SIGINT or SIGTERM only sets a flag; the loop finishes the step it is in,
writes ``last.pt`` at that step and stops (:func:`recombine.train.supervised.fit`). Stopping between steps
matters: mid-step, the weights, optimizer, random states and step counter disagree, and a checkpoint then
would not resume to the same run. A second Ctrl-C stops at once, as before.

Signal handlers can only be installed from the main thread; elsewhere (a training loop in a worker
thread) :class:`StopRequests` does nothing and signals keep their usual effect. A signal the process
ignores (SIGINT of a job started with ``&`` from a script) stays ignored.

:func:`sigterm_as_keyboard_interrupt` makes SIGTERM end a command the way Ctrl-C does (the CLI's
``interrupted`` line, exit code 130, a sweep stopping its trials), where it would otherwise end the
process on the spot.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """Context manager: while active, SIGINT and SIGTERM set :attr:`signal` instead of stopping."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: stop now
        self.signal = signal.Signals(signum)

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in HANDLED:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # e.g. SIGINT of a `cmd &` in a script
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            # None: a handler installed from C, which Python cannot reinstall; the default is closest
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # type: ignore[arg-type]
        self._previous = {}


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_keyboard_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises KeyboardInterrupt; an ignored SIGTERM stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
