"""Archive a reproduction or sweep directory: its records (and, on request, its checkpoints), never its
TensorBoard events.

A grid directory (``recombine reproduce`` / ``recombine sweep``) holds, per run, two checkpoints
(``last.pt``, ``best.pt``) and TensorBoard events beside the small records the report is built from.
:func:`archive_grid` copies, by default, only the records:

    DEST/manifest.json              the grid and its recipe
    DEST/runs/RUN/config.yaml       the resolved config
    DEST/runs/RUN/metrics.jsonl     every logged and evaluated step
    DEST/runs/RUN/result.json       status and selected accuracies
    DEST/runs/RUN/failure.json      (failed runs only) why
    DEST/runs/RUN/train.log         (failed runs only) the trial's output, which the report points to

so ``recombine report DEST`` renders the same table and curves, and the archive is small enough to keep
in version control. Copied back into a grid directory it counts as finished work: ``recombine reproduce``
skips its runs (their ``result.json`` says completed) and adds new cells beside them. Extending a
records-only archived run to more steps needs its ``last.pt``, which such an archive does not keep.

``with_checkpoints=True`` (``recombine archive --with-checkpoints``) also copies each run's ``last.pt`` and
``best.pt``, the files a grid needs to go on elsewhere: copied back into a grid directory, an unfinished
run resumes from its last checkpoint, a finished one can be extended to more steps, and the probes read
the selected model. The records and checkpoints of a run must come from one moment, so this holds the
grid's and every run's lock (:mod:`recombine.runs.directory_lock`) while it copies, and refuses a grid that
is still training; the checkpoints are written atomically. An archive with checkpoints is never replaced
by a later archive (it may hold a grid's only checkpoints): archive into a new folder, or remove it first.
"""

from __future__ import annotations

import json
import shutil
from contextlib import ExitStack
from pathlib import Path

from recombine.errors import UserError
from recombine.runs.directory_lock import LOCK_FILE, exclusive_use
from recombine.runs.store import RunDir, atomic_write_bytes
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
    with ExitStack() as locks:
        if with_checkpoints:  # records and checkpoints of one moment: nobody trains while they are copied
            for directory in [source, *(source / entry["run"] for entry in manifest["runs"])]:
                locks.enter_context(exclusive_use(directory))
        if (dest / "manifest.json").is_file():
            _check_replaceable(dest, manifest["reproduction"])
            shutil.rmtree(dest / "runs", ignore_errors=True)  # no stale records of an older archive
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(manifest_path, dest / "manifest.json")
        for entry in manifest["runs"]:
            run, target = source / entry["run"], dest / entry["run"]
            target.mkdir(parents=True, exist_ok=True)
            for record in record_files(run):
                if record.is_file():
                    shutil.copyfile(record, target / record.name)
            store = RunDir(run)
            for which in CHECKPOINTS if with_checkpoints else ():
                if store.has_checkpoint(which):
                    _copy_atomically(store.checkpoint_path(which), target / store.checkpoint_path(which).name)
    return len(manifest["runs"])


def _copy_atomically(source: Path, target: Path) -> None:
    """A killed copy leaves no truncated ``target`` that would later pass for a checkpoint."""
    with source.open("rb") as data:
        atomic_write_bytes(target, lambda out: shutil.copyfileobj(data, out))


def _check_replaceable(dest: Path, reproduction: str) -> None:
    """``dest`` may be overwritten only if it is an older records-only archive of the same reproduction."""
    previous = json.loads((dest / "manifest.json").read_text())["reproduction"]
    if previous != reproduction:
        raise UserError(f"{dest} holds reproduction {previous!r}, not {reproduction!r}; archive elsewhere")
    if next(dest.rglob("*.pt"), None) is None:
        return
    if next(dest.rglob(LOCK_FILE), None) is not None or next(dest.rglob("events"), None) is not None:
        raise UserError(f"{dest} is a grid directory with checkpoints, not an archive; archive elsewhere")
    raise UserError(
        f"{dest} is an archive with checkpoints, which may be a grid's only copy; archive into a new folder, "
        "or remove it first"
    )
