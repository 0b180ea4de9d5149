"""Evaluate a stored run's checkpoint again, optionally with another number of shared-layer steps.

A shared-layer Transformer (the NDR, the Universal Transformer) can run more or fewer steps at test time
than it was trained with (``model.test_layers``, thesis D.3.1). How many it needs is a question about the
trained model, not about its training: whether a model that fails on longer problems with 14 steps solves
them with 26 tells apart "did not learn the rule" from "learned it, but spends more than one layer per
operation" (docs/reproductions/ndr-ctl.md). ``recombine evaluate RUN --test-layers 14,20,26`` answers it
from the checkpoint, on every split (or the ones asked for), with the run's own evaluation code, so the
numbers are comparable with the run's ``metrics.jsonl``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recombine import run_config
from recombine.errors import UserError, choices_hint
from recombine.runs.store import RunDir
from recombine.train.device import CPU
from recombine.train.objectives import objective_for
from recombine.train.supervised import build_model, build_task


@dataclass
class Evaluation:
    test_layers: int | None  # None: the run's own setting
    splits: dict[str, dict[str, Any]]  # split -> {"accuracy", "loss", "per_depth"}


@dataclass
class RunEvaluations:
    run: Path
    checkpoint: str  # "best" or "last"
    step: int  # the checkpoint's training step
    # the steps the run evaluates with by its config (None: not a shared-layer model)
    configured_layers: int | None
    evaluations: list[Evaluation]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": str(self.run),
            "checkpoint": self.checkpoint,
            "step": self.step,
            "configured_layers": self.configured_layers,
            "evaluations": [{"test_layers": e.test_layers, "splits": e.splits} for e in self.evaluations],
        }


def evaluate_run(
    run_path: str | Path,
    checkpoint: str = "best",
    test_layers: Sequence[int | None] = (None,),
    splits: Sequence[str] | None = None,
    batch_size: int | None = None,
    device: torch.device = CPU,
) -> RunEvaluations:
    """Evaluate ``checkpoint`` of the run at ``run_path`` once per entry of ``test_layers`` (``None``: as
    the run was configured) on ``splits`` (default: the splits the run evaluated during training), with
    batches of ``batch_size`` (default: the run's ``train.eval_batch_size``)."""
    for layers in test_layers:
        if layers is not None and layers < 1:
            raise UserError(f"test layers must be >= 1, got {layers}")
    run = RunDir(run_path)
    stored = run.read_config()  # a UserError when run_path is no run directory
    config = run_config.resolve(stored)
    state = run.load_checkpoint(checkpoint)
    task = build_task(config)
    names = list(splits) if splits else list(task.evaluation_splits)
    for name in names:
        if name not in task.splits:
            raise UserError(f"the run's task has no split {name!r}; {choices_hint(name, list(task.splits))}")
    objective = objective_for(task.spec, 0.0, device)
    prepared = {name: objective.prepare(task.splits[name]) for name in names}
    evaluations = []
    for layers in test_layers:
        changed = stored if layers is None else run_config.merge(stored, {"model": {"test_layers": layers}})
        model = build_model(run_config.resolve(changed), task)  # a UserError for models without the field
        model.load_state_dict(state["model"])
        model.to(device).eval()
        with torch.no_grad():
            results = {
                name: objective.evaluate(model, split, batch_size or config.train.eval_batch_size)
                for name, split in prepared.items()
            }
        evaluations.append(Evaluation(layers, results))
    configured = None  # only shared-layer models have a number of steps to report
    if hasattr(config.model, "test_layers"):
        configured = config.model.test_layers or config.model.n_layers
    return RunEvaluations(Path(run_path), checkpoint, int(state["step"]), configured, evaluations)


def format_evaluations(result: RunEvaluations) -> str:
    """A table: one row per evaluation, accuracy per split, then the accuracy per depth of each split."""
    names = list(result.evaluations[0].splits)
    header = ["test layers", *names]
    rows = [
        [_layers_label(e.test_layers, result), *(f"{e.splits[n]['accuracy']:.3f}" for n in names)]
        for e in result.evaluations
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"{result.run} ({result.checkpoint} checkpoint, step {result.step})"]
    lines += [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    lines.append("accuracy per depth:")
    for evaluation in result.evaluations:
        depths = "; ".join(
            f"{name} "
            + " ".join(
                f"{depth}:{value:.2f}" for depth, value in evaluation.splits[name]["per_depth"].items()
            )
            for name in names
        )
        lines.append(f"  {_layers_label(evaluation.test_layers, result)}: {depths}")
    return "\n".join(lines)


def _layers_label(layers: int | None, result: RunEvaluations) -> str:
    if layers is not None:
        return str(layers)
    return "as configured" if result.configured_layers is None else f"{result.configured_layers} (configured)"
