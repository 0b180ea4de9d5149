"""Weight masks on a trained run, ``recombine probe masks RUN --target SPLIT`` (thesis 3.1).

The run's model is frozen and a mask is trained on a *target*: a split of the run's task
(``train``, ``valid_iid``, ...) or, for classification tasks, the examples of one depth of it
(``train:depth=3``). This is the
thesis's protocol for asking which weights a subset of the data needs (thesis 3.1; 3.3 trains a mask
on one split's training set and tests it on that split's test set). For every target the probe
reports the accuracy on every split of the task

* of the unmasked model (``none``),
* under the target's mask (the subnetwork the target needs),
* under the inverted mask (every weight the target needs removed; thesis 3.1, 3.2.2),

and with two targets (``--target A --target B``) the sharing between their masks: IoU and IoMin over
all weights and per layer, and the per-layer sharing figure (thesis Figs. 3.1, 3.3).

Classification runs: mask training is :func:`recombine.probes.weight_masks.train_weight_mask` with the
cross-entropy on the run's ``(tokens, lengths) -> logits`` interface; accuracy is the training
objective's own evaluation (:class:`recombine.train.objectives.ClassificationObjective`).

Seq2seq runs (SCAN, PCFG SET, COGS, ...; thesis 3.3): the mask trains on the teacher-forced token
cross-entropy (:func:`recombine.probes.seq2seq_masks.train_seq2seq_mask`, one mask sample per slice of
the batch) and accuracy is the exact match of greedy decoding under the mask
(:class:`~recombine.probes.seq2seq_masks.MaskedSeq2Seq` in
:class:`~recombine.train.objectives.Seq2SeqObjective`). ``eval_examples`` caps every split's
evaluation at a seeded sample, since greedy decoding of a full SCAN test set under five masks is slow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.probes.mask_sets import (
    LayerSharing,
    MaskSet,
    intersection_over_minimum,
    intersection_over_union,
    per_layer_sharing,
    plot_per_layer_sharing,
)
from recombine.probes.seq2seq_masks import MaskedSeq2Seq, train_seq2seq_mask
from recombine.probes.weight_masks import (
    MaskedModel,
    MaskTrainingConfig,
    ModelOutput,
    alpha_from_beta,
    train_weight_mask,
)
from recombine.tasks.base import ClassificationSplit, Seq2SeqSplit, Split, TaskData
from recombine.train.batching import PaddedSeq2SeqSplit, PaddedSplit
from recombine.train.objectives import objective_for

_TARGET_PATTERN = re.compile(r"^(?P<split>[A-Za-z0-9_]+)(?::depth=(?P<depth>-?\d+))?$")


@dataclass(frozen=True)
class MaskTarget:
    """A split, or the examples of one depth of it (``train:depth=3``)."""

    split: str
    depth: int | None = None

    @classmethod
    def parse(cls, text: str) -> MaskTarget:
        match = _TARGET_PATTERN.match(text.strip())
        if match is None:
            raise UserError(f"bad target {text!r}; expected SPLIT or SPLIT:depth=N (e.g. train:depth=3)")
        depth = match.group("depth")
        return cls(match.group("split"), None if depth is None else int(depth))

    @property
    def label(self) -> str:
        return self.split if self.depth is None else f"{self.split}:depth={self.depth}"

    @property
    def file_stem(self) -> str:
        return self.split if self.depth is None else f"{self.split}-depth{self.depth}"

    def select(self, task: TaskData) -> Split:
        """The target's examples (a UserError names the valid splits or depths)."""
        if self.split not in task.splits:
            raise UserError(
                f"no split {self.split!r} in task {task.name}; {choices_hint(self.split, task.splits)}"
            )
        split = task.splits[self.split]
        if self.depth is None:
            return split
        if not isinstance(split, ClassificationSplit):
            raise UserError(
                f"{task.name} is a seq2seq task and its splits have no depths; give the split alone "
                f"(--target {self.split})"
            )
        keep = np.flatnonzero(split.depth == self.depth)
        if len(keep) == 0:
            depths = ", ".join(str(d) for d in sorted(set(split.depth.tolist())))
            raise UserError(
                f"split {self.split!r} has no examples of depth {self.depth}; valid depths: {depths}"
            )
        return split.take(keep)


