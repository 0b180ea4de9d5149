"""Grid trials that did not finish, as a report shows them: counted in their table cell, and, for an
interrupted trial (stopped and resumable: ``recombine runs`` status ``interrupted``), how far it got and its
best evaluation so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recombine.runs.store import RunDir


def with_failed_and_interrupted_counts(text: str, cell: dict[str, Any]) -> str:
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
    """How far an unfinished run got: its last logged step (its checkpoint may be a few steps further)
    and, once it has evaluated, its best evaluation so far by the selection rule of a finished run
    (valid_ood, else valid_iid; the first best), with the accuracies of every split there."""
    metrics = RunDir(run_path).read_metrics()
    steps = [r["step"] for r in metrics if isinstance(r.get("step"), int)]
    progress: dict[str, Any] = {"step": max(steps, default=0)}
    evals = [
        r
        for r in metrics
        if r.get("kind") == "eval" and isinstance(r.get("step"), int) and isinstance(r.get("splits"), dict)
    ]
    # the selection rule of a finished run (supervised.summarise with TaskSpec.selection_split)
    selection = next((s for s in ("valid_ood", "valid_iid") if any(s in r["splits"] for r in evals)), None)
    if selection is None:
        return progress

    def accuracy(record: dict[str, Any]) -> float:
        value = record["splits"].get(selection, {}).get("accuracy")
        return value if isinstance(value, int | float) else -1.0

    best = max(evals, key=lambda r: (accuracy(r), -r["step"]))
    progress.update(
        selection_split=selection,
        best_step=best["step"],
        best={
            name: v["accuracy"]
            for name, v in best["splits"].items()
            if isinstance(v, dict) and "accuracy" in v
        },
        report_split=report_split,
    )
    return progress


def describe_progress(progress: dict[str, Any]) -> str:
    """E.g. ``stopped at step 18,550; best valid_ood so far 0.945 at step 18,500 (test_ood 0.303)``."""
    text = f"stopped at step {progress['step']:,}"
    if "best_step" not in progress:
        return text + "; no evaluation on a validation split yet"
    selection, best = progress["selection_split"], progress["best"]
    text += f"; best {selection} so far {best[selection]:.3f} at step {progress['best_step']:,}"
    report = progress["report_split"]
    if report != selection and report in best:
        text += f" ({report} {best[report]:.3f})"
    return text
