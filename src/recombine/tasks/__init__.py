"""Task registry: ``recombine.tasks.get("ctl", seed=1, direction="backward")``."""

from __future__ import annotations

from typing import Any

from recombine.config_validation import build_config
from recombine.registry import Registry
from recombine.tasks.base import ClassificationSplit, TaskData, TaskSpec, Vocabulary

TASKS: Registry = Registry("task")


def get(name: str, seed: int = 0, **config: Any) -> TaskData:
    """Build (or load from cache) task ``name`` with config overrides and a seed."""
    entry = TASKS.get(name)
    return entry.factory(build_config(entry, config, section="task"), seed)


def names() -> list[str]:
    return TASKS.names()


from recombine.tasks import cfq as _cfq  # noqa: E402,F401  (registers the task)
from recombine.tasks import cogs as _cogs  # noqa: E402,F401
from recombine.tasks import ctl as _ctl  # noqa: E402,F401
from recombine.tasks import ctlpp as _ctlpp  # noqa: E402,F401
from recombine.tasks import listops as _listops  # noqa: E402,F401
from recombine.tasks import mathematics as _mathematics  # noqa: E402,F401
from recombine.tasks import pcfg_set as _pcfg_set  # noqa: E402,F401
from recombine.tasks import scan as _scan  # noqa: E402,F401
from recombine.tasks import simple_arithmetic as _simple_arithmetic  # noqa: E402,F401

__all__ = ["TASKS", "ClassificationSplit", "TaskData", "TaskSpec", "Vocabulary", "get", "names"]
