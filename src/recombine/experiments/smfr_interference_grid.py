"""Add/mul interference over an architecture grid: BLOCK Tab. 4 (per family and model size) and Tab. 5
(per contained-FNN depth); BLOCK 5.1, A.2.1.

Every architecture of a :class:`~recombine.experiments.block_architecture_grid.BlockArchitectureGrid`
(A.2.1: FNN widths x depths; SMFR stack widths x depths x contained-FNN depths x softmax / Gumbel) runs
the two-stage threshold protocol of :func:`recombine.experiments.smfr_interference.train_interference`
with every seed: one preparation run, the interference stage from the snapshot at each of the five
thresholds, then the preparation-data accuracy (the number of Tab. 1).

* **Tab. 4** "Effects of model size on performance": per threshold and family (FNN, SMFR softmax, SMFR
  Gumbel) the mean preparation-data accuracy within each size bucket (HIGH >= 200,000 parameters,
  LOW < 50,000, MID the rest; A.2.1), the paper's number beside ours.
* **Tab. 5** "Complexity of FNNs within MFNNRs": per threshold and contained-FNN depth the mean over all
  SMFR trials (both routings; the paper does not say which it averaged).
* Tab. 1 over the whole grid (mean ± standard error per threshold and family), with the paper's row.

Resume: every finished trial is appended to ``trials.jsonl`` and ``results.json`` is rewritten; a re-run
into the same directory trains only the trials not yet there.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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
from recombine.experiments.block_digit_training import BlockArchitecture, BlockTrainingConfig
from recombine.experiments.progress import trial_done
from recombine.experiments.smfr_interference import (
    FAMILIES,
    PAPER_TABLE_1,
    THRESHOLDS,
    InterferenceTrial,
    MeanStandardError,
    SMFRInterferenceConfig,
    ThresholdOutcome,
    interference_table,
    train_interference,
)
from recombine.tasks.block_digits import addmul_stages

#: BLOCK Tab. 4: threshold -> family -> size bucket -> mean preparation-data accuracy.
PAPER_TABLE_4: dict[float, dict[str, dict[str, float]]] = {
    0.7: {
        "fnn": {"high": 0.054, "mid": 0.024, "low": 0.035},
        "smfr_softmax": {"high": 0.204, "mid": 0.146, "low": 0.107},
        "smfr_gumbel": {"high": 0.146, "mid": 0.094, "low": 0.049},
    },
    0.8: {
        "fnn": {"high": 0.089, "mid": 0.053, "low": 0.052},
        "smfr_softmax": {"high": 0.186, "mid": 0.205, "low": 0.116},
        "smfr_gumbel": {"high": 0.118, "mid": 0.138, "low": 0.063},
    },
    0.9: {
        "fnn": {"high": 0.179, "mid": 0.134, "low": 0.098},
        "smfr_softmax": {"high": 0.300, "mid": 0.274, "low": 0.198},
        "smfr_gumbel": {"high": 0.266, "mid": 0.232, "low": 0.109},
    },
    0.95: {
        "fnn": {"high": 0.325, "mid": 0.223, "low": 0.150},
        "smfr_softmax": {"high": 0.346, "mid": 0.349, "low": 0.245},
        "smfr_gumbel": {"high": 0.274, "mid": 0.333, "low": 0.172},
    },
    1.0: {
        "fnn": {"high": 0.468, "mid": 0.413, "low": 0.259},
        "smfr_softmax": {"high": 0.450, "mid": 0.448, "low": 0.382},
        "smfr_gumbel": {"high": 0.408, "mid": 0.415, "low": 0.327},
    },
}
#: BLOCK Tab. 5: threshold -> hidden layers of the contained FNNs -> mean preparation-data accuracy.
PAPER_TABLE_5: dict[float, dict[int, float]] = {
    0.7: {1: 0.099, 2: 0.134, 3: 0.192},
    0.8: {1: 0.125, 2: 0.216, 3: 0.210},
    0.9: {1: 0.194, 2: 0.299, 3: 0.284},
    0.95: {1: 0.275, 2: 0.365, 3: 0.338},
    1.0: {1: 0.365, 2: 0.489, 3: 0.449},
}


@dataclass
class SMFRInterferenceGridConfig:
    """Every architecture of ``grid`` x every seed through the two-stage protocol; the other fields are
    those of :class:`~recombine.experiments.smfr_interference.SMFRInterferenceConfig`."""

    grid: BlockArchitectureGrid = field(default_factory=BlockArchitectureGrid.interference_cpu_subset)
    seeds: list[int] = field(default_factory=lambda: [0])
    thresholds: list[float] = field(default_factory=lambda: list(THRESHOLDS))
    interference_steps: int = 2000  # BLOCK Tab. 1: "2000 steps after switching"
    max_preparation_steps: int = 8000
    check_every: int = 5
    training: BlockTrainingConfig = field(default_factory=BlockTrainingConfig)

    def __post_init__(self) -> None:
        architectures = self.grid.expand()
        if not architectures:
            raise UserError("the grid is empty: every family has an empty list")
        if any(a.model == "transformer" for a in architectures):
            raise UserError(
                "the add/mul grid (BLOCK A.2.1) has no Transformers: set grid.transformer_heads=[]"
            )
        self.protocol(architectures)  # the protocol's own checks, now rather than after hours

    def protocol(self, architectures: list[BlockArchitecture]) -> SMFRInterferenceConfig:
        """The config of :func:`~recombine.experiments.smfr_interference.train_interference`."""
        return SMFRInterferenceConfig(
            architectures=architectures,
            seeds=list(self.seeds),
            thresholds=list(self.thresholds),
            interference_steps=self.interference_steps,
            max_preparation_steps=self.max_preparation_steps,
            check_every=self.check_every,
            training=self.training,
        )

    def trial_settings(self, architecture: BlockArchitecture, seed: int) -> dict[str, Any]:
        """Everything a trial's result depends on (its :func:`trial_key`)."""
        return {
            "model": architecture.model,
            "model_config": architecture.model_config,
            "seed": seed,
            "thresholds": sorted(self.thresholds),
            "interference_steps": self.interference_steps,
            "max_preparation_steps": self.max_preparation_steps,
            "check_every": self.check_every,
            "training": asdict(self.training),
        }


