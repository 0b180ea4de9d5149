"""Model selection rules compared on the stored evaluations of a grid of runs (thesis 4.2.2).

Every run of a grid reproduction logs, at each evaluation, the accuracy and loss of every split
(``metrics.jsonl``). This module replays different selection rules on that log and reports the
generalization accuracy (``test_ood``) of the checkpoint each rule would have picked:

* ``valid_ood accuracy``: the best accuracy on the OOD validation split (what recombine's trainer does);
* ``valid_ood accuracy, ties by loss`` / ``valid_ood accuracy, last of ties``: the same best accuracy, but
  among the evaluations that reach it the lowest OOD validation loss / the latest one. Models that fit the
  OOD validation split reach its maximum (often 1.000) several times, and the earliest of them need not be
  the best on the test split (ndr-depth, 14 layers, released initialisation, seed 1: test_ood 0.64 at the
  first 1.000, up to 0.84 at later ones);
* ``valid_iid accuracy`` / ``valid_iid loss``: the best IID validation accuracy / lowest IID loss over the
  whole run (the common practice the thesis argues against);
* ``early stop (valid_iid accuracy | loss)``: early stopping on the IID split with a patience of
  ``patience`` evaluations (Kim and Linzen 2020, as replayed in thesis Fig. 4.1): training stops after
  ``patience`` evaluations without a strict improvement, and the best checkpoint up to then is kept;
* ``last``: the final checkpoint; ``best test_ood`` is the oracle (an upper bound no rule may use).

Ties go to the earliest evaluation, as in the trainer, except in the two tie rules. The thesis's
claims (4.2.2): IID validation accuracy is ~1.0 for every model while generalization varies, so it
cannot rank models; early stopping on the IID split can stop long before generalization peaks
(Fig. 4.1); and lower IID loss need not mean higher accuracy (Fig. 4.2), so selection should use
accuracy, not loss.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recombine.errors import UserError
from recombine.runs.store import RunDir


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of one run: split -> accuracy, split -> loss."""

    step: int
    accuracy: dict[str, float]
    loss: dict[str, float]


def read_evaluations(run_dir: Path) -> list[Evaluation]:
    """The ``kind == "eval"`` records of a run's ``metrics.jsonl``, in step order (a line torn by a kill
    ends the log, as on resume)."""
    evaluations = []
    for record in RunDir(run_dir).read_metrics():
        if record.get("kind") != "eval":
            continue
        splits = record["splits"]
        evaluations.append(
            Evaluation(
                step=int(record["step"]),
                accuracy={name: float(s["accuracy"]) for name, s in splits.items()},
                loss={name: float(s["loss"]) for name, s in splits.items()},
            )
        )
    return sorted(evaluations, key=lambda e: e.step)


def best_index(values: Sequence[float], higher_is_better: bool) -> int:
    """Index of the best value; the earliest on ties."""
    sign = 1.0 if higher_is_better else -1.0
    best = 0
    for i, value in enumerate(values):
        if sign * value > sign * values[best]:
            best = i
    return best


def early_stopping_index(values: Sequence[float], higher_is_better: bool, patience: int) -> tuple[int, int]:
    """(picked index, index where training stops): stop after ``patience`` evaluations in a row without a
    strict improvement of the best value so far; pick the best evaluation up to the stop."""
    if patience < 1:
        raise UserError(f"patience must be >= 1, got {patience}")
    sign = 1.0 if higher_is_better else -1.0
    best, since_best = 0, 0
    for i in range(1, len(values)):
        if sign * values[i] > sign * values[best]:
            best, since_best = i, 0
        else:
            since_best += 1
            if since_best >= patience:
                return best, i
    return best, len(values) - 1


def best_index_among_ties(values: Sequence[float], tie_break: Sequence[float] | None) -> int:
    """Index of the highest value; among the evaluations that reach it, the lowest ``tie_break`` value
    (earliest on a further tie), or with ``tie_break=None`` the latest of them."""
    top = max((value for value in values if not math.isnan(value)), default=math.nan)
    tied = [i for i, value in enumerate(values) if value == top]
    if not tied:  # every value NaN: as best_index, the first
        return 0
    if tie_break is None:
        return tied[-1]
    return min(tied, key=lambda i: (math.isnan(tie_break[i]), tie_break[i], i))  # a NaN loss never wins


Rule = Callable[[list[Evaluation]], int]


def selection_rules(iid_split: str, ood_split: str, test_split: str, patience: int) -> dict[str, Rule]:
    """Rule name -> function picking an evaluation index from a run's evaluations."""

    def accuracies(split: str) -> Callable[[list[Evaluation]], list[float]]:
        return lambda evals: [e.accuracy[split] for e in evals]

    def losses(split: str) -> Callable[[list[Evaluation]], list[float]]:
        return lambda evals: [e.loss[split] for e in evals]

    iid_acc, iid_loss = accuracies(iid_split), losses(iid_split)
    return {
        f"{ood_split} accuracy": lambda evals: best_index(accuracies(ood_split)(evals), True),
        f"{ood_split} accuracy, ties by loss": lambda evals: best_index_among_ties(
            accuracies(ood_split)(evals), losses(ood_split)(evals)
        ),
        f"{ood_split} accuracy, last of ties": lambda evals: best_index_among_ties(
            accuracies(ood_split)(evals), None
        ),
        f"{iid_split} accuracy": lambda evals: best_index(iid_acc(evals), True),
        f"{iid_split} loss": lambda evals: best_index(iid_loss(evals), False),
        f"early stop ({iid_split} accuracy)": lambda evals: early_stopping_index(
            iid_acc(evals), True, patience
        )[0],
        f"early stop ({iid_split} loss)": lambda evals: early_stopping_index(
            iid_loss(evals), False, patience
        )[0],
        "last": lambda evals: len(evals) - 1,
        f"best {test_split} (oracle)": lambda evals: best_index(accuracies(test_split)(evals), True),
    }


