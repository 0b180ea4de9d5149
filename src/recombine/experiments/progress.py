"""Progress output of the experiments with their own training loops (the scripted reproductions), also
used for a grid's progress over its trials (:mod:`recombine.experiments.grid_progress`).

Two kinds, both on stderr so that stdout and the reports stay clean:

* :func:`training_bar`: a tqdm bar over the steps of one training loop when stderr is a terminal
  (removed when the loop ends); otherwise (a log file of a background run) plain lines such as
  ``dnc_ds seed 1: 600/2000 steps (30 %), 61 s, ~142 s left``, at most one per tenth of the steps and
  at least 10 s apart (a loop of a few seconds prints none), so that a log shows how far a long trial
  has got before its trial line; ``set_postfix_str`` (tqdm's) appends the loop's latest number, e.g.
  ``, eval loss 12.3``;
* :func:`trial_done`: one line per finished trial, always printed and flushed, so that the log file of a
  long background run shows how far it got, e.g.
  ``[3/6] dnc_ds seed 1: 2000 steps, 203 s, final eval loss 0.12``.

Neither touches a random number generator, so results do not depend on whether progress is shown.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType

from tqdm import tqdm

#: when stderr is not a terminal, at most one log line per 1 / MILESTONES of the steps ...
MILESTONES = 10
#: ... but none sooner than this many seconds after the start or the previous line (short loops stay quiet)
MIN_SECONDS_BETWEEN_LINES = 10.0


class MilestoneLines:
    """The stand-in for the bar when stderr is not a terminal: ``update`` like tqdm's, and a flushed
    line on stderr each time the count passes another ``1 / MILESTONES`` of ``total``, at least
    ``min_seconds`` after the start or the previous line. ``n`` is the count so far (as tqdm's)."""

    def __init__(
        self, total: int, description: str, min_seconds: float = MIN_SECONDS_BETWEEN_LINES, initial: int = 0
    ) -> None:
        self.total, self.description, self.min_seconds = total, description, min_seconds
        self.n = self._initial = initial  # a resumed loop starts at its step; the rate counts from there
        self.postfix = ""
        self._passed = min(MILESTONES, initial * MILESTONES // total) if total > 0 else 0
        self._start = self._last_line = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n
        reached = min(MILESTONES, self.n * MILESTONES // self.total) if self.total > 0 else 0
        # a resumed loop waits for a twentieth of what is left before its first line, so that its time left is
        # not a guess from a handful of steps (and the start-up time) just before the next tenth
        settled = (self.n - self._initial) * 2 * MILESTONES >= self.total - self._initial
        now = time.perf_counter()
        if reached > self._passed and settled and now - self._last_line >= self.min_seconds:
            self._passed, self._last_line = reached, now
            elapsed = now - self._start
            left = elapsed * max(self.total - self.n, 0) / max(self.n - self._initial, 1)
            percent = min(100, 100 * self.n // self.total)
            print(
                f"{self.description}: {self.n}/{self.total} steps ({percent} %), "
                f"{_seconds(elapsed)}, ~{_seconds(left)} left"
                + (f", {self.postfix}" if self.postfix else ""),
                file=sys.stderr,
                flush=True,
            )

    def set_postfix_str(self, postfix: str = "", refresh: bool = True) -> None:
        """Append ``postfix`` to the following lines (tqdm's method of that name; ``refresh`` is ignored)."""
        self.postfix = postfix

    def close(self) -> None:
        pass

    def __enter__(self) -> MilestoneLines:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


#: set in worker processes that share one terminal: their tqdm bars would overwrite each other
_LINES_ONLY = False


def progress_as_lines() -> None:
    """From now on, :func:`training_bar` prints lines in this process also on a terminal (a worker process
    of several training side by side; ``ProcessPoolExecutor(initializer=progress_as_lines)``)."""
    global _LINES_ONLY
    _LINES_ONLY = True


def training_bar(total: int, description: str, initial: int = 0) -> tqdm | MilestoneLines:
    """A bar over ``total`` training steps, labelled ``description`` (e.g. ``"dnc_ds seed 1"``), starting at
    step ``initial`` (a resumed loop).

    Use it as a context manager and call ``bar.update()`` once per step. On a terminal a tqdm bar;
    otherwise (a log file, a pipe, pytest's capture; after :func:`progress_as_lines`) lines:
    :class:`MilestoneLines`."""
    stderr = sys.stderr  # looked up now: it may have been replaced since import (or be None)
    if _LINES_ONLY or not (stderr is not None and getattr(stderr, "isatty", None) and stderr.isatty()):
        return MilestoneLines(total, description, initial=initial)
    return tqdm(
        total=total, initial=initial, desc=description, file=sys.stderr, leave=False, dynamic_ncols=True
    )


def trial_done(
    index: int, total: int, name: str, seconds: float, headline: str = "", steps: int | None = None
) -> str:
    """Print ``[index/total] name: [steps steps, ]seconds s[, headline]`` to stderr and flush; the line.

    ``index`` counts from 1; ``headline`` is one number the trial already computed, formatted by the
    caller (``"final eval loss 0.12"``)."""
    parts = [f"{steps} steps"] if steps is not None else []
    parts.append(_seconds(seconds))
    if headline:
        parts.append(headline)
    line = f"[{index}/{total}] {name}: {', '.join(parts)}"
    print(line, file=sys.stderr, flush=True)
    return line