@dataclass
class InterferenceGridTrial:
    """One trial of the grid: the protocol's result plus the architecture it ran."""

    model: str
    model_config: dict[str, Any]
    trial: InterferenceTrial

    @property
    def bucket(self) -> str:
        return size_bucket(self.trial.n_parameters)

    def to_record(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_config": self.model_config,
            "bucket": self.bucket,
            **asdict(self.trial),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> InterferenceGridTrial:
        trial = InterferenceTrial(
            label=record["label"],
            family=record["family"],
            seed=record["seed"],
            n_parameters=record["n_parameters"],
            outcomes=[ThresholdOutcome(**o) for o in record["outcomes"]],
            unreached=[float(t) for t in record["unreached"]],
            preparation_history=[(int(s), float(a)) for s, a in record["preparation_history"]],
            seconds=record["seconds"],
        )
        return cls(record["model"], record["model_config"], trial)


@dataclass
class InterferenceGridTables:
    """Tab. 4 (threshold -> family -> bucket -> mean, n), Tab. 5 (threshold -> contained-FNN depth ->
    mean, n over SMFR trials), Tab. 1 over the grid (threshold -> family -> mean ± standard error)."""

    table_4: dict[float, dict[str, dict[str, BucketMean]]]
    table_5: dict[float, dict[int, BucketMean]]
    table_1: dict[float, dict[str, MeanStandardError | None]]
    unreached: dict[float, dict[str, int]]  # threshold -> family -> trials that never reached it

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_4": {
                str(t): {f: {b: asdict(c) for b, c in buckets.items()} for f, buckets in row.items()}
                for t, row in self.table_4.items()
            },
            "table_5": {
                str(t): {str(d): asdict(c) for d, c in row.items()} for t, row in self.table_5.items()
            },
            "table_1": {
                str(t): {f: (asdict(c) if c else None) for f, c in row.items()}
                for t, row in self.table_1.items()
            },
            "unreached": {str(t): row for t, row in self.unreached.items()},
        }


def interference_grid_tables(
    trials: list[InterferenceGridTrial], thresholds: list[float]
) -> InterferenceGridTables:
    """Aggregate the trials as BLOCK Tab. 4, Tab. 5 and Tab. 1 do (module docstring)."""
    ordered = sorted(thresholds)
    cells = aggregate_by_family_and_bucket(
        GridValue(g.trial.family, g.trial.n_parameters, o.preparation_only_after, group=o.threshold)
        for g in trials
        for o in g.trial.outcomes
    )
    table_4: dict[float, dict[str, dict[str, BucketMean]]] = {t: {} for t in ordered}
    for (family, bucket, threshold), cell in cells.items():
        table_4.setdefault(threshold, {}).setdefault(family, {})[bucket] = cell
    table_5: dict[float, dict[int, BucketMean]] = {t: {} for t in ordered}
    by_depth: dict[tuple[float, int], list[float]] = {}
    for g in trials:
        if g.model == "smfr":
            depth = int(g.model_config.get("fnn_depth", 1))
            for o in g.trial.outcomes:
                by_depth.setdefault((o.threshold, depth), []).append(o.preparation_only_after)
    for (threshold, depth), values in sorted(by_depth.items()):
        table_5.setdefault(threshold, {})[depth] = BucketMean(statistics.fmean(values), len(values))
    families = list(dict.fromkeys([*FAMILIES, *(g.trial.family for g in trials)]))
    unreached = {
        t: {f: sum(t in g.trial.unreached for g in trials if g.trial.family == f) for f in families}
        for t in ordered
    }
    table_1 = interference_table([g.trial for g in trials], ordered)
    return InterferenceGridTables(table_4, table_5, table_1, unreached)


