"""Archive a reproduction or sweep directory: its records, without checkpoints or TensorBoard events.

A grid directory (``recombine reproduce`` / ``recombine sweep``) holds, per run, two checkpoints
(``last.pt``, ``best.pt``, megabytes each) and TensorBoard events beside the small records the report is
built from. :func:`archive_grid` copies only the records:

    DEST/manifest.json              the grid and its recipe
    DEST/runs/RUN/config.yaml       the resolved config
    DEST/runs/RUN/metrics.jsonl     every logged and evaluated step
    DEST/runs/RUN/result.json       status and selected accuracies
    DEST/runs/RUN/failure.json      (failed runs only) why
    DEST/runs/RUN/train.log         (failed runs only) the trial's output, which the report points to

so ``recombine report DEST`` renders the same table and curves, and the archive is small enough to keep
in version control. Copied back into a grid directory it counts as finished work: ``recombine reproduce``
skips its runs (their ``result.json`` says completed) and adds new cells beside them. Extending an
archived run to more steps needs its ``last.pt``, which the archive does not keep.

``with_checkpoints=True`` (``recombine archive --with-checkpoints``) also copies each run's ``last.pt`` and
``best.pt``, the files a grid needs to go on elsewhere: copied back into a grid directory, an unfinished
run resumes from its last checkpoint, a finished one can be extended to more steps, and the probes read
the selected model. An archive with checkpoints looks like a grid directory, so archiving into it again is
refused like archiving into a grid: remove it first.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from recombine.errors import UserError
from recombine.runs.store import RunDir
from recombine.runs.trial_record import FAILURE_FILE, TRAIN_LOG, run_status


def record_files(run: Path) -> list[Path]:
    """The files of run directory ``run`` that reports are built from (the run store's own names),
    and a failed run's log, which its report line points to."""
    store = RunDir(run)
    records = [store.config_path, store.metrics_path, store.result_path, run / FAILURE_FILE]
    return records + [run / TRAIN_LOG] if run_status(run) in ("failed", "interrupted") else records


#: the checkpoints ``with_checkpoints`` copies (:meth:`RunDir.checkpoint_path` names)
CHECKPOINTS = ("last", "best")


def archive_grid(source: Path, dest: Path, with_checkpoints: bool = False) -> int:
    """Copy ``source``'s manifest and its runs' records (and, ``with_checkpoints``, their :data:`CHECKPOINTS`)
    into ``dest``; returns the number of runs."""
    manifest_path = source / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"{source} is not a reproduction or sweep directory (no manifest.json)")
    source, dest = source.resolve(), dest.resolve()
    if dest == source or source in dest.parents or dest in source.parents:
        raise UserError(f"the archive {dest} and the grid {source} must not contain one another")
    manifest = json.loads(manifest_path.read_text())
    if (dest / "manifest.json").is_file():
        _check_replaceable(dest, manifest["reproduction"])
        shutil.rmtree(dest / "runs", ignore_errors=True)  # no stale records of an older archive
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(manifest_path, dest / "manifest.json")
    for entry in manifest["runs"]:
        run, target = source / entry["run"], dest / entry["run"]
        target.mkdir(parents=True, exist_ok=True)
        files = record_files(run)
        if with_checkpoints:
            files += [RunDir(run).checkpoint_path(which) for which in CHECKPOINTS]
        for file in files:
            if file.is_file():
                shutil.copyfile(file, target / file.name)
    return len(manifest["runs"])


def _check_replaceable(dest: Path, reproduction: str) -> None:
    """``dest`` may be overwritten only if it is an older archive of the same reproduction."""
    previous = json.loads((dest / "manifest.json").read_text())["reproduction"]
    if previous != reproduction:
        raise UserError(f"{dest} holds reproduction {previous!r}, not {reproduction!r}; archive elsewhere")
    if next(dest.rglob("*.pt"), None) is not None:
        raise UserError(
            f"{dest} holds checkpoints (a grid directory, or an archive made with --with-checkpoints); "
            "archive elsewhere, or remove it first"
        )
