"""Named reproductions of the seeds' tables: ``recombine reproduce NAME``."""

from __future__ import annotations

from recombine.errors import UserError, choices_hint
from recombine.experiments.ndr_ctl import NDR_CTL
from recombine.experiments.reproduction import Reproduction

REPRODUCTIONS: dict[str, Reproduction] = {r.name: r for r in [NDR_CTL]}


def get(name: str) -> Reproduction:
    try:
        return REPRODUCTIONS[name]
    except KeyError:
        raise UserError(f"unknown reproduction {name!r}; {choices_hint(name, REPRODUCTIONS)}") from None


__all__ = ["REPRODUCTIONS", "Reproduction", "get"]
