"""ALGO over an architecture grid: BLOCK Tab. 7 (per family and model size), Tab. 2 (five best per
family) and Fig. 4 (accuracy and fraction of trials at 100% per iteration count); BLOCK 5.3, A.2.3.

Every architecture of a :class:`~recombine.experiments.block_architecture_grid.BlockArchitectureGrid`
is trained with every seed by :func:`recombine.experiments.smfr_algo.train_algo` (shared settings in
``base``: Adam lr 3e-4, clipping 0.1, saturation regulariser, selection by the 4-iteration accuracy).
The aggregation follows the paper:

* **Tab. 7** "Effect of model size on OOD performance, as averages over all models": OOD_even and
  OOD_odd averaged over every trial of a family within each size bucket (HIGH >= 200,000 parameters,
  LOW < 50,000, MID the rest; BLOCK A.2.1), the paper's number beside ours.
* **Tab. 2** "the five best models of each type. The accuracy at four iterations was used as the
  validation criterion": the ``best_per_family`` trials with the highest 4-iteration accuracy,
  OOD_even and OOD_odd as mean ± std.
* **Fig. 4** (A.2.3): per family and iteration count the mean accuracy (left) and the fraction of trials
  at 100% accuracy (right) over all trials, in the report and in ``accuracy_by_iterations.png``.

Resume: every finished trial is appended to ``trials.jsonl`` (:class:`TrialLog`) and ``results.json``
is rewritten; a re-run into the same directory trains only the trials not yet there.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from recombine.errors import UserError
from recombine.experiments.block_architecture_grid import (
    FAMILY_NAMES,
    SIZE_BUCKETS,
    TRIALS_FILE,
    BlockArchitectureGrid,
    BucketMean,
    GridValue,
    TrialLog,
    aggregate_by_family_and_bucket,
    format_cell,
    size_bucket,
    trial_key,
    write_results_atomically,
)
from recombine.experiments.progress import trial_done
from recombine.experiments.smfr_algo import PAPER_TABLE_2, AlgoResult, SMFRAlgoConfig, train_algo
from recombine.runs.aggregate import SeedSummary
from recombine.tasks.algo import VALIDATION_ITERATIONS

#: BLOCK Tab. 7: family -> size bucket -> (OOD_even, OOD_odd), averages over all models of the grid.
PAPER_TABLE_7: dict[str, dict[str, tuple[float, float]]] = {
    "fnn": {"high": (1.000, 0.241), "mid": (0.989, 0.249), "low": (0.891, 0.164)},
    "transformer": {"high": (0.967, 0.159), "mid": (0.801, 0.081), "low": (0.675, 0.393)},
    "smfr": {"high": (0.954, 0.900), "mid": (0.966, 0.951), "low": (0.812, 0.229)},
}
FIGURE_FILE = "accuracy_by_iterations.png"


def paper_family(family: str) -> str:
    """The paper's row for one of our families: both SMFR routings are the paper's "SMFR"."""
    return "smfr" if family.startswith("smfr") else family


@dataclass
class SMFRAlgoGridConfig:
    """Every architecture of ``grid`` x every seed, with the shared training settings of ``base``."""

    grid: BlockArchitectureGrid = field(default_factory=BlockArchitectureGrid.algo_cpu_subset)
    seeds: list[int] = field(default_factory=lambda: [0])
    base: SMFRAlgoConfig = field(default_factory=SMFRAlgoConfig)  # model, model_config, seed are replaced
    best_per_family: int = 5  # BLOCK Tab. 2: "the five best models of each type"
    success_threshold: float = 1.0  # BLOCK Fig. 4 right: "achieved 100% accuracy"

    def __post_init__(self) -> None:
        if not self.seeds:
            raise UserError("need at least one seed")
        if self.best_per_family < 1:
            raise UserError("best_per_family must be >= 1")
        if not self.grid.expand():
            raise UserError("the grid is empty: every family has an empty list")


@dataclass
class AlgoGridTrial:
    label: str
    family: str
    model: str
    model_config: dict[str, Any]
    seed: int
    result: AlgoResult

    @property
    def bucket(self) -> str:
        return size_bucket(self.result.n_parameters)

    @property
    def validation(self) -> float:
        """The model-selection accuracy of Tab. 2: 4 iterations (the last evaluated if 4 is not)."""
        accuracy = self.result.accuracy
        return accuracy.get(VALIDATION_ITERATIONS, accuracy[max(accuracy)])

    def to_record(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "family": self.family,
            "model": self.model,
            "model_config": self.model_config,
            "seed": self.seed,
            "bucket": self.bucket,
            **self.result.as_dict(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AlgoGridTrial:
        def by_iterations(accuracy: dict[str, float]) -> dict[int, float]:
            return {int(k): float(v) for k, v in accuracy.items()}

        history = [{**h, "accuracy": by_iterations(h["accuracy"])} for h in record["history"]]
        result = AlgoResult(
            accuracy=by_iterations(record["accuracy"]),
            ood_even=record["ood_even"],
            ood_odd=record["ood_odd"],
            best_step=record["best_step"],
            final_accuracy=by_iterations(record["final_accuracy"]),
            n_parameters=record["n_parameters"],
            seconds=record["seconds"],
            history=history,
        )
        return cls(
            record["label"], record["family"], record["model"], record["model_config"], record["seed"], result
        )


@dataclass
class AlgoGridTables:
    """Tab. 7 (family -> bucket -> metric -> mean and n), Tab. 2 (family -> metric -> summary over the
    best trials), Fig. 4 (family -> iterations -> mean accuracy, fraction at 100%)."""

    table_7: dict[str, dict[str, dict[str, BucketMean]]]
    table_2: dict[str, dict[str, SeedSummary]]
    table_2_labels: dict[str, list[str]]  # family -> the selected trials, best first
    mean_accuracy: dict[str, dict[int, float]]
    fraction_perfect: dict[str, dict[int, float]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_7": {
                f: {b: {m: asdict(c) for m, c in cells.items()} for b, cells in buckets.items()}
                for f, buckets in self.table_7.items()
            },
            "table_2": {
                f: {m: s.to_dict() for m, s in metrics.items()} for f, metrics in self.table_2.items()
            },
            "table_2_labels": self.table_2_labels,
            "mean_accuracy": self.mean_accuracy,
            "fraction_perfect": self.fraction_perfect,
        }


def families_of(trials: list[AlgoGridTrial]) -> list[str]:
    """The families present, in the order of FAMILY_NAMES (Tab. 7: FNN, Transformer, SMFR)."""
    present = {t.family for t in trials}
    return [f for f in FAMILY_NAMES if f in present] + sorted(present - set(FAMILY_NAMES))


def algo_grid_tables(trials: list[AlgoGridTrial], best_per_family: int, threshold: float) -> AlgoGridTables:
    """Aggregate the trials as BLOCK Tab. 7, Tab. 2 and Fig. 4 do (module docstring)."""
    table_7: dict[str, dict[str, dict[str, BucketMean]]] = {}
    for metric in ("ood_even", "ood_odd"):
        cells = aggregate_by_family_and_bucket(
            GridValue(t.family, t.result.n_parameters, getattr(t.result, metric)) for t in trials
        )
        for (family, bucket), cell in cells.items():
            table_7.setdefault(family, {}).setdefault(bucket, {})[metric] = cell
    table_2: dict[str, dict[str, SeedSummary]] = {}
    labels: dict[str, list[str]] = {}
    mean_accuracy: dict[str, dict[int, float]] = {}
    fraction_perfect: dict[str, dict[int, float]] = {}
    for family in families_of(trials):
        mine = [t for t in trials if t.family == family]
        best = sorted(mine, key=lambda t: t.validation, reverse=True)[:best_per_family]  # stable on ties
        labels[family] = [f"{t.label} seed {t.seed}" for t in best]
        table_2[family] = {
            metric: SeedSummary.of([getattr(t.result, metric) for t in best], threshold)
            for metric in ("ood_even", "ood_odd")
        }
        iterations = sorted(set.intersection(*(set(t.result.accuracy) for t in mine)))
        mean_accuracy[family] = {k: statistics.fmean(t.result.accuracy[k] for t in mine) for k in iterations}
        fraction_perfect[family] = {
            k: sum(t.result.accuracy[k] >= threshold for t in mine) / len(mine) for k in iterations
        }
    return AlgoGridTables(table_7, table_2, labels, mean_accuracy, fraction_perfect)


@dataclass
class AlgoGridResult:
    trials: list[AlgoGridTrial]
    tables: AlgoGridTables
    trained: list[str]  # "label seed s" of the trials trained by this call (not taken from trials.jsonl)
    report: Path
    results: Path
    figure: Path


def _write_results(
    path: Path, config: SMFRAlgoGridConfig, trials: list[AlgoGridTrial], planned: int
) -> AlgoGridTables:
    tables = algo_grid_tables(trials, config.best_per_family, config.success_threshold)
    data = {
        "config": asdict(config),
        "complete": len(trials) == planned,
        "n_trials": len(trials),
        "n_trials_planned": planned,
        "paper_table_7": {
            f: {b: {"ood_even": v[0], "ood_odd": v[1]} for b, v in buckets.items()}
            for f, buckets in PAPER_TABLE_7.items()
        },
        "paper_table_2": {k: {"ood_even": v[0], "ood_odd": v[1]} for k, v in PAPER_TABLE_2.items()},
        **tables.to_dict(),
        "trials": [t.to_record() for t in trials],
    }
    write_results_atomically(path, data)
    return tables


def run_algo_grid(
    out_dir: str | Path,
    config: SMFRAlgoGridConfig | None = None,
    on_trial: Callable[[AlgoGridTrial], None] | None = None,
) -> AlgoGridResult:
    """Train every grid architecture with every seed (skipping those already in ``out_dir/trials.jsonl``);
    write ``results.json`` after every trial, then ``report.md`` and ``accuracy_by_iterations.png``."""
    config = config or SMFRAlgoGridConfig()
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    architectures = config.grid.expand()
    log = TrialLog(out / TRIALS_FILE)
    finished = log.finished()
    planned = len(architectures) * len(config.seeds)
    trials: list[AlgoGridTrial] = []
    trained: list[str] = []
    for architecture in architectures:
        for seed in config.seeds:
            run = replace(
                config.base, model=architecture.model, model_config=dict(architecture.model_config), seed=seed
            )
            key = trial_key(asdict(run))
            name = f"{architecture.label} seed {seed}"
            if key in finished:
                trial = AlgoGridTrial.from_record(finished[key])
                trial.label = architecture.label  # the key holds no label: a renamed grid still resumes
                trials.append(trial)
                trial_done(len(trials), planned, name, trial.result.seconds, "from trials.jsonl")
            else:
                result = train_algo(run)
                trial = AlgoGridTrial(
                    architecture.label,
                    architecture.family,
                    architecture.model,
                    run.model_config,
                    seed,
                    result,
                )
                log.add(key, trial.to_record())
                trials.append(trial)
                trained.append(name)
                headline = f"{trial.result.n_parameters:,} params, OOD_even {result.ood_even:.3f}, "
                headline += f"OOD_odd {result.ood_odd:.3f}"
                trial_done(len(trials), planned, name, result.seconds, headline, run.steps)
                if on_trial is not None:
                    on_trial(trial)
            _write_results(out / "results.json", config, trials, planned)
    tables = algo_grid_tables(trials, config.best_per_family, config.success_threshold)
    figure = save_iterations_figure(tables, out / FIGURE_FILE)
    report = out / "report.md"
    report.write_text(render_algo_grid_report(config, trials, tables, time.perf_counter() - started))
    return AlgoGridResult(trials, tables, trained, report, out / "results.json", figure)


def _paper_pair(values: tuple[float, float] | None) -> list[str]:
    return [f"{values[0]:.3f}", f"{values[1]:.3f}"] if values else ["–", "–"]


def render_algo_grid_report(
    config: SMFRAlgoGridConfig, trials: list[AlgoGridTrial], tables: AlgoGridTables, wall_seconds: float
) -> str:
    base, grid = config.base, config.grid
    families = families_of(trials)
    trained_seconds = sum(t.result.seconds for t in trials)
    lines = [
        "# ALGO over an architecture grid (BLOCK Tab. 7, Tab. 2, Fig. 4; A.2.3)",
        "",
        f"Grid: FNN widths {grid.fnn_widths} x depths {grid.fnn_depths}; SMFR widths {grid.smfr_widths} x "
        f"depths {grid.smfr_depths} x contained-FNN depths {grid.smfr_fnn_depths} x {grid.smfr_routings} "
        f"(depth 0 once per FNN depth); Transformer heads {grid.transformer_heads} x d_ff "
        f"{grid.transformer_dims} x layers {grid.transformer_layers}, d_model {grid.transformer_d_model} "
        f"(encoder only). {len(trials)} trials, seeds {config.seeds}.",
        "",
        f"Training: train {base.task.n_train} examples of {base.task.train_iterations} iterations, "
        f"{base.task.n_eval} test examples per iteration count; {base.steps} steps, batch {base.batch_size}, "
        f"Adam lr {base.lr}, clip {base.grad_clip}, loss {base.loss}, saturation regulariser weight "
        f"{base.saturation_weight}; the evaluation (every {base.eval_every} steps) with the best "
        f"{VALIDATION_ITERATIONS}-iteration accuracy is kept.",
        "",
        "**Scale.** Paper A.2.3: the full grid (15 FNNs, 54 Transformers, 93 SMFRs, trained to convergence, "
        "encoder-decoder Transformers). Ours: the subset above, CPU, the steps above. Size buckets: HIGH >= "
        "200,000 parameters, LOW < 50,000, MID the rest (BLOCK A.2.1).",
        "",
        "## Tab. 7: mean over all trials per family and model size",
        "",
        "Cells: mean (n = trials in the cell); `–, n=0`: no model of ours in that bucket.",
        "",
        "| family | size | OOD_even | OOD_odd | paper OOD_even | paper OOD_odd |",
        "|---|---|---|---|---|---|",
    ]
    for family in families:
        for bucket in SIZE_BUCKETS:
            cells = tables.table_7.get(family, {}).get(bucket, {})
            paper = PAPER_TABLE_7.get(paper_family(family), {}).get(bucket)
            ours = [format_cell(cells.get("ood_even")), format_cell(cells.get("ood_odd"))]
            lines.append(
                f"| {FAMILY_NAMES.get(family, family)} | {bucket} | "
                + " | ".join(ours + _paper_pair(paper))
                + " |"
            )
    lines += [
        "",
        f"## Tab. 2: the {config.best_per_family} best trials per family by "
        f"{VALIDATION_ITERATIONS}-iteration accuracy",
        "",
        "Cells: mean ± std over the selected trials (hits = trials at 1.0).",
        "",
        "| family | n | OOD_even | OOD_odd | paper OOD_even | paper OOD_odd | selected |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in families:
        summary = tables.table_2[family]
        paper = PAPER_TABLE_2.get(paper_family(family))
        paper_cells = (
            [f"{paper[0][0]:.3f} ± {paper[0][1]:.3f}", f"{paper[1][0]:.3f} ± {paper[1][1]:.3f}"]
            if paper
            else ["–", "–"]
        )
        lines.append(
            f"| {FAMILY_NAMES.get(family, family)} | {len(summary['ood_even'].values)} | "
            f"{summary['ood_even'].format()} | {summary['ood_odd'].format()} | "
            + " | ".join(paper_cells)
            + f" | {', '.join(tables.table_2_labels[family])} |"
        )
    iterations = sorted({k for per in tables.mean_accuracy.values() for k in per})
    lines += [
        "",
        "## Fig. 4: accuracy per iteration count over all trials",
        "",
        "Left: mean accuracy; right: fraction of trials at 100% accuracy. Training supervises 2 iterations; "
        "even counts test length generalization, odd ones the atomic rule.",
        "",
        "| family | " + " | ".join(f"mean @{k}" for k in iterations) + " |",
        "|---" * (len(iterations) + 1) + "|",
    ]
    for family in families:
        cells = [f"{tables.mean_accuracy[family].get(k, float('nan')):.3f}" for k in iterations]
        lines.append(f"| {FAMILY_NAMES.get(family, family)} | " + " | ".join(cells) + " |")
    lines += ["", "| family | " + " | ".join(f"at 1.0 @{k}" for k in iterations) + " |"]
    lines.append("|---" * (len(iterations) + 1) + "|")
    for family in families:
        cells = [f"{tables.fraction_perfect[family].get(k, float('nan')):.2f}" for k in iterations]
        lines.append(f"| {FAMILY_NAMES.get(family, family)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"![accuracy by iterations]({FIGURE_FILE})",
        "",
        "## Per architecture",
        "",
        "| architecture | seed | params | size | OOD_even | OOD_odd | acc@4 | best step | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        r = t.result
        lines.append(
            f"| {t.label} | {t.seed} | {r.n_parameters:,} | {t.bucket} | {r.ood_even:.3f} | "
            f"{r.ood_odd:.3f} | {t.validation:.3f} | {r.best_step} | {r.seconds:.0f} |"
        )
    lines += [
        "",
        f"Training time summed over trials {trained_seconds:.0f} s (as recorded, resumed trials included); "
        f"this call {wall_seconds:.0f} s; torch {torch.__version__}.",
        "",
    ]
    return "\n".join(lines)


def save_iterations_figure(tables: AlgoGridTables, path: Path) -> Path:
    """BLOCK Fig. 4: mean accuracy (left) and fraction of trials at 100% (right) per iteration count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for family, per in tables.mean_accuracy.items():
        name = FAMILY_NAMES.get(family, family)
        left.plot(list(per), list(per.values()), marker="o", label=name)
        perfect = tables.fraction_perfect[family]
        right.plot(list(perfect), list(perfect.values()), marker="o", label=name)
    for ax, title in ((left, "mean accuracy"), (right, "fraction of trials at 100%")):
        ax.set_xlabel("iterations")
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    left.set_ylabel("accuracy")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = [
    "PAPER_TABLE_7",
    "AlgoGridResult",
    "AlgoGridTables",
    "AlgoGridTrial",
    "SMFRAlgoGridConfig",
    "algo_grid_tables",
    "run_algo_grid",
]
