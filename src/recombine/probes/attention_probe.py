"""Attention and copy-gate maps of one example typed as text (thesis Figs. 5.3, 5.4, D.6, D.7).

A thin layer over :mod:`recombine.probes.attention_maps` for
``recombine probe attention RUN --example "..."``: the example is split on whitespace and tokenised
with the run's task vocabulary (CTL++ backward: ``"c b a 3"``), run through the trained Transformer
classifier, and drawn as

* ``attention.png``: per step (layer application) the attention maximum over heads and, for gated models,
  the copy-gate activation per column (:func:`~recombine.probes.attention_maps.plot_step_maps`);
* ``attention-heads.png``: every head of every step separately (rows: steps, columns: heads).

The target shown is the example's label when the example occurs in one of the task's splits, else ``?``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from recombine.errors import UserError
from recombine.models.transformer_classifier import TransformerClassifier
from recombine.probes.attention_maps import StepMaps, load_run_model, plot_step_maps
from recombine.tasks.base import ClassificationSplit, TaskData


def tokenize_example(task: TaskData, example: str) -> np.ndarray:
    """Input ids of a whitespace-separated example; one-line :class:`UserError` naming the valid tokens."""
    tokens = example.split()
    if not tokens:
        raise UserError('--example is empty; give space-separated tokens, e.g. --example "c b a 3"')
    valid = [t for t in task.input_vocab.tokens if t != task.input_vocab.PAD]
    for token in tokens:
        if token == task.input_vocab.PAD or token not in valid:
            raise UserError(
                f"unknown token {token!r} in --example (tokens are space-separated); "
                f"valid tokens: {' '.join(valid)}"
            )
    return task.input_vocab.encode(tokens)


def label_of(task: TaskData, ids: np.ndarray) -> str:
    """The example's target if it occurs in one of the task's classification splits, else ``?``."""
    key = ids.astype(np.int64).tobytes()
    for split in task.splits.values():
        if not isinstance(split, ClassificationSplit):
            continue
        for inputs, target in zip(split.inputs, split.targets, strict=True):
            if len(inputs) == len(ids) and inputs.astype(np.int64).tobytes() == key:
                return task.output_vocab.tokens[int(target)]
    return "?"


@torch.no_grad()
def example_maps(model: torch.nn.Module, task: TaskData, ids: np.ndarray) -> StepMaps:
    """Attention ``[steps, heads, N, N]`` and mean gates ``[steps, N]`` of one tokenised example."""
    if not isinstance(model, TransformerClassifier):
        raise UserError("attention maps need a Transformer classifier run (this model has no attention)")
    model.eval()
    tokens = torch.as_tensor(ids, dtype=torch.long)[None]
    logits, internals = model(tokens, torch.tensor([tokens.shape[1]]), return_internals=True)
    gates = None
    if "gate" in internals[0]:
        gates = torch.stack([step["gate"][0].mean(-1) for step in internals]).numpy()
    return StepMaps(
        tokens=["B", *task.input_vocab.decode(ids), "E"],
        attention=torch.stack([step["attention"][0] for step in internals]).numpy(),
        gates=gates,
        prediction=task.output_vocab.tokens[int(logits.argmax(-1))],
        target=label_of(task, ids),
    )


def plot_head_maps(maps: StepMaps, path: Path, title: str = "") -> Path:
    """Every head of every step: rows are steps, columns heads (target rows x source columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, heads = maps.attention.shape[:2]
    fig, axes = plt.subplots(steps, heads, figsize=(1.9 * heads + 0.4, 1.9 * steps + 0.6), squeeze=False)
    positions = np.arange(len(maps.tokens))
    for step in range(steps):
        for head in range(heads):
            ax = axes[step, head]
            ax.imshow(maps.attention[step, head], vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks(positions, maps.tokens, fontsize=5, rotation=90)
            ax.set_yticks(positions, maps.tokens, fontsize=5)
            if step == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"step {step}", fontsize=8)
    fig.suptitle(f"{title} prediction {maps.prediction}, target {maps.target}".strip(), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def example_file_stem(example: str) -> str:
    """A file-name-safe stem for an example (``"c b a 3"`` -> ``c_b_a_3``), at most 60 characters."""
    return re.sub(r"[^0-9A-Za-z]+", "_", example.strip()).strip("_")[:60] or "example"


def attention_probe(
    run_dir: str | Path, example: str, out_dir: str | Path, checkpoint: str = "best"
) -> list[Path]:
    """Render the per-step attention / gate maps of ``example`` into ``out_dir``; the PNG paths."""
    model, task = load_run_model(run_dir, checkpoint)
    ids = tokenize_example(task, example)
    maps = example_maps(model, task, ids)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = " ".join(maps.tokens[1:-1]) + ":"
    return [
        plot_step_maps(maps, out / "attention.png", title=title),
        plot_head_maps(maps, out / "attention-heads.png", title=title),
    ]
