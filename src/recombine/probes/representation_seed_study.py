"""Representation compatibility over many runs: do the seeds that generalise learn one representation per
symbol? (thesis 6.3.1, App. E.2.2, Figs. E.5-E.7)

Thesis 6.3.1 finds, for an NDR seed that fails on CTL++ variant 'R', two clusters of a symbol's
representations, aligned with the function groups, and states the converse: "for successful seeds, we do not
observe any of these clusters for any symbols (see Fig. E.5 in the appendix). A single representation shared
across all functions is learned for each symbol." E.2.2 adds that the figures are "representative examples;
the observation holds over all seeds we inspected".

This module checks that claim on a directory of runs (a reproduction's or sweep's output, or any directory
of ``recombine train`` runs). It runs the single-run probe
(:func:`recombine.probes.representation_compatibility.representation_compatibility`) on every CTL++ run
found, and sets each run's one-number summaries (mean cosine similarity of a symbol's representations
within and across groups, mean number of clusters, two-step accuracies) beside the accuracy of the same
checkpoint on the OOD test split, read from the run's ``metrics.jsonl`` at the checkpoint's step. A run
*succeeds* when that accuracy is at least ``threshold`` (0.95, the thesis's success criterion for
Tab. 6.1). Outputs: a Markdown table with a row per run, the means of the summaries over succeeded and
failed runs and each summary's rank correlation with the accuracy; a scatter figure of OOD accuracy against
the cross-group similarity and against the within- minus cross-group gap; and every run's own probe
outputs (Fig. 6.3 matrices, Fig. E.2) in a folder of its own.

The grouping into succeeded and failed runs and the summary numbers are ours; the thesis shows the matrices
of representative seeds (Figs. E.5-E.7) and gives no per-seed numbers.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from recombine.errors import UserError, choices_hint
from recombine.probes.representation_compatibility import representation_compatibility, write_outputs
from recombine.runs.listing import find_runs
from recombine.runs.selection import Evaluation, read_evaluations
from recombine.runs.store import RunDir

#: the one-number summaries of :meth:`RepresentationCompatibility.summary` and the gap :func:`_summary` adds,
#: in table order, with their headers
SUMMARY_COLUMNS = {
    "similarity_within_groups": "cos within groups",
    "similarity_across_groups": "cos across groups",
    "similarity_gap": "cos gap",  # within - across: how far the representations split by group
    "mean_clusters": "clusters",
    "accuracy_within_groups": "2-step acc. within",
    "accuracy_across_groups": "2-step acc. across",
}
OUTCOMES = ("succeeded", "failed")
#: above this many conditions the figure names each point instead of giving every condition a colour
MAX_LEGEND_CONDITIONS = 10


@dataclass(frozen=True)
class StudiedRun:
    """One run's probe summary beside the accuracy of the probed checkpoint."""

    name: str  # the run directory relative to the study's root
    condition: str  # ``name`` without its ``--seedN`` suffix (in a reproduction: runs/ROW--COLUMN)
    seed: int | None
    variant: str | None  # CTL++ variant ('A', 'R', 'S')
    step: int  # the probed checkpoint's training step
    accuracy: dict[str, float]  # split -> accuracy of the checkpoint (empty: no evaluation at that step)
    summary: dict[str, float]

    def outcome(self, split: str, threshold: float) -> str | None:
        """``succeeded`` / ``failed`` by ``accuracy[split] >= threshold``; ``None`` when not evaluated."""
        if split not in self.accuracy:
            return None
        return "succeeded" if self.accuracy[split] >= threshold else "failed"


