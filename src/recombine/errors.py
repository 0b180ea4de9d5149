"""Errors a user can cause. The CLI prints their message on one line and exits with code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the user's input (unknown name, bad value, malformed file, bad run dir)."""


def choices_hint(value: str, choices: Iterable[str]) -> str:
    """``valid choices: a, b, c`` with close matches to ``value`` listed first."""
    choices = sorted(choices)
    close = difflib.get_close_matches(value, choices, n=3, cutoff=0.5)
    ordered = close + [c for c in choices if c not in close]
    return "valid choices: " + ", ".join(ordered)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name if it has none (torch's span lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