@dataclass
class MaskProbeConfig:
    """Mask training on a run; defaults follow thesis B.3.2 / B.3.4 except the step count (CPU scale)."""

    steps: int = 2_000  # thesis B.3.4: 20k
    learning_rate: float = 1e-2  # B.3.4
    alpha: float = alpha_from_beta(1e-4, 128)  # B.3.4: beta = 1e-4 at batch size 128
    batch_size: int = 128  # B.3.2
    n_samples: int = 4  # B.3.2
    eval_batch_size: int = 512
    eval_examples: int = 0  # per split, a seeded sample of this many; 0: every example
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < self.n_samples:
            raise UserError(f"batch_size must be >= n_samples ({self.n_samples}), got {self.batch_size}")
        if self.eval_batch_size < 1:
            raise UserError("eval_batch_size must be >= 1")
        if self.eval_examples < 0:
            raise UserError(f"eval_examples must be >= 0 (0: all), got {self.eval_examples}")

    def mask_training(self) -> MaskTrainingConfig:
        return MaskTrainingConfig(
            steps=self.steps, learning_rate=self.learning_rate, alpha=self.alpha, n_samples=self.n_samples
        )


@dataclass
class MaskProbeResult:
    targets: list[str]  # target labels, in the order given
    masks: dict[str, MaskSet]  # target label -> binary mask
    accuracy: dict[str, dict[str, float]]  # "none", label, "~label" -> split -> accuracy
    sharing: dict[str, LayerSharing] | None  # first vs second target, per parameter (two targets only)
    iou: float | None
    iomin: float | None

    def accuracy_table(self) -> str:
        """Markdown: one row per mask (``~``: inverted), one column per split, accuracy in %."""
        splits = list(next(iter(self.accuracy.values())))
        lines = ["| mask | " + " | ".join(splits) + " |", "|---" * (len(splits) + 1) + "|"]
        for mask, per_split in self.accuracy.items():
            lines.append(f"| {mask} | " + " | ".join(f"{100 * per_split[s]:.1f}" for s in splits) + " |")
        return "\n".join(lines)

    def summary(self) -> dict[str, object]:
        sharing = None
        if self.sharing is not None:
            sharing = {
                layer: {
                    **asdict(s),
                    "iou": s.iou,
                    "iomin": s.iomin,
                    "shared_of_a": s.shared_of_a,
                    "shared_of_b": s.shared_of_b,
                }
                for layer, s in self.sharing.items()
            }
        return {
            "targets": self.targets,
            "accuracy": self.accuracy,
            "kept_fraction": {label: mask.kept_fraction() for label, mask in self.masks.items()},
            "iou": self.iou,
            "iomin": self.iomin,
            "sharing": sharing,
        }


def classification_loss(outputs: ModelOutput, targets: torch.Tensor) -> torch.Tensor:
    assert isinstance(outputs, torch.Tensor)
    return F.cross_entropy(outputs, targets)