@dataclass
class RunSelection:
    """The picks of every rule on one run."""

    variant: str
    column: str
    seed: int
    run: str
    final_iid_accuracy: float
    picks: dict[str, tuple[int, float]]  # rule -> (step, test accuracy at that step)
    evaluations: list[Evaluation]


def analyse_grid(
    grid_dir: Path,
    iid_split: str = "valid_iid",
    ood_split: str = "valid_ood",
    test_split: str = "test_ood",
    patience: int = 5,
    entries: list[dict[str, Any]] | None = None,
) -> list[RunSelection]:
    """Replay the selection rules on the runs of a grid directory that have evaluations (runs without any
    are skipped): ``entries`` (manifest entries: variant, column, seed, run), by default every run of its
    ``manifest.json``."""
    if entries is None:
        manifest_path = grid_dir / "manifest.json"
        if not manifest_path.exists():
            raise UserError(f"{grid_dir} has no manifest.json: not a grid reproduction or sweep directory")
        entries = json.loads(manifest_path.read_text())["runs"]
    rules = selection_rules(iid_split, ood_split, test_split, patience)
    selections = []
    for entry in entries:
        evaluations = read_evaluations(grid_dir / entry["run"])
        if not evaluations:
            continue
        missing = {iid_split, ood_split, test_split} - set(evaluations[0].accuracy)
        if missing:
            metrics = grid_dir / entry["run"] / "metrics.jsonl"
            raise UserError(f"{metrics} has no evaluations of split(s) {', '.join(sorted(missing))}")
        picks = {}
        for name, rule in rules.items():
            index = rule(evaluations)
            picks[name] = (evaluations[index].step, evaluations[index].accuracy[test_split])
        selections.append(
            RunSelection(
                entry["variant"],
                entry["column"],
                int(entry["seed"]),
                entry["run"],
                evaluations[-1].accuracy[iid_split],
                picks,
                evaluations,
            )  # fmt: skip
        )
    return selections


def summary_table(selections: list[RunSelection], test_split: str = "test_ood") -> str:
    """Markdown: per row (variant, column), the final IID accuracy and the mean ± std test accuracy of the
    checkpoint each rule picks, over seeds."""
    if not selections:
        return "(no run has evaluations yet)\n"
    rules = list(selections[0].picks)
    header = ["row", "seeds", "final IID acc", *[f"{test_split} by {rule}" for rule in rules]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    groups: dict[tuple[str, str], list[RunSelection]] = {}
    for selection in selections:
        groups.setdefault((selection.variant, selection.column), []).append(selection)
    for (variant, column), runs in groups.items():
        cells = [f"{variant}, {column}", str(len(runs)), _mean_std([r.final_iid_accuracy for r in runs])]
        cells += [_mean_std([r.picks[rule][1] for r in runs]) for rule in rules]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def per_run_table(selections: list[RunSelection]) -> str:
    """Markdown: every run's pick per rule as ``accuracy @ step``."""
    if not selections:
        return ""
    rules = list(selections[0].picks)
    header = ["run", "final IID acc", *rules]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in selections:
        cells = [s.run.removeprefix("runs/"), f"{s.final_iid_accuracy:.3f}"]
        cells += [f"{acc:.3f} @ {step}" for step, acc in (s.picks[rule] for rule in rules)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mean_std(values: list[float]) -> str:
    """Mean ± sample std (ddof=1, as in the grid reports; 0 for one seed)."""
    array = np.asarray(values, dtype=float)
    std = array.std(ddof=1) if len(array) > 1 else 0.0
    return f"{array.mean():.3f} ± {std:.3f}"


def selection_figure(
    selections: list[RunSelection], path: Path, iid_split: str, test_split: str, rules: Sequence[str]
) -> Path:
    """One panel per run: IID validation and test accuracy over training, with each rule's pick marked
    (thesis Fig. 4.1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(selections)
    columns = min(3, n)
    rows = (n + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    markers = "ovs^Dx*P"
    for ax, s in zip(axes.flat, selections, strict=False):
        steps = [e.step for e in s.evaluations]
        ax.plot(steps, [e.accuracy[iid_split] for e in s.evaluations], color="0.5", label=iid_split)
        ax.plot(steps, [e.accuracy[test_split] for e in s.evaluations], color="C0", label=test_split)
        for k, rule in enumerate(rules):
            step, accuracy = s.picks[rule]
            ax.plot([step], [accuracy], markers[k % len(markers)], color=f"C{k + 1}", label=rule)
        ax.set_title(s.run.removeprefix("runs/"), fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=7)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def selection_results(selections: list[RunSelection]) -> list[dict[str, Any]]:
    """JSON form: one record per run with every rule's (step, accuracy)."""
    return [
        {
            "variant": s.variant,
            "column": s.column,
            "seed": s.seed,
            "run": s.run,
            "final_iid_accuracy": s.final_iid_accuracy,
            "picks": {rule: {"step": step, "accuracy": acc} for rule, (step, acc) in s.picks.items()},
        }
        for s in selections
    ]
