"""Attention and copy-gate maps of a trained Transformer classifier per step (thesis Figs. 5.3, D.6, D.7).

For one input, every step (shared layer application) gives an attention matrix per head
(``[heads, N, N]``, target rows x source columns) and, for gated models, the copy-gate activation
of every column (mean over channels). The figure shows the attention maximum over heads per step
and the gates as a steps x columns heatmap, with the tokens (``B`` ... ``E``) on the axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recombine import run_config
from recombine.errors import UserError
from recombine.models.transformer_classifier import TransformerClassifier
from recombine.runs.store import RunDir
from recombine.tasks.base import ClassificationSplit, TaskData
from recombine.train.supervised import build_model, build_task


@dataclass
class StepMaps:
    tokens: list[str]  # column labels, begin/end tokens included
    attention: np.ndarray  # [steps, heads, N, N]
    gates: np.ndarray | None  # [steps, N] mean gate per column, None without copy gate
    prediction: str
    target: str


def load_run_model(run_path: str | Path, which: str = "best") -> tuple[torch.nn.Module, TaskData]:
    model, task, _ = load_run_model_and_step(run_path, which)
    return model, task


def load_run_model_and_step(
    run_path: str | Path, which: str = "best"
) -> tuple[torch.nn.Module, TaskData, int]:
    """The run's model (in eval mode) with the ``which`` checkpoint's weights, its task, and the checkpoint's
    training step, all from one read of the checkpoint file (a trainer may replace it meanwhile)."""
    run = RunDir(run_path)
    config = run_config.resolve(run.read_config())
    task = build_task(config)
    model = build_model(config, task)
    state = run.load_checkpoint(which)
    model.load_state_dict(state["model"])
    return model.eval(), task, int(state["step"])


@torch.no_grad()
def step_maps(model: torch.nn.Module, task: TaskData, split: str, index: int) -> StepMaps:
    if not isinstance(model, TransformerClassifier):
        raise UserError("attention maps need a Transformer classifier run (this model has no attention)")
    if split not in task.splits:
        raise UserError(f"no split {split!r}; valid choices: {', '.join(task.splits)}")
    data = task.splits[split]
    if not isinstance(data, ClassificationSplit):
        raise UserError(f"split {split!r} is not a classification split")
    if not 0 <= index < len(data):
        raise UserError(f"--index must be in [0, {len(data) - 1}] for split {split!r}")
    ids = torch.as_tensor(data.inputs[index])[None]
    logits, internals = model(ids, torch.tensor([ids.shape[1]]), return_internals=True)
    tokens = ["B", *task.input_vocab.decode(data.inputs[index]), "E"]
    attention = torch.stack([step["attention"][0] for step in internals]).numpy()
    gates = None
    if "gate" in internals[0]:
        gates = torch.stack([step["gate"][0].mean(-1) for step in internals]).numpy()
    return StepMaps(
        tokens=tokens,
        attention=attention,
        gates=gates,
        prediction=task.output_vocab.tokens[int(logits.argmax(-1))],
        target=task.output_vocab.tokens[int(data.targets[index])],
    )


def plot_step_maps(maps: StepMaps, path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = maps.attention.shape[0]
    n_cols = min(steps, 7)
    n_rows = -(-steps // n_cols) + (1 if maps.gates is not None else 0)
    fig = plt.figure(figsize=(2.2 * n_cols, 2.3 * n_rows + 0.6))
    positions = np.arange(len(maps.tokens))
    for step in range(steps):
        ax = fig.add_subplot(n_rows, n_cols, step + 1)
        ax.imshow(maps.attention[step].max(0), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"step {step}", fontsize=8)
        ax.set_xticks(positions, maps.tokens, fontsize=6, rotation=90)
        ax.set_yticks(positions, maps.tokens, fontsize=6)
    if maps.gates is not None:
        ax = fig.add_subplot(n_rows, 1, n_rows)
        image = ax.imshow(maps.gates, vmin=0, vmax=1, cmap="magma", aspect="auto")
        ax.set_xticks(positions, maps.tokens, fontsize=7)
        ax.set_yticks(range(steps))
        ax.set_ylabel("step")
        ax.set_title("copy gate (mean over channels)", fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.02)
    fig.suptitle(f"{title} prediction {maps.prediction}, target {maps.target}".strip(), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
