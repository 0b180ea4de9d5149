"""The run store: one directory per run.

::

    RUN/config.yaml      the resolved config (every field, defaults included)
    RUN/metrics.jsonl    one JSON record per log/eval event: the source of truth
    RUN/events/          TensorBoard event files
    RUN/last.pt          the latest checkpoint (model, optimizer, RNG states, step)
    RUN/best.pt          the model selected by accuracy on the selection split (weights, step, config;
                         no optimizer or RNG state: runs resume from last.pt)
    RUN/result.json      written once the run finishes: status and selected accuracies

Checkpoints are written atomically (temporary file + rename) so a SIGKILL never leaves a torn
file behind; resuming truncates ``metrics.jsonl`` to the checkpoint's step.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml

from recombine.errors import UserError


def atomic_write_bytes(path: Path, write: Any) -> None:
    """Call ``write(f)`` on a temporary file next to ``path``, fsync it and rename it to ``path``: a crash
    never leaves a half-written ``path``."""
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


TAIL_BYTES = 8192  # the first window read for the last record; records are under 1 KB (CTL++ per-depth evals)


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # -- files -----------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def result_path(self) -> Path:
        return self.path / "result.json"

    def checkpoint_path(self, which: str) -> Path:
        return self.path / f"{which}.pt"

    # -- config ----------------------------------------------------------------------------
    def write_config(self, config: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            self.config_path, lambda f: f.write(yaml.safe_dump(config, sort_keys=False).encode())
        )

    def read_config(self) -> dict[str, Any]:
        if not self.config_path.is_file():
            raise UserError(f"{self.path} is not a run directory (no config.yaml)")
        try:
            return yaml.safe_load(self.config_path.read_text())
        except yaml.YAMLError as e:
            raise UserError(f"{self.config_path} is corrupt: {str(e).splitlines()[0]}") from None

    # -- metrics ---------------------------------------------------------------------------
    def append_metrics(self, record: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        records = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line torn by a kill: everything after it is discarded on resume
        return records

    def last_logged_step(self) -> int:
        """The step of the last complete record in ``metrics.jsonl`` (0 when there is none, or no file),
        read from the file's end: cheap enough to poll a running run (OSErrors other than a missing file
        are the caller's)."""
        try:
            with self.metrics_path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                window = TAIL_BYTES
                while True:  # widen the window until it holds a complete record, or the whole file
                    start = max(0, size - window)
                    f.seek(start)
                    for line in reversed(f.read().splitlines()[(1 if start else 0) :]):
                        try:
                            return int(json.loads(line)["step"])
                        except (ValueError, KeyError, TypeError):  # a line torn by a kill
                            continue
                    if start == 0:
                        return 0
                    window *= 4
        except FileNotFoundError:
            return 0

    def truncate_metrics(self, max_step: int) -> None:
        """Keep only records up to ``max_step`` (what the checkpoint being resumed has seen)."""
        kept = [r for r in self.read_metrics() if r["step"] <= max_step]
        text = "".join(json.dumps(r) + "\n" for r in kept)
        atomic_write_bytes(self.metrics_path, lambda f: f.write(text.encode()))

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, which: str, state: dict[str, Any]) -> None:
        atomic_write_bytes(self.checkpoint_path(which), lambda f: torch.save(state, f))

    def has_checkpoint(self, which: str) -> bool:
        return self.checkpoint_path(which).is_file()

    def load_checkpoint(self, which: str) -> dict[str, Any]:
        path = self.checkpoint_path(which)
        if not path.is_file():
            raise UserError(f"{self.path} has no {which} checkpoint to load")
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # torch raises many types for a damaged file
            raise UserError(
                f"checkpoint {path} is corrupt ({type(e).__name__}); delete it to restart"
            ) from None

    # -- result ----------------------------------------------------------------------------
    def write_result(self, result: dict[str, Any]) -> None:
        atomic_write_bytes(self.result_path, lambda f: f.write(json.dumps(result, indent=2).encode()))

    def read_result(self) -> dict[str, Any] | None:
        if not self.result_path.is_file():
            return None
        try:
            return json.loads(self.result_path.read_text())
        except json.JSONDecodeError:
            raise UserError(f"{self.result_path} is corrupt") from None

    def is_complete(self) -> bool:
        result = self.read_result()
        return result is not None and result.get("status") == "completed"
