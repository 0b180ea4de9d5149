"""Grid trials that did not finish, as a report shows them: counted in their table cell, and, for an
interrupted trial (stopped and resumable, :func:`recombine.runs.trial_record.is_interrupted`), how far it
got and its best evaluation so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recombine.runs.store import RunDir


def with_unfinished_counts(text: str, cell: dict[str, Any]) -> str:
    """A table cell's summary with its failed and interrupted runs counted: ``failed (1)``,
    ``interrupted (3)``, or ``0.50 ± 0.25 (1/3), 1 failed, 1 interrupted`` beside finished seeds."""
    counts = [
        (len(cell.get(key, [])), word)
        for key, word in (("failed_runs", "failed"), ("interrupted_runs", "interrupted"))
    ]
    counts = [(n, word) for n, word in counts if n]
    if not counts:
        return text
    if text == "–":
        return ", ".join(f"{word} ({n})" for n, word in counts)
    return ", ".join([text, *(f"{n} {word}" for n, word in counts)])


def progress_so_far(run_path: Path, report_split: str) -> dict[str, Any]:
    """How far an unfinished run got: its last logged step (its checkpoint may be a few steps further) and,
    when it has evaluated, its best evaluation
    so far by the selection rule of a finished run (valid_ood, else valid_iid; the first best) with the
    accuracies of every split there."""
    metrics = RunDir(run_path).read_metrics()
    progress: dict[str, Any] = {"step": max((int(r.get("step", 0)) for r in metrics), default=0)}
    evals = [r for r in metrics if r.get("kind") == "eval" and isinstance(r.get("splits"), dict)]
    selection = next((s for s in ("valid_ood", "valid_iid") if evals and s in evals[-1]["splits"]), None)
    if selection is None:
        return progress
    best = max(evals, key=lambda r: (r["splits"].get(selection, {}).get("accuracy", -1.0), -r["step"]))
    progress.update(
        selection_split=selection,
        best_step=best["step"],
        best={name: values["accuracy"] for name, values in best["splits"].items()},
        report_split=report_split,
    )
    return progress


def describe_progress(progress: dict[str, Any]) -> str:
    """E.g. ``stopped at step 18,565; best valid_ood so far 0.945 at step 18,500 (test_ood 0.303)``."""
    text = f"stopped at step {progress['step']:,}"
    if "best_step" not in progress:
        return text + "; no evaluation yet"
    selection, best = progress["selection_split"], progress["best"]
    text += f"; best {selection} so far {best[selection]:.3f} at step {progress['best_step']:,}"
    report = progress["report_split"]
    if report != selection and report in best:
        text += f" ({report} {best[report]:.3f})"
    return text
