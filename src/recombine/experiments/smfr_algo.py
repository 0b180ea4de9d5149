"""Train a block model (SMFR, FNN or Transformer) on ALGO and measure accuracy per iteration count
(Block-Operations paper, sec. 5.3, Tab. 2; protocol from A.2 and A.3).

Protocol: the model is applied once per iteration, its output blocks fed back as the next state
(with the next task-indicator block appended). Training supervises only the state after exactly
``train_iterations`` (2) iterations; evaluation runs 1..9 iterations. An example counts as correct when
all five variables (argmax per block) are right. Adam, lr 3e-4, gradient-norm clipping at 0.1 (A.2);
the saturation regulariser of A.3 (threshold 20) on every Multiplexer / FNNR logit of every iteration.
Model selection: the evaluation with the best accuracy at 4 iterations (Tab. 2 caption).

The loss is not stated in the paper. We use the MSE between the output blocks and the one-hot
targets (``loss="mse"``), under which an exactly copied one-hot input block has zero loss, so copying
is never penalised; ``loss="cross_entropy"`` treats each output block as logits instead.

:func:`train_algo` trains one model with one seed; :func:`run_algo_seeds` trains several architectures
over several seeds and writes ``report.md`` and ``results.json`` with per-trial numbers, mean ± std
(:class:`recombine.runs.aggregate.SeedSummary`), success rates (fraction of trials at accuracy 1.0, as
in BLOCK Fig. 4 right) and the paper's Tab. 2 beside ours. Tab. 2 reports the five best models of a
grid, we report every trial of the architectures we ran, so our means are the harder comparison.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from recombine.errors import UserError, choices_hint
from recombine.experiments.block_digit_training import BlockArchitecture
from recombine.experiments.progress import training_bar, trial_done
from recombine.models.layers.saturation_regularizer import SATURATION_THRESHOLD, saturation_loss
from recombine.models.smfr import BlockShape, build_block_model, count_parameters
from recombine.runs.aggregate import SeedSummary
from recombine.tasks.algo import (
    N_VARIABLES,
    OOD_EVEN_ITERATIONS,
    OOD_ODD_ITERATIONS,
    VALIDATION_ITERATIONS,
    AlgoConfig,
    AlgoData,
    AlgoSplit,
    build,
    one_hot_blocks,
    split_name,
)

LOSSES = ("mse", "cross_entropy")

#: BLOCK Tab. 2: mean ± std of the five best models of each type, (OOD_even, OOD_odd).
PAPER_TABLE_2: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "fnn": ((1.000, 0.000), (0.187, 0.052)),
    "transformer": ((0.984, 0.003), (0.099, 0.094)),
    "smfr": ((1.000, 0.000), (1.000, 0.000)),
}


@dataclass
class SMFRAlgoConfig:
    model: str = "smfr"  # "smfr", "fnn" or "transformer" (recombine.models.smfr.BLOCK_MODELS)
    model_config: dict[str, Any] = field(default_factory=dict)
    task: AlgoConfig = field(default_factory=AlgoConfig)
    steps: int = 3000
    batch_size: int = 64
    lr: float = 3e-4  # BLOCK A.2
    grad_clip: float = 0.1  # BLOCK A.2
    saturation_weight: float = 1.0  # BLOCK A.3 (weight not stated; 1)
    saturation_threshold: float = SATURATION_THRESHOLD
    loss: str = "mse"
    eval_every: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise UserError(f"loss={self.loss!r} is not valid; {choices_hint(self.loss, LOSSES)}")
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1:
            raise UserError("steps, batch_size and eval_every must be >= 1")


@dataclass
class AlgoResult:
    accuracy: dict[int, float]  # iterations -> exact-match accuracy, at the selected evaluation
    ood_even: float
    ood_odd: float
    best_step: int
    final_accuracy: dict[int, float]  # at the last step
    n_parameters: int
    seconds: float
    history: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def iterate(
    model: nn.Module,
    initial: torch.Tensor,
    indicators: torch.Tensor,
    neuron_permutation: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Apply ``model`` once per iteration: ``initial`` [b, 5, B], ``indicators`` [b, k, B].

    Returns the final state [b, 5, B] and all routing logits of all iterations (for BLOCK A.3)."""
    state, logits = initial, []
    for t in range(indicators.shape[1]):
        x = torch.cat([state, indicators[:, t : t + 1]], dim=1)
        if neuron_permutation is not None:  # BLOCK 5.3 noisy variant: fixed permutation of all neurons
            x = x.reshape(x.shape[0], -1)[:, neuron_permutation].reshape(x.shape)
        out = model(x)
        state = out.blocks
        logits.extend(out.routing_logits)
    return state, logits