@dataclass
class InterferenceGridResult:
    trials: list[InterferenceGridTrial]
    tables: InterferenceGridTables
    trained: list[str]  # "label seed s" of the trials trained by this call (not taken from trials.jsonl)
    report: Path
    results: Path


def _write_results(
    path: Path, config: SMFRInterferenceGridConfig, trials: list[InterferenceGridTrial], planned: int
) -> InterferenceGridTables:
    tables = interference_grid_tables(trials, config.thresholds)
    data = {
        "config": asdict(config),
        "complete": len(trials) == planned,
        "n_trials": len(trials),
        "n_trials_planned": planned,
        "paper_table_4": {str(t): row for t, row in PAPER_TABLE_4.items()},
        "paper_table_5": {str(t): {str(d): v for d, v in row.items()} for t, row in PAPER_TABLE_5.items()},
        "paper_table_1": {str(t): row for t, row in PAPER_TABLE_1.items()},
        **tables.to_dict(),
        "trials": [g.to_record() for g in trials],
    }
    write_results_atomically(path, data)
    return tables


def run_interference_grid(
    out_dir: str | Path,
    config: SMFRInterferenceGridConfig | None = None,
    on_trial: Callable[[InterferenceGridTrial], None] | None = None,
) -> InterferenceGridResult:
    """Every grid architecture x every seed (skipping those already in ``out_dir/trials.jsonl``);
    ``results.json`` after every trial, ``report.md`` at the end."""
    config = config or SMFRInterferenceGridConfig()
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    architectures = config.grid.expand()
    protocol = config.protocol(architectures)
    stages = addmul_stages()
    log = TrialLog(out / TRIALS_FILE)
    finished = log.finished()
    planned = len(architectures) * len(config.seeds)
    trials: list[InterferenceGridTrial] = []
    trained: list[str] = []
    for architecture in architectures:
        for seed in config.seeds:
            key = trial_key(config.trial_settings(architecture, seed))
            name = f"{architecture.label} seed {seed}"
            if key in finished:
                grid_trial = InterferenceGridTrial.from_record(finished[key])
                grid_trial.trial.label = architecture.label  # the key holds no label
                trials.append(grid_trial)
                trial_done(len(trials), planned, name, grid_trial.trial.seconds, "from trials.jsonl")
            else:
                trial = train_interference(architecture, seed, protocol, stages)
                grid_trial = InterferenceGridTrial(architecture.model, dict(architecture.model_config), trial)
                log.add(key, grid_trial.to_record())
                trials.append(grid_trial)
                trained.append(name)
                after = {o.threshold: o.preparation_only_after for o in trial.outcomes}
                headline = f"{trial.n_parameters:,} params, preparation-data accuracy " + ", ".join(
                    f"{t}: {after[t]:.2f}" if t in after else f"{t}: not reached"
                    for t in sorted(config.thresholds)
                )
                trial_done(len(trials), planned, name, trial.seconds, headline)
                if on_trial is not None:
                    on_trial(grid_trial)
            _write_results(out / "results.json", config, trials, planned)
    tables = interference_grid_tables(trials, config.thresholds)
    report = out / "report.md"
    report.write_text(render_interference_grid_report(config, trials, tables, time.perf_counter() - started))
    return InterferenceGridResult(trials, tables, trained, report, out / "results.json")


