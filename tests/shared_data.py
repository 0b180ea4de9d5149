"""Where the official data files live for tests: ``../shared/data`` next to the repository root.

Tests that compare against official files (SCAN, PCFG SET, COGS ...) use :func:`shared_data_dir` and
skip cleanly with :data:`requires_shared_data` when the folder is absent (e.g. a fresh clone).
``RECOMBINE_SHARED_DATA`` points somewhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """The official data folder (``<repo>/../shared/data``), or ``None`` when it does not exist."""
    override = os.environ.get("RECOMBINE_SHARED_DATA")
    path = Path(override) if override else REPO_ROOT / ".." / "shared" / "data"
    return path.resolve() if path.is_dir() else None


def shared_file(*parts: str) -> Path:
    """A file under the shared data folder; skips the calling test when it is missing."""
    root = shared_data_dir()
    if root is None:
        pytest.skip("official data folder ../shared/data not found")
    path = root.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"official file {path} not found")
    return path


requires_shared_data = pytest.mark.skipif(
    shared_data_dir() is None, reason="official data folder ../shared/data not found"
)