def _tensors(split: AlgoSplit, block_size: int, index: np.ndarray | None = None) -> tuple[torch.Tensor, ...]:
    states = split.states if index is None else split.states[index]
    ids = split.permutation_ids if index is None else split.permutation_ids[index]
    initial = torch.from_numpy(one_hot_blocks(states[:, 0], block_size))
    indicators = torch.from_numpy(one_hot_blocks(ids, block_size))
    return initial, indicators, torch.from_numpy(states[:, -1])


def _loss(final: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "mse":
        return F.mse_loss(final, F.one_hot(target, final.shape[-1]).to(final.dtype))
    return F.cross_entropy(final.reshape(-1, final.shape[-1]), target.reshape(-1))


@torch.no_grad()
def evaluate(model: nn.Module, data: AlgoData, neuron_permutation: torch.Tensor | None) -> dict[int, float]:
    """Exact-match accuracy (all five variables right) per evaluated iteration count."""
    was_training = model.training
    model.eval()
    out: dict[int, float] = {}
    for k in sorted(set(data.config.eval_iterations)):
        initial, indicators, target = _tensors(data.splits[split_name(k)], data.block_size)
        final, _ = iterate(model, initial, indicators, neuron_permutation)
        out[k] = float((final.argmax(-1) == target).all(-1).float().mean())
    model.train(was_training)
    return out


def _mean_over(accuracy: dict[int, float], iterations: tuple[int, ...]) -> float:
    values = [accuracy[k] for k in iterations if k in accuracy]
    return float(np.mean(values)) if values else float("nan")


def train_algo(config: SMFRAlgoConfig) -> AlgoResult:
    """Train one model on ALGO for ``config.steps`` steps; accuracies per iteration count."""
    start = time.perf_counter()
    data = build(config.task, config.seed)
    torch.manual_seed(config.seed)
    shape = BlockShape(data.n_input_blocks, N_VARIABLES, data.block_size)
    model = build_block_model(config.model, shape, **config.model_config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    permutation = None if data.neuron_permutation is None else torch.from_numpy(data.neuron_permutation)
    batches = torch.Generator().manual_seed(config.seed)
    train = data.splits["train"]
    selection = VALIDATION_ITERATIONS if VALIDATION_ITERATIONS in config.task.eval_iterations else None

    history: list[dict[str, Any]] = []
    best: tuple[float, int, dict[int, float]] | None = None
    with training_bar(config.steps, f"{config.model} seed {config.seed}") as bar:
        for step in range(1, config.steps + 1):
            index = torch.randint(len(train), (config.batch_size,), generator=batches).numpy()
            initial, indicators, target = _tensors(train, data.block_size, index)
            final, logits = iterate(model, initial, indicators, permutation)
            task_loss = _loss(final, target, config.loss)
            loss = task_loss + config.saturation_weight * saturation_loss(logits, config.saturation_threshold)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            if step % config.eval_every == 0 or step == config.steps:
                accuracy = evaluate(model, data, permutation)
                history.append({"step": step, "loss": float(task_loss.detach()), "accuracy": accuracy})
                score = accuracy[selection] if selection is not None else accuracy[max(accuracy)]
                if best is None or score >= best[0]:
                    best = (score, step, copy.deepcopy(accuracy))
            bar.update()
    assert best is not None
    _, best_step, best_accuracy = best
    return AlgoResult(
        accuracy=best_accuracy,
        ood_even=_mean_over(best_accuracy, OOD_EVEN_ITERATIONS),
        ood_odd=_mean_over(best_accuracy, OOD_ODD_ITERATIONS),
        best_step=best_step,
        final_accuracy=history[-1]["accuracy"],
        n_parameters=count_parameters(model),
        seconds=time.perf_counter() - start,
        history=history,
    )


#: one row of the multi-seed table: the block model and config shared with the digit tasks
AlgoArchitecture = BlockArchitecture


def default_algo_architectures() -> list[AlgoArchitecture]:
    """One architecture per family of BLOCK Tab. 2 (SMFR, FNN in the A.2.3 grid; Transformer smaller)."""
    return [
        AlgoArchitecture("SMFR d1 w6", "smfr", {"depth": 1, "width": 6}),
        AlgoArchitecture("FNN 3x200", "fnn", {"width": 200, "depth": 3}),
        AlgoArchitecture("Transformer 2x64", "transformer", {"d_model": 64, "n_layers": 2, "d_ff": 256}),
    ]


@dataclass
class SMFRAlgoSeedsConfig:
    """Every architecture x every seed, with the shared training settings of ``base``."""

    architectures: list[AlgoArchitecture] = field(default_factory=default_algo_architectures)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    base: SMFRAlgoConfig = field(default_factory=SMFRAlgoConfig)  # model, model_config, seed are replaced
    success_threshold: float = 1.0  # BLOCK Fig. 4 right: fraction of trials with 100% accuracy

    def __post_init__(self) -> None:
        if not self.architectures or not self.seeds:
            raise UserError("need at least one architecture and one seed")
        labels = [a.label for a in self.architectures]
        if len(set(labels)) != len(labels):
            raise UserError(f"architecture labels must be unique, got {labels}")


@dataclass
class AlgoTrial:
    label: str
    model: str
    seed: int
    result: AlgoResult


@dataclass
class AlgoSeedsResult:
    trials: list[AlgoTrial]
    summary: dict[str, dict[str, SeedSummary]]  # label -> metric -> summary over seeds
    report: Path
    results: Path


def summarise_algo_trials(trials: list[AlgoTrial], threshold: float) -> dict[str, dict[str, SeedSummary]]:
    """Per architecture: OOD_even, OOD_odd and the accuracy at each iteration count, over seeds."""
    summary: dict[str, dict[str, SeedSummary]] = {}
    for label in dict.fromkeys(t.label for t in trials):
        mine = [t.result for t in trials if t.label == label]
        metrics = {
            "ood_even": SeedSummary.of([r.ood_even for r in mine], threshold),
            "ood_odd": SeedSummary.of([r.ood_odd for r in mine], threshold),
        }
        for k in sorted(mine[0].accuracy):
            metrics[split_name(k)] = SeedSummary.of([r.accuracy[k] for r in mine], threshold)
        summary[label] = metrics
    return summary


def run_algo_seeds(
    out_dir: str | Path,
    config: SMFRAlgoSeedsConfig | None = None,
    on_trial: Callable[[AlgoTrial], None] | None = None,
) -> AlgoSeedsResult:
    """Train every architecture with every seed; write ``report.md`` and ``results.json`` to ``out_dir``."""
    config = config or SMFRAlgoSeedsConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trials: list[AlgoTrial] = []
    total = len(config.architectures) * len(config.seeds)
    for architecture in config.architectures:
        for seed in config.seeds:
            run = replace(
                config.base, model=architecture.model, model_config=dict(architecture.model_config), seed=seed
            )
            started = time.perf_counter()
            trial = AlgoTrial(architecture.label, architecture.model, seed, train_algo(run))
            trials.append(trial)
            seconds = time.perf_counter() - started
            headline = f"OOD_odd {trial.result.ood_odd:.3f}"
            trial_done(len(trials), total, f"{architecture.label} seed {seed}", seconds, headline, run.steps)
            if on_trial is not None:
                on_trial(trial)
    summary = summarise_algo_trials(trials, config.success_threshold)
    results = out / "results.json"
    results.write_text(
        json.dumps(
            {
                "config": asdict(config),
                "paper_table_2": {k: {"ood_even": v[0], "ood_odd": v[1]} for k, v in PAPER_TABLE_2.items()},
                "summary": {
                    label: {name: s.to_dict() for name, s in metrics.items()}
                    for label, metrics in summary.items()
                },
                "trials": [
                    {"label": t.label, "model": t.model, "seed": t.seed, **t.result.as_dict()} for t in trials
                ],
            },
            indent=2,
        )
    )
    report = out / "report.md"
    report.write_text(render_algo_report(config, trials, summary))
    return AlgoSeedsResult(trials, summary, report, results)


def render_algo_report(
    config: SMFRAlgoSeedsConfig, trials: list[AlgoTrial], summary: dict[str, dict[str, SeedSummary]]
) -> str:
    base = config.base
    n_seeds = len(config.seeds)
    lines = [
        "# SMFR on ALGO over seeds (BLOCK 5.3, Tab. 2)",
        "",
        f"Train {base.task.n_train} examples of {base.task.train_iterations} iterations, "
        f"{base.task.n_eval} test examples per iteration count; {base.steps} steps, batch {base.batch_size}, "
        f"Adam lr {base.lr}, clip {base.grad_clip}, loss {base.loss}, saturation regulariser weight "
        f"{base.saturation_weight}; selection by the best {VALIDATION_ITERATIONS}-iteration accuracy "
        f"(evaluated every {base.eval_every} steps); noisy permutation: {base.task.noisy_permutation}. "
        f"Seeds {config.seeds}.",
        "",
        f"Cells: mean ± std over {n_seeds} seeds (hits = trials with accuracy >= "
        f"{config.success_threshold}). Paper: Tab. 2, mean ± std of the five best models of a grid "
        "per family.",
        "",
        "| architecture | params | OOD_even | OOD_odd | paper OOD_even | paper OOD_odd |",
        "|---|---|---|---|---|---|",
    ]
    for architecture in config.architectures:
        metrics = summary[architecture.label]
        params = next(t.result.n_parameters for t in trials if t.label == architecture.label)
        paper = PAPER_TABLE_2.get(architecture.model)
        paper_cells = (
            [f"{paper[0][0]:.3f} ± {paper[0][1]:.3f}", f"{paper[1][0]:.3f} ± {paper[1][1]:.3f}"]
            if paper
            else ["-", "-"]
        )
        lines.append(
            f"| {architecture.label} | {params:,} | {metrics['ood_even'].format()} | "
            f"{metrics['ood_odd'].format()} | {' | '.join(paper_cells)} |"
        )
    iterations = sorted(trials[0].result.accuracy)
    lines += [
        "",
        "Accuracy per iteration count (mean ± std over seeds, hits = trials at 1.0):",
        "",
        "| architecture | " + " | ".join(str(k) for k in iterations) + " |",
        "|---" * (len(iterations) + 1) + "|",
    ]
    for architecture in config.architectures:
        metrics = summary[architecture.label]
        cells = [metrics[split_name(k)].format() for k in iterations]
        lines.append(f"| {architecture.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per trial (at the selected evaluation):",
        "",
        "| architecture | seed | best step | OOD_even | OOD_odd | "
        + " | ".join(f"acc@{k}" for k in iterations)
        + " | seconds |",
        "|---" * (len(iterations) + 6) + "|",
    ]
    for t in trials:
        r = t.result
        accuracies = " | ".join(f"{r.accuracy[k]:.3f}" for k in iterations)
        lines.append(
            f"| {t.label} | {t.seed} | {r.best_step} | {r.ood_even:.3f} | {r.ood_odd:.3f} | {accuracies} | "
            f"{r.seconds:.0f} |"
        )
    lines.append("")
    return "\n".join(lines)