def render_interference_grid_report(
    config: SMFRInterferenceGridConfig,
    trials: list[InterferenceGridTrial],
    tables: InterferenceGridTables,
    wall_seconds: float,
) -> str:
    grid, t = config.grid, config.training
    present = {g.trial.family for g in trials}
    families = [f for f in FAMILIES if f in present] + sorted(present - set(FAMILIES))
    thresholds = sorted(config.thresholds)
    lines = [
        "# Add/mul interference over an architecture grid (BLOCK Tab. 4, Tab. 5; A.2.1)",
        "",
        f"Grid: FNN widths {grid.fnn_widths} x depths {grid.fnn_depths}; SMFR widths {grid.smfr_widths} x "
        f"depths {grid.smfr_depths} x contained-FNN depths {grid.smfr_fnn_depths} x {grid.smfr_routings}. "
        f"{len(trials)} trials, seeds {config.seeds}.",
        "",
        "Protocol (BLOCK 5.1): preparation stage (add on all pairs, mul on limited pairs) until the exact "
        f"accuracy on the 150 preparation inputs (checked every {config.check_every} steps) reaches the "
        f"threshold, then {config.interference_steps} steps of the interference stage (add limited, mul all) "
        f"from that snapshot; the number is the preparation-data accuracy (add on the 50 open pairs). "
        f"Batch {t.batch_size}, Adam lr {t.lr}, clip {t.grad_clip}, loss {t.loss}, at most "
        f"{config.max_preparation_steps} preparation steps.",
        "",
        "**Scale.** Paper A.2.1: the full grid (9 FNNs, 126 SMFRs) at five thresholds. Ours: the subset "
        "above. Size buckets: HIGH >= 200,000 parameters, LOW < 50,000, MID the rest (BLOCK A.2.1).",
        "",
        "## Tab. 4: mean preparation-data accuracy per family and model size",
        "",
        "Cells: our mean (n = trials in the cell that reached the threshold; `k not reached`: trials of the "
        "cell that never reached it) and the paper's number; `–, n=0` alone: no model of ours there.",
        "",
        "| threshold | family | HIGH | paper HIGH | MID | paper MID | LOW | paper LOW |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for threshold in thresholds:
        for family in families:
            ours = tables.table_4.get(threshold, {}).get(family, {})
            paper = PAPER_TABLE_4.get(threshold, {}).get(family, {})
            cells = []
            for bucket in SIZE_BUCKETS:
                mine = [g for g in trials if g.trial.family == family and g.bucket == bucket]
                missing = sum(threshold in g.trial.unreached for g in mine)
                cells.append(format_cell(ours.get(bucket)) + (f", {missing} not reached" if missing else ""))
                cells.append(f"{paper[bucket]:.3f}" if bucket in paper else "–")
            lines.append(f"| {threshold} | {FAMILY_NAMES.get(family, family)} | " + " | ".join(cells) + " |")
    depths = sorted({d for row in tables.table_5.values() for d in row})
    if depths:
        lines += [
            "",
            "## Tab. 5: SMFRs per contained-FNN depth (both routings)",
            "",
            "| threshold | " + " | ".join(f"{d} hidden layers | paper" for d in depths) + " |",
            "|---" * (2 * len(depths) + 1) + "|",
        ]
        for threshold in thresholds:
            cells = []
            for d in depths:
                cells.append(format_cell(tables.table_5.get(threshold, {}).get(d)))
                paper = PAPER_TABLE_5.get(threshold, {}).get(d)
                cells.append(f"{paper:.3f}" if paper is not None else "–")
            lines.append(f"| {threshold} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Tab. 1 over the grid: mean ± standard error per family",
        "",
        "| threshold | "
        + " | ".join(FAMILY_NAMES.get(f, f) for f in families)
        + " | "
        + " | ".join(f"paper {FAMILY_NAMES.get(f, f)}" for f in families)
        + " | not reached |",
        "|---" * (2 * len(families) + 2) + "|",
    ]
    for threshold in thresholds:
        row = tables.table_1.get(threshold, {})
        ours = [c.format() if (c := row.get(f)) else "–, n=0" for f in families]
        paper_row = PAPER_TABLE_1.get(threshold, {})
        paper = [
            f"{paper_row[f][0]:.3f} ± {paper_row[f][1]:.4f}" if f in paper_row else "–" for f in families
        ]
        missing = ", ".join(
            f"{FAMILY_NAMES.get(f, f)} {n}" for f, n in tables.unreached.get(threshold, {}).items() if n
        )
        lines.append(f"| {threshold} | " + " | ".join([*ours, *paper, missing or "0"]) + " |")
    lines += [
        "",
        "## Per architecture",
        "",
        "Preparation-data accuracy after the interference stage per threshold (`–`: threshold not reached).",
        "",
        "| architecture | seed | params | size | "
        + " | ".join(f"t={x}" for x in thresholds)
        + " | seconds |",
        "|---" * (len(thresholds) + 5) + "|",
    ]
    for g in trials:
        after = {o.threshold: o.preparation_only_after for o in g.trial.outcomes}
        cells = [f"{after[x]:.3f}" if x in after else "–" for x in thresholds]
        lines.append(
            f"| {g.trial.label} | {g.trial.seed} | {g.trial.n_parameters:,} | {g.bucket} | "
            + " | ".join(cells)
            + f" | {g.trial.seconds:.0f} |"
        )
    lines += [
        "",
        f"Training time summed over trials {sum(g.trial.seconds for g in trials):.0f} s (as recorded, "
        f"resumed trials included); this call {wall_seconds:.0f} s; torch {torch.__version__}.",
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "PAPER_TABLE_4",
    "PAPER_TABLE_5",
    "InterferenceGridResult",
    "InterferenceGridTables",
    "InterferenceGridTrial",
    "SMFRInterferenceGridConfig",
    "interference_grid_tables",
    "run_interference_grid",
]
