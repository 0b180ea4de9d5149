"""``selection``: IID validation accuracy does not predict generalization (thesis 4.2.2, Tab. 4.2-4.3,
Fig. 4.1-4.2).

Trains a grid reproduction with frequent evaluation (by default ``scan-length`` at cutoff 26, the
Trafo and Universal+rel rows, an evaluation every 250 steps), then replays model-selection rules on the
stored evaluations (:mod:`recombine.runs.selection`): the OOD validation accuracy (recombine's rule,
and two rules for its ties: lowest OOD loss, latest), the IID validation accuracy and loss, early
stopping on the IID split with patience 5 (Kim and Linzen 2020, thesis Fig. 4.1), the last checkpoint
and the test-set oracle. ``source=DIR`` analyses an existing grid directory (e.g. ``runs/ndr-ctl-long``)
instead of training.

Thesis 4.2.2: "since any reasonable models achieve nearly 100% accuracy on the IID validation set, there
is no good reason to believe this to be a good practice for selecting models for generalization splits";
early stopping on COGS picked models "not even reaching half of the final generalization accuracy".
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recombine.errors import UserError
from recombine.experiments.executors import LocalExecutor
from recombine.experiments.reproduction import Reproduction, run_trials
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.runs.selection import (
    analyse_grid,
    per_run_table,
    selection_figure,
    selection_results,
    summary_table,
)
from recombine.train.device import resolve_device


@dataclass
class SelectionConfig:
    # the grid trains seeds 1..len(seeds), as `recombine reproduce GRID --seeds N` (results.json: run seeds)
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    grid: str = "scan-length"  # a registered grid reproduction to train
    models: list[str] = field(default_factory=lambda: ["Trafo", "Universal+rel"])  # its rows
    columns: list[str] = field(default_factory=lambda: ["cutoff-26"])  # its columns
    train: dict[str, Any] = field(default_factory=lambda: {"eval_every": 250})  # overrides of its training
    jobs: int = 1  # runs in parallel
    device: str = "cpu"  # where the grid's runs train (cpu, cuda, cuda:N; docs/gpu.md)
    source: str = ""  # an existing grid directory to analyse instead of training
    patience: int = 5  # evaluations without improvement before early stopping (Kim and Linzen 2020)
    iid_split: str = "valid_iid"
    ood_split: str = "valid_ood"
    test_split: str = "test_ood"

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise UserError(f"selection.patience must be >= 1, got {self.patience}")
        if self.jobs < 1:
            raise UserError(f"selection.jobs must be >= 1, got {self.jobs}")


def _grid(config: SelectionConfig) -> Reproduction:
    from recombine.experiments import get

    reproduction = get(config.grid)
    if not isinstance(reproduction, Reproduction):
        raise UserError(f"selection.grid must name a grid reproduction; {config.grid!r} is scripted")
    unknown = [c for c in config.columns if c not in reproduction.columns]
    if unknown:
        valid = ", ".join(reproduction.columns)
        raise UserError(f"column(s) {', '.join(unknown)} not in {config.grid}; valid choices: {valid}")
    columns = {c: reproduction.columns[c] for c in config.columns} if config.columns else reproduction.columns
    train = {**reproduction.train, **config.train}
    return dataclasses.replace(
        reproduction, name=f"{reproduction.name}-selection", columns=columns, train=train
    )


def run_selection(out_dir: Path, config: SelectionConfig) -> Path:
    """Train the grid (unless ``source`` is set), replay the rules; write report.md, results.json, figure."""
    started = time.perf_counter()
    if config.source:
        grid_dir = Path(config.source)
        if not grid_dir.is_dir():
            raise UserError(f"selection.source {config.source!r} is not a directory")
        origin = f"the existing runs of `{grid_dir}`"
        entries = None  # every run of its manifest
    else:
        grid_dir = out_dir / "grid"
        reproduction = _grid(config)
        resolve_device(config.device)  # before any run starts
        grid = run_trials(
            reproduction, grid_dir, seeds=len(config.seeds), quick=False,
            executor=LocalExecutor(config.jobs), labels=config.models or None, on_event=_print,
            device=config.device, progress=True,
        )  # fmt: skip
        if grid.failed:
            failed = ", ".join(f"{o.run} ({o.reason})" for o in grid.failed)
            raise UserError(
                f"selection: {len(grid.failed)} grid run(s) failed, see their train.log: {failed}"
            )
        entries = grid.entries  # only this call's runs, not others an earlier call left in the manifest
        origin = (
            f"`{config.grid}` rows {', '.join(config.models) or 'all'}, columns "
            f"{', '.join(reproduction.columns)}, training {reproduction.train}, {len(config.seeds)} seeds "
            f"(runs in `grid/`)"
        )
    selections = analyse_grid(
        grid_dir, config.iid_split, config.ood_split, config.test_split, config.patience, entries
    )
    rules = list(selections[0].picks) if selections else []
    figure = None
    if selections:
        figure = selection_figure(
            selections, out_dir / "selection.png", config.iid_split, config.test_split, rules
        )
    report = _render(config, origin, selections, figure, time.perf_counter() - started)
    (out_dir / "report.md").write_text(report)
    (out_dir / "results.json").write_text(
        json.dumps({"config": dataclasses.asdict(config), "runs": selection_results(selections)}, indent=2)
    )
    return out_dir / "report.md"


def _render(
    config: SelectionConfig, origin: str, selections: list, figure: Path | None, seconds: float
) -> str:
    iid, ood, test = config.iid_split, config.ood_split, config.test_split
    lines = [
        "# Model selection: IID validation vs generalization (thesis 4.2.2)",
        "",
        f"Runs: {origin}. For each run, the `{test}` exact-match accuracy of the checkpoint that each "
        f"selection rule picks from the run's evaluations: best `{ood}` accuracy (recombine's rule), best "
        f"`{iid}` accuracy, lowest `{iid}` loss, early stopping on `{iid}` accuracy or loss with patience "
        f"{config.patience} evaluations (Kim and Linzen 2020; thesis Fig. 4.1), the last checkpoint, and the "
        f"`{test}` oracle (an upper bound). Ties go to the earliest evaluation, except in the two rules "
        f"that break the ties of the best `{ood}` accuracy by the lowest `{ood}` loss or take the latest "
        "of them. Mean ± std over seeds.",
        "",
        "Thesis 4.2.2 (Tab. 4.2-4.3): IID validation accuracy is ~1.00 for every model while generalization "
        'accuracy varies widely; early stopping on the IID split picked COGS models "not even reaching half '
        'of the final generalization accuracy"; and lower validation loss need not mean higher accuracy '
        "(Fig. 4.2), so select by accuracy, not loss.",
        "",
        "## Summary",
        "",
        summary_table(selections, test),
    ]
    if selections:
        lines += ["## Claims at this scale", "", *_claims(selections, config), ""]
        lines += ["## Every run (`accuracy @ step`)", "", per_run_table(selections)]
    if figure is not None:
        lines += [
            f"![IID validation and test accuracy over training, with each rule's pick]({figure.name})",
            "",
        ]
    lines += [f"{len(selections)} runs analysed; {seconds:.0f} s for this call.", ""]
    return "\n".join(lines)


def _claims(selections: list, config: SelectionConfig) -> list[str]:
    iid, ood, test = config.iid_split, config.ood_split, config.test_split
    final_iid = [s.final_iid_accuracy for s in selections]
    by_ood = [s.picks[f"{ood} accuracy"][1] for s in selections]
    by_iid_stop = [s.picks[f"early stop ({iid} accuracy)"][1] for s in selections]
    by_iid_loss = [s.picks[f"{iid} loss"][1] for s in selections]
    worse_stop = sum(_more_than(a - b, 0.05) for a, b in zip(by_ood, by_iid_stop, strict=True))
    worse_loss = sum(_more_than(a - b, 0.05) for a, b in zip(by_ood, by_iid_loss, strict=True))
    high_iid = [s for s in selections if s.final_iid_accuracy >= 0.95]
    spread = [s.picks[f"{ood} accuracy"][1] for s in high_iid]
    n = len(selections)
    varies = bool(spread) and max(spread) - min(spread) > 0.1
    spread_text = f"{min(spread):.3f}-{max(spread):.3f}" if spread else "– (none)"
    return [
        f"- Final `{iid}` accuracy {min(final_iid):.3f}-{max(final_iid):.3f} over the {n} runs; among the "
        f"{len(high_iid)} runs with `{iid}` >= 0.95, `{test}` (selected by `{ood}`) ranges {spread_text}. "
        "Thesis: IID ~1.00 while generalization varies: "
        + ("**holds** (a spread over 0.1)." if varies else "**does not show** here (spread <= 0.1)."),
        f"- Early stopping on `{iid}` accuracy (patience {config.patience}) picks a checkpoint more than "
        f"0.05 worse on `{test}` than selection by `{ood}` in {worse_stop} of {n} runs. Thesis: early "
        "stopping on the IID split can pick much worse models: "
        + ("**holds**." if worse_stop else "**does not show** here."),
        f"- Selecting by the lowest `{iid}` loss: more than 0.05 worse in {worse_loss} of {n} runs. Thesis "
        "(Fig. 4.2): select by accuracy, not loss: "
        + ("**holds**." if worse_loss else "**does not show** here (loss chose as well as OOD accuracy)."),
        _ties_claim(selections, ood, test),
    ]


def _more_than(difference: float, margin: float) -> bool:
    """``difference > margin`` for accuracies logged as float32: 0.938 - 0.888 is 0.050000012 there and
    0.05 exactly in counts, so a difference within 1e-6 of the margin does not exceed it."""
    return difference > margin + 1e-6


def _ties_claim(selections: list, ood: str, test: str) -> str:
    """How often the best ``ood`` accuracy is reached more than once, and how far apart the tied
    checkpoints are on ``test``: when the selection split saturates, the tie rule decides the number."""
    tied_runs, widest, widest_at = 0, -1.0, ""
    for s in selections:
        top = max(e.accuracy[ood] for e in s.evaluations)
        tied = [e.accuracy[test] for e in s.evaluations if e.accuracy[ood] == top]
        if len(tied) > 1:
            tied_runs += 1
            if max(tied) - min(tied) > widest:
                widest = max(tied) - min(tied)
                widest_at = f"{s.run.removeprefix('runs/')}, tied at `{ood}` {top:.3f}"
    first = [s.picks[f"{ood} accuracy"][1] for s in selections]
    by_loss = [s.picks[f"{ood} accuracy, ties by loss"][1] for s in selections]
    by_last = [s.picks[f"{ood} accuracy, last of ties"][1] for s in selections]
    moved_loss = sum(_more_than(abs(a - b), 0.05) for a, b in zip(first, by_loss, strict=True))
    moved_last = sum(_more_than(abs(a - b), 0.05) for a, b in zip(first, by_last, strict=True))
    spread = f"; the tied checkpoints' `{test}` spans up to {widest:.3f} ({widest_at})" if tied_runs else ""
    verdict = (
        ": when the selection split saturates, the tie rule decides the reported number."
        if moved_loss or moved_last
        else "."
    )
    return (
        f"- Ties (a recombine check, not a thesis claim): the best `{ood}` accuracy is reached at more than "
        f"one evaluation in {tied_runs} of {len(selections)} runs{spread}. Breaking them by the lowest "
        f"`{ood}` loss / taking the latest moves `{test}` by more than 0.05 in {moved_loss} / {moved_last} "
        f"runs{verdict}"
    )


def _print(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


SELECTION = ScriptedReproduction(
    "selection",
    "IID validation accuracy vs generalization: which checkpoint each selection rule picks (thesis 4.2.2)",
    "Csordás thesis 4.2.2, Tab. 4.2-4.3, Fig. 4.1-4.2",
    SelectionConfig,
    run_selection,
    quick={"seeds": [1], "train": {"steps": 60, "eval_every": 20}},
    reuse_finished=lambda config: not config.source,  # a source grid may have trained on since
)
