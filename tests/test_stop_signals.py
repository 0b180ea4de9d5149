"""StopRequests turns the first SIGINT/SIGTERM into a flag, a second SIGINT into KeyboardInterrupt, restores
the previous handlers on exit, leaves ignored signals ignored and does nothing outside the main thread."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from recombine.stop_signals import StopRequests, sigterm_as_keyboard_interrupt


@pytest.fixture(autouse=True)
def restore_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_sets_the_flag_and_handlers_come_back(signum: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopRequests() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signum)  # delivered to the main thread before kill returns to Python code
        assert stop.requested and stop.signal == signum
    assert {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} == before


def test_a_second_ctrl_c_stops_at_once() -> None:
    with pytest.raises(KeyboardInterrupt), StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
        os.kill(os.getpid(), signal.SIGINT)


def test_an_ignored_signal_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with StopRequests() as stop:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        assert not stop.requested
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_outside_the_main_thread_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    def worker() -> None:
        with StopRequests():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [before]


def test_sigterm_as_keyboard_interrupt_while_active_only() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_keyboard_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with sigterm_as_keyboard_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)  # ignored, as before
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