def _batches(
    prepared: PaddedSplit, batch_size: int, seed: int
) -> Iterator[tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        tokens, lengths, targets = prepared.random_batch(batch_size, generator)
        yield (tokens, lengths), targets


def sample_examples(split: Split, n: int, seed: int) -> Split:
    """``n`` examples of ``split`` drawn without replacement, in their original order (seeded; the
    whole split when ``n`` is 0 or at least its size)."""
    if n == 0 or n >= len(split):
        return split
    return split.take(np.sort(np.random.default_rng(seed).choice(len(split), size=n, replace=False)))


def _train_mask(
    model: nn.Module, task: TaskData, subset: Split, config: MaskProbeConfig, index: int
) -> MaskSet:
    """The binary mask of ``model`` for ``subset``, the ``index``-th target (its own seeds)."""
    if isinstance(subset, Seq2SeqSplit):
        trained = train_seq2seq_mask(
            model,
            PaddedSeq2SeqSplit.from_split(subset),
            task.spec.n_classes,
            config.mask_training(),
            config.batch_size,
            seed=config.seed + index,
        )
    else:
        batches = _batches(PaddedSplit.from_split(subset), config.batch_size, config.seed * 1000 + index)
        trained = train_weight_mask(
            model, batches, classification_loss, config.mask_training(), seed=config.seed + index
        )
    return trained.binary


def probe_masks(
    model: nn.Module, task: TaskData, targets: Sequence[MaskTarget], config: MaskProbeConfig
) -> MaskProbeResult:
    """Train one mask per target on the frozen ``model``; evaluate masks and inverses on every split
    (classification accuracy, or exact match of greedy decoding for seq2seq tasks)."""
    if task.kind not in ("classify", "seq2seq"):
        raise UserError(
            f"probe masks supports classification and seq2seq runs; task {task.name!r} is {task.kind}"
        )
    if not 1 <= len(targets) <= 2:
        raise UserError(f"give one or two targets, got {len(targets)}")
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise UserError(f"the targets must differ, got {labels}")
    subsets = [target.select(task) for target in targets]  # validates every target before training
    masks = {
        target.label: _train_mask(model, task, subset, config, index)
        for index, (target, subset) in enumerate(zip(targets, subsets, strict=True))
    }

    objective = objective_for(task.spec)
    prepared = {
        name: objective.prepare(sample_examples(split, config.eval_examples, config.seed))
        for name, split in task.splits.items()
    }
    masked = MaskedSeq2Seq if task.kind == "seq2seq" else MaskedModel
    evaluated: dict[str, nn.Module] = {"none": model}
    for label, mask in masks.items():
        evaluated[label] = masked(model, mask)
        evaluated[f"~{label}"] = masked(model, ~mask)
    accuracy = {
        name: {
            split: float(objective.evaluate(candidate, data, config.eval_batch_size)["accuracy"])
            for split, data in prepared.items()
        }
        for name, candidate in evaluated.items()
    }
    sharing = iou = iomin = None
    if len(targets) == 2:
        first, second = (masks[label] for label in labels)
        sharing = per_layer_sharing(first, second)
        iou, iomin = intersection_over_union(first, second), intersection_over_minimum(first, second)
    return MaskProbeResult(labels, masks, accuracy, sharing, iou, iomin)


def write_probe_outputs(
    result: MaskProbeResult, targets: Sequence[MaskTarget], out: str | Path
) -> list[Path]:
    """``masks/<target>.pt`` per target, ``results.json``, ``report.md``; ``sharing.png`` for two targets."""
    out = Path(out)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    written = [result.masks[t.label].save(out / "masks" / f"{t.file_stem}.pt") for t in targets]
    results_path = out / "results.json"
    results_path.write_text(json.dumps(result.summary(), indent=2, allow_nan=True))
    lines = [
        "# Weight masks (thesis 3.1)",
        "",
        "Accuracy [%] per split (seq2seq: exact match of greedy decoding); `~`: inverted mask.",
        "",
        result.accuracy_table(),
    ]
    if result.sharing is not None:
        figure = plot_per_layer_sharing(
            result.sharing, out / "sharing.png", labels=(result.targets[0], result.targets[1])
        )
        lines += [
            "",
            f"IoU {100 * result.iou:.1f} %, IoMin {100 * result.iomin:.1f} % "  # type: ignore[operator]
            f"between the masks of {result.targets[0]} and {result.targets[1]}.",
            "",
            "![per-layer sharing](sharing.png)",
        ]
        written.append(figure)
    report_path = out / "report.md"
    report_path.write_text("\n".join(lines) + "\n")
    return [*written, results_path, report_path]
