"""On-disk cache of built tasks, keyed by (task name, generator version, config hash).

Generation is deterministic given the config and seed, so a cache hit is always equivalent to
rebuilding. ``RECOMBINE_CACHE`` overrides the location (default ``~/.cache/recombine``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def cache_dir() -> Path:
    return Path(os.environ.get("RECOMBINE_CACHE", Path.home() / ".cache" / "recombine"))


def cache_key(name: str, version: int, config: dict[str, Any]) -> str:
    blob = json.dumps({"name": name, "version": version, "config": config}, sort_keys=True, default=str)
    return f"{name}-v{version}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def cached(name: str, version: int, config: dict[str, Any], build: Callable[[], T]) -> T:
    """Return ``build()``, loading it from the cache when present and storing it otherwise."""
    if os.environ.get("RECOMBINE_NO_CACHE"):
        return build()
    path = cache_dir() / f"{cache_key(name, version, config)}.pkl"
    if path.exists():
        try:
            with path.open("rb") as f:
                return pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            path.unlink(missing_ok=True)  # a corrupt entry is rebuilt, never trusted
    value = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(f.name, path)
    return value
