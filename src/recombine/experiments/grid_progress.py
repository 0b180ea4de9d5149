"""Progress over a grid's training: the steps its trials have logged, summed, against the steps they
train to, with the time left.

Trials run in their own processes (``recombine train``), so this reads what they write: the last
record of each run's ``metrics.jsonl`` (:mod:`recombine.runs.store`), polled from a daemon thread. A
resumed trial counts from the step it resumes at; a run that rewinds to its checkpoint on resume moves
the count back by the steps it lost. The display is :func:`recombine.experiments.progress.training_bar`'s:
a tqdm bar on a terminal, otherwise (a log file of a background grid) a line per tenth of the steps, e.g.
``6 runs: 21000/210000 steps (10 %), 1201 s, ~10809 s left``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from tqdm import tqdm

from recombine.experiments.progress import MilestoneLines, training_bar
from recombine.experiments.trial import TrialSpec
from recombine.runs.store import RunDir


def latest_step(run_path: Path) -> int | None:
    """:meth:`RunDir.last_logged_step` of ``run_path``, or ``None`` when the file cannot be read now (e.g.
    a shared disk's hiccup): the count then keeps the run's last known step."""
    try:
        return RunDir(run_path).last_logged_step()
    except OSError:
        return None


class GridProgress:
    """``with GridProgress(specs): ...`` shows the progress of ``specs`` while the block runs.

    ``disable`` turns it off (nothing is shown, no thread starts); ``interval`` is the polling period in
    seconds. :meth:`poll` updates the count once; the thread calls it every ``interval``.
    """

    def __init__(self, specs: Sequence[TrialSpec], interval: float = 2.0, disable: bool = False) -> None:
        self.specs = list(specs)
        self.interval = interval
        self.disable = disable or not self.specs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one writer at a time: the count's lines and the trials' lines
        self._known: dict[str, int] = {}  # each run's last readable step
        self.bar: tqdm | MilestoneLines | None = None
        if not self.disable:
            total = sum(spec.steps for spec in self.specs)
            self.bar = training_bar(total, f"{len(self.specs)} runs", initial=self.logged_steps())

    def logged_steps(self) -> int:
        """The steps the trials have logged, each capped at the steps it trains to."""
        total = 0
        for spec in self.specs:
            step = latest_step(spec.run_path)
            if step is not None:
                self._known[spec.run] = step
            total += min(self._known.get(spec.run, 0), spec.steps)
        return total

    def poll(self) -> None:
        if self.bar is None:
            return
        with self._lock:
            delta = self.logged_steps() - self.bar.n
            if delta:
                self.bar.update(delta)

    def write(self, on_event: Callable[[str], None], message: str) -> None:
        """Pass ``message`` to ``on_event``, a terminal bar cleared first: the two must not interleave."""
        with self._lock:
            if isinstance(self.bar, tqdm):
                with tqdm.external_write_mode(file=self.bar.fp):
                    on_event(message)
            else:
                on_event(message)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> GridProgress:
        if not self.disable:
            self._thread = threading.Thread(target=self._watch, name="grid-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is None:  # the final count; on an interruption, leave the count where it was
            self.poll()
        if self.bar is not None:
            self.bar.close()