@dataclass
class SeedStudy:
    """The probe over every CTL++ run under a directory."""

    root: Path
    runs: list[StudiedRun]
    split: str = "test_ood"
    threshold: float = 0.95
    checkpoint: str = "best"
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run, why it was not probed)

    def means(self) -> dict[str, dict[str, float] | None]:
        """Per outcome, the mean of every summary over its runs (``None`` for an outcome with no runs)."""
        result: dict[str, dict[str, float] | None] = {}
        for outcome in OUTCOMES:
            members = [r for r in self.runs if r.outcome(self.split, self.threshold) == outcome]
            result[outcome] = (
                {key: float(np.mean([r.summary[key] for r in members])) for key in SUMMARY_COLUMNS}
                if members
                else None
            )
        return result

    def count(self, outcome: str) -> int:
        return sum(r.outcome(self.split, self.threshold) == outcome for r in self.runs)

    def correlations(self) -> dict[str, float | None]:
        """Spearman's rank correlation of each summary with the accuracy, over the evaluated runs (``None``
        with fewer than 3 runs or a constant column): does a summary order the runs as their accuracy does?"""
        from scipy.stats import spearmanr

        evaluated = [r for r in self.runs if self.split in r.accuracy]
        accuracy = [r.accuracy[self.split] for r in evaluated]
        result: dict[str, float | None] = {}
        for key in SUMMARY_COLUMNS:
            values = [r.summary[key] for r in evaluated]
            constant = len(set(values)) < 2 or len(set(accuracy)) < 2
            result[key] = None if len(evaluated) < 3 or constant else float(spearmanr(values, accuracy)[0])
        return result

    def table(self) -> str:
        """Markdown: one row per run, the means by outcome, the rank correlations with the accuracy, and the
        runs that were not probed."""
        header = ["run", "seed", "step", self.split, "outcome", *SUMMARY_COLUMNS.values()]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for run in self.runs:
            accuracy = run.accuracy.get(self.split)
            cells = [
                run.condition,
                "-" if run.seed is None else str(run.seed),
                str(run.step),
                "not evaluated" if accuracy is None else f"{accuracy:.3f}",
                run.outcome(self.split, self.threshold) or "-",
                *(_number(key, run.summary[key]) for key in SUMMARY_COLUMNS),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"Means by outcome ({self.split} >= {self.threshold:g} succeeds):", ""]
        header = ["outcome", "runs", *SUMMARY_COLUMNS.values()]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for outcome, mean in self.means().items():
            cells = [outcome, str(self.count(outcome))]
            cells += [_number(key, mean[key]) if mean else "-" for key in SUMMARY_COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
        evaluated = sum(self.split in r.accuracy for r in self.runs)
        lines += [
            "",
            f"Spearman's rank correlation with {self.split} over the {evaluated} evaluated runs:",
            "",
        ]
        header = list(SUMMARY_COLUMNS.values())
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        cells = ["-" if rho is None else f"{rho:+.2f}" for rho in self.correlations().values()]
        lines.append("| " + " | ".join(cells) + " |")
        if self.skipped:
            lines += ["", "Not probed:", ""] + [f"- {name}: {why}" for name, why in self.skipped]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "split": self.split,
            "threshold": self.threshold,
            "checkpoint": self.checkpoint,
            "runs": [
                {
                    "run": r.name,
                    "condition": r.condition,
                    "seed": r.seed,
                    "variant": r.variant,
                    "step": r.step,
                    "accuracy": r.accuracy,
                    "outcome": r.outcome(self.split, self.threshold),
                    "summary": r.summary,
                }
                for r in self.runs
            ],
            "means": self.means(),
            "spearman": self.correlations(),
            "skipped": [{"run": name, "reason": why} for name, why in self.skipped],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SeedStudy:
        """The study back from :meth:`to_json` (``seed_study.json``), e.g. to draw its figure again without
        probing the runs again."""
        runs = [
            StudiedRun(
                r["run"], r["condition"], r["seed"], r["variant"], r["step"], r["accuracy"], r["summary"]
            )
            for r in data["runs"]
        ]
        skipped = [(entry["run"], entry["reason"]) for entry in data["skipped"]]
        return cls(Path(data["root"]), runs, data["split"], data["threshold"], data["checkpoint"], skipped)


def read_study(path: str | Path) -> SeedStudy:
    """A ``seed_study.json`` written by :func:`write_study`."""
    return SeedStudy.from_json(json.loads(Path(path).read_text()))


def _number(key: str, value: float) -> str:
    return f"{value:.2f}" if key == "mean_clusters" else f"{value:.3f}"


def checkpoint_accuracies(evaluations: list[Evaluation], step: int) -> dict[str, float]:
    """Split accuracies of the evaluation at ``step`` (empty when the run was not evaluated at that step,
    e.g. a ``last.pt`` written when a run was stopped between two evaluations)."""
    return next((e.accuracy for e in evaluations if e.step == step), {})


def _summary(probe_summary: dict[str, float]) -> dict[str, float]:
    """The probe's summary with the gap between the within- and the cross-group similarity added."""
    gap = probe_summary["similarity_within_groups"] - probe_summary["similarity_across_groups"]
    return probe_summary | {"similarity_gap": gap}


def _condition(name: str) -> str:
    """A run's condition: its path under the study's root without the ``--seedN`` suffix."""
    return re.sub(r"--seed\d+$", "", name)


def seed_study(
    root: str | Path,
    checkpoint: str = "best",
    split: str = "test_ood",
    threshold: float = 0.95,
    n_clusters: int = 2,
    method: str = "average",
    min_distance: float = 0.1,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> SeedStudy:
    """Probe every CTL++ run under ``root`` with a ``checkpoint`` to load. With ``out_dir``, each run's probe
    outputs (:func:`write_outputs`) go to ``out_dir/<run relative to root>``. Runs of other tasks, runs
    without the checkpoint and runs the probe refuses (a corrupt checkpoint, say) are listed in ``skipped``
    with the reason; a directory with no CTL++ run to probe is a :class:`UserError`."""
    if not 0.0 <= threshold <= 1.0:
        raise UserError(f"threshold must be an accuracy in [0, 1], got {threshold}")
    root = Path(root)
    found = find_runs(root)
    study = SeedStudy(root, [], split, threshold, checkpoint)
    candidates = []
    for summary in found:
        name = summary.path.relative_to(root).as_posix() if summary.path != root else summary.path.name
        if summary.task != "ctlpp":
            study.skipped.append((name, f"task {summary.task}, not ctlpp"))
        elif not RunDir(summary.path).checkpoint_path(checkpoint).is_file():
            study.skipped.append((name, f"no {checkpoint} checkpoint"))
        else:
            candidates.append((name, summary, read_evaluations(summary.path)))
    if not candidates:
        raise UserError(
            f"no CTL++ run with a {checkpoint} checkpoint under {root} "
            f"({len(found)} run(s) found; `recombine runs {root}` lists them)"
        )
    evaluated = {name for _, _, evaluations in candidates for e in evaluations for name in e.accuracy}
    if evaluated and split not in evaluated:
        raise UserError(
            f"the runs were never evaluated on {split!r}; {choices_hint(split, sorted(evaluated))}"
        )
    terminal = sys.stderr.isatty()
    bar = tqdm(candidates, desc="probing runs", disable=not (progress and terminal), leave=False)
    for index, (name, summary, evaluations) in enumerate(bar, start=1):
        if progress and not terminal:  # a log file of a long study: one line per run
            print(f"probing {index}/{len(candidates)}: {name}", file=sys.stderr, flush=True)
        try:
            result = representation_compatibility(summary.path, checkpoint, n_clusters, method, min_distance)
        except UserError as error:  # e.g. a corrupt checkpoint: the other runs are still worth probing
            study.skipped.append((name, str(error)))
            continue
        if out_dir is not None:
            write_outputs(result, Path(out_dir) / name)
        seed = summary.config.get("seed")
        step = int(result.notes["step"])
        study.runs.append(
            StudiedRun(
                name=name,
                condition=_condition(name),
                seed=None if seed is None else int(seed),
                variant=result.notes.get("variant"),
                step=step,
                accuracy=checkpoint_accuracies(evaluations, step),
                summary=_summary(result.summary()),
            )
        )
    return study


def short_condition_names(conditions: list[str]) -> dict[str, str]:
    """Each condition less the prefix all share, cut back to the last ``/`` or ``--`` so that no name is split
    (``runs/BiLSTM--fn12-sym5``, ``runs/BiLSTM--fn16-sym5`` -> ``fn12-sym5``, ``fn16-sym5``)."""
    if len(conditions) < 2:
        return {c: c for c in conditions}
    common = os.path.commonprefix(conditions)
    cut = max(common.rfind("/") + 1, common.rfind("--") + 2 if "--" in common else 0)
    return {c: c[cut:] for c in conditions}


def save_study_figure(study: SeedStudy, path: str | Path) -> Path:
    """Two panels, one point per evaluated run: its OOD accuracy against the mean cross-group cosine
    similarity of a symbol's representations (left) and against the within- minus cross-group gap (right);
    the success threshold dashed. Up to :data:`MAX_LEGEND_CONDITIONS` conditions get a colour each and the
    points their seed (``s1``); beyond that every point is labelled with its condition
    (:func:`short_condition_names`) and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in study.runs if study.split in r.accuracy]
    conditions = sorted({r.condition for r in evaluated})
    coloured = len(conditions) <= MAX_LEGEND_CONDITIONS
    short = short_condition_names(conditions)
    colours = {c: plt.get_cmap("tab10")(i % 10) if coloured else "tab:blue" for i, c in enumerate(conditions)}
    fig, axes = plt.subplots(1, 2, figsize=(11 if coloured else 10, 4.2), sharey=True)
    for ax, key in zip(axes, ("similarity_across_groups", "similarity_gap"), strict=True):
        for condition in conditions:
            members = [r for r in evaluated if r.condition == condition]
            xs = [r.summary[key] for r in members]
            ys = [r.accuracy[study.split] for r in members]
            ax.scatter(xs, ys, color=colours[condition], label=condition, s=30)
            for run, x, y in zip(members, xs, ys, strict=True):
                seed = "" if run.seed is None else f"s{run.seed}"
                text = seed if coloured else f"{short[condition]} {seed}".strip()
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.axhline(study.threshold, color="grey", linestyle="--", linewidth=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_xlabel("cosine similarity across groups (mean over symbols)")
    axes[1].set_xlabel("within- minus cross-group cosine similarity")
    axes[0].set_ylabel(f"{study.split} accuracy ({study.checkpoint} checkpoint)")
    axes[0].set_ylim(0, 1.05)
    if coloured and conditions:
        axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    title = "Representation compatibility and systematic generalisation, one point per run"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_study(study: SeedStudy, out_dir: str | Path) -> list[Path]:
    """``seed_study.md`` (the table), ``seed_study.json`` and ``seed_study.png`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = out / "seed_study.md"
    table.write_text(study.table() + "\n")
    data = out / "seed_study.json"
    data.write_text(json.dumps(study.to_json(), indent=1))
    return [table, data, save_study_figure(study, out / "seed_study.png")]
