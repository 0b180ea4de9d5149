"""CNN class-removal weight-mask analysis: are there class-exclusive feature detectors? (thesis 3.4, B.3.8).

Protocol (Csordás thesis 3.4, the authors' ``cifar10_class_removal`` task): train a CNN classifier and
freeze it. Train a *control mask* on the full training set ("to highlight all used weights"). Then, for
every class ``c``, train a mask on the training set with class ``c`` removed, "so that the weights solely
responsible for this class will be absent from the resulting mask". The output layer's mask is *fixed*
to the control mask's while these masks train (``train_weight_mask(fixed=...)``), so the output unit of
``c`` stays connected and the analysis inspects the feature-detector layers, not the classifier:
``1 + n_classes`` masks in all (11 for 10 classes).

On the full validation set, the confusion matrix (rows: true class, columns: predicted; normalised per
row, i.e. rates) under the control mask and under each class-removed mask give

* the difference matrix ``removed - control`` per class (thesis Figs. B.11, B.12): which classes are
  predicted instead;
* the target class's relative drop ``(acc_control[c] - acc_removed[c]) / acc_control[c]`` (Fig. 3.7a);
* the largest relative drop of a non-target class divided by the target's, ``max(max_{j != c} r_j, 0)
  / r_c`` (Fig. 3.7b; NaN when the target does not drop). Both follow the authors' plotting code
  (``plot_cifar10_drop_per_class.py``).

Thesis claim (3.4, B.3.8): the target class drops sharply (simple CNN 40-60 %, ResNet-110 almost
100 %) while the other classes are barely affected (Fig. 3.7b; drawn on a 0-10 % axis): class-exclusive,
non-shared weights in the feature detectors. B.3.8: without dropout the per-class drop is smaller.

Models (:mod:`recombine.models.simple_cnn`): the thesis's simple CNN with dropout (``simple_cnn``) and
without (``simple_cnn_no_dropout``, the B.3.8 ablation). ResNet-110 is out of CPU scope. Data
(:mod:`recombine.tasks.class_images`): scikit-learn's embedded 8x8 digits by default, CIFAR-10 from the
official python pickles as an option.

:func:`run_masks_cnn` repeats this over architectures and seeds and writes ``report.md``,
``results.json``, ``class_drops.png`` (Fig. 3.7a/b) and ``confusion_difference.png`` (one class).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models.simple_cnn import SimpleCNN, SimpleCNNConfig
from recombine.probes.mask_analysis_common import (
    MeanStd,
    analyse_every_architecture_and_seed,
    check_choice,
    format_mean_std,
    random_batches,
    train_model,
    trial_settings,
    wall_time_note,
)
from recombine.probes.mask_sets import MaskSet
from recombine.probes.weight_masks import MaskedModel, MaskTrainingConfig, alpha_from_beta, train_weight_mask
from recombine.tasks.class_images import ClassImages, ClassImagesConfig, load_class_images, without_class

#: ``simple_cnn``: Tab. B.4 with dropout (thesis 3.4); ``simple_cnn_no_dropout``: the B.3.8 ablation
ARCHITECTURES = ("simple_cnn", "simple_cnn_no_dropout")
#: the parameters whose mask is fixed to the control mask's (thesis 3.4: the output layer)
OUTPUT_PREFIX = "output."
#: our reading of "drops significantly" / "only a small drop" (thesis 3.4), averaged over classes:
#: the target's relative drop at least this ...
CLAIM_MIN_TARGET_DROP = 0.25
#: ... and the largest non-target relative drop at most this fraction of the target's
CLAIM_MAX_OTHER_OVER_TARGET = 0.25
#: thesis B.3.8: "the decrease in performance for each of the classes is substantial, ranging from 40 to 60%"
THESIS_SIMPLE_CNN_DROP = (0.40, 0.60)


def _default_mask_config() -> MaskTrainingConfig:
    return MaskTrainingConfig(steps=20_000, learning_rate=1e-2, alpha=alpha_from_beta(1e-4, 128))  # B.3.8


@dataclass
class CNNMaskAnalysisConfig:
    """One class-removal analysis (thesis 3.4, B.3.8). Defaults: the thesis's CNN and step counts on the
    embedded digits; :func:`cpu_scale_config` is the scale of ``recombine reproduce masks-cnn``."""

    data: ClassImagesConfig = field(default_factory=ClassImagesConfig)
    architecture: str = "simple_cnn"
    model: SimpleCNNConfig = field(default_factory=SimpleCNNConfig)  # ``dropout`` follows ``architecture``
    train_steps: int = 20_000  # B.3.8
    batch_size: int = 128  # B.3.2
    learning_rate: float = 1e-3  # B.3.8
    grad_clip: float = 1.0  # B.3.2
    mask: MaskTrainingConfig = field(default_factory=_default_mask_config)
    removed_classes: list[int] = field(default_factory=list)  # classes to remove, one mask each; []: all
    heatmap_class: int = 0  # the class of confusion_difference.png (the first removed one if not removed)
    eval_batch_size: int = 1000
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.train_steps < 0 or self.batch_size < 1 or self.eval_batch_size < 1:
            raise UserError("train_steps must be >= 0, batch_size and eval_batch_size >= 1")
        check_choice("architecture", self.architecture, ARCHITECTURES)
        if self.batch_size < self.mask.n_samples:
            raise UserError(
                f"batch_size {self.batch_size} is smaller than mask.n_samples {self.mask.n_samples}"
            )


def cpu_scale_config() -> CNNMaskAnalysisConfig:
    """The scale of ``recombine reproduce masks-cnn``: the digits, half the Tab. B.4 widths, short runs.

    1500 mask steps at lr 2e-2 instead of 20k at 1e-2, so beta is 1e-3 (thesis 1e-4) as in the CPU scale
    of the double-addition analysis. In 300-step probes on the digits (docs/probes/masks-cnn.md), beta 1e-4
    removed no class-exclusive weights at lr 2e-2 (target drops 0 %), beta 1e-3 did (12-37 %), and the
    control mask kept the unmasked accuracy."""
    return CNNMaskAnalysisConfig(
        model=SimpleCNNConfig(channels=[16, 32, 64, 128]),
        train_steps=2_000,
        mask=MaskTrainingConfig(steps=1_500, learning_rate=2e-2, alpha=alpha_from_beta(1e-3, 128)),
    )


def build_model(config: CNNMaskAnalysisConfig, in_channels: int, n_classes: int) -> SimpleCNN:
    """The configured architecture: Tab. B.4 with or without its dropout layers."""
    model_config = dataclasses.replace(config.model, dropout=config.architecture == "simple_cnn")
    return SimpleCNN(in_channels, n_classes, model_config)


# --- confusion matrices and the Fig. 3.7 statistics ---


@torch.no_grad()
def confusion_matrix(
    model: torch.nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    batch_size: int = 1000,
    device: str = "cpu",
) -> np.ndarray:
    """Counts ``[n_classes, n_classes]``: row = true class, column = predicted class (argmax)."""
    predicted = []
    for start in range(0, len(images), batch_size):
        batch = torch.as_tensor(images[start : start + batch_size], device=device)
        predicted.append(model(batch).argmax(-1).cpu().numpy())
    predictions = np.concatenate(predicted) if predicted else np.zeros(0, dtype=np.int64)
    flat = np.asarray(labels, dtype=np.int64) * n_classes + predictions
    return np.bincount(flat, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def row_rates(confusion: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (the fraction of a true class predicted as each class; NaN if empty)."""
    counts = np.asarray(confusion, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), math.nan)


def predicted_instead(difference: np.ndarray, class_names: Sequence[str], target: int) -> str:
    """The class whose share of the target's images grows most under the removal, ``-`` if none grows.

    ``difference``: removed-minus-control row rates (row = true class)."""
    others = [j for j in range(len(class_names)) if j != target]
    gained = max(others, key=lambda j: difference[target, j])
    return class_names[gained] if difference[target, gained] > 0 else "-"


def class_removal_statistics(
    control: np.ndarray, removed: np.ndarray, target: int, class_names: Sequence[str]
) -> dict[str, Any]:
    """Fig. 3.7 numbers for the mask trained without ``target`` against the control mask.

    ``control`` and ``removed`` are confusion counts on the same validation set. Relative drop of class
    ``j``: ``r_j = (acc_control[j] - acc_removed[j]) / acc_control[j]`` (per-class accuracy = the
    diagonal of the row rates). ``largest_other_over_target = max(max_{j != target} r_j, 0) / r_target``
    (NaN unless the target drops)."""
    control_rates, removed_rates = row_rates(control), row_rates(removed)
    control_accuracy, removed_accuracy = np.diag(control_rates), np.diag(removed_rates)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = (control_accuracy - removed_accuracy) / control_accuracy
    others = [j for j in range(len(relative)) if j != target]
    worst = max(others, key=lambda j: -math.inf if math.isnan(relative[j]) else relative[j])
    largest_other = max(float(relative[worst]), 0.0)
    target_drop = float(relative[target])
    return {
        "control_accuracy": float(control_accuracy[target]),
        "removed_accuracy": float(removed_accuracy[target]),
        "drop": float(control_accuracy[target] - removed_accuracy[target]),
        "relative_drop": target_drop,  # Fig. 3.7a
        "largest_other_relative_drop": largest_other,
        "largest_other_over_target": largest_other / target_drop if target_drop > 0 else math.nan,  # 3.7b
        "largest_other_class": class_names[worst],
        "predicted_instead": predicted_instead(removed_rates - control_rates, class_names, target),
    }


# --- one trial: train, mask, evaluate ---


@dataclass
class CNNMaskAnalysisResult:
    class_names: tuple[str, ...]
    removed_classes: list[int]
    confusion: dict[str, np.ndarray]  # "none", "control", and one per removed class name
    masks: dict[str, MaskSet]  # "control" and one per removed class name
    model: torch.nn.Module
    train_losses: list[float]

    def statistics(self) -> dict[str, dict[str, Any]]:
        """:func:`class_removal_statistics` per removed class, by class name."""
        return {
            self.class_names[c]: class_removal_statistics(
                self.confusion["control"], self.confusion[self.class_names[c]], c, self.class_names
            )
            for c in self.removed_classes
        }

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers: accuracies, per-class statistics, their class means, the confusion counts."""
        classes = self.statistics()
        ratios = [s["largest_other_over_target"] for s in classes.values()]
        finite = [r for r in ratios if not math.isnan(r)]
        return {
            "accuracy": {
                name: float(np.trace(self.confusion[name]) / self.confusion[name].sum())
                for name in ("none", "control")
            },
            "classes": classes,
            "mean_over_classes": {
                "relative_drop": float(np.mean([s["relative_drop"] for s in classes.values()])),
                "largest_other_over_target": float(np.mean(finite)) if finite else math.nan,
            },
            "kept_fraction": {name: mask.kept_fraction() for name, mask in self.masks.items()},
            "final_train_loss": self.train_losses[-1] if self.train_losses else math.nan,
            "confusion": {name: matrix.tolist() for name, matrix in self.confusion.items()},
        }


def _cross_entropy(outputs: Any, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, labels)


def _batches(
    images: np.ndarray, labels: np.ndarray, config: CNNMaskAnalysisConfig, seed: int
) -> Iterator[Any]:
    return random_batches(images, labels, config.batch_size, seed, config.device)


def train_network(
    config: CNNMaskAnalysisConfig, data: ClassImages, seed: int
) -> tuple[SimpleCNN, list[float]]:
    """The CNN on the full training set (Adam, thesis B.3.2, B.3.8); left in eval mode."""
    torch.manual_seed(seed)
    model = build_model(config, data.in_channels, data.n_classes).to(config.device)
    losses = train_model(
        model,
        _batches(data.train_images, data.train_labels, config, seed),
        _cross_entropy,
        config.train_steps,
        config.learning_rate,
        config.grad_clip,
        f"{config.architecture} seed {seed}",
    )
    return model, losses


def output_layer_part(mask: MaskSet) -> MaskSet:
    """The output layer's entries of ``mask``: the part fixed for the class-removal masks (thesis 3.4)."""
    part = {name: m for name, m in mask.masks.items() if name.startswith(OUTPUT_PREFIX)}
    if not part:
        raise UserError(f"the mask covers no output-layer parameter ({OUTPUT_PREFIX}*): {mask.names}")
    return MaskSet(part)


def run_cnn_mask_analysis(
    config: CNNMaskAnalysisConfig, seed: int = 0, data: ClassImages | None = None
) -> CNNMaskAnalysisResult:
    """Train the CNN, the control mask and one class-removed mask per class; the confusion matrices."""
    data = data if data is not None else load_class_images(config.data, seed)
    removed_classes = list(dict.fromkeys(config.removed_classes)) or list(range(data.n_classes))
    for c in removed_classes:
        if not 0 <= c < data.n_classes:
            raise UserError(f"removed class {c} is not a class index 0..{data.n_classes - 1}")
    model, losses = train_network(config, data, seed)

    def confusion(evaluated: torch.nn.Module) -> np.ndarray:
        return confusion_matrix(
            evaluated,
            data.valid_images,
            data.valid_labels,
            data.n_classes,
            config.eval_batch_size,
            config.device,
        )

    control_batches = _batches(data.train_images, data.train_labels, config, 1000 * seed + 1)
    control = train_weight_mask(model, control_batches, _cross_entropy, config.mask, seed=100 * seed).binary
    masks = {"control": control}
    matrices = {"none": confusion(model), "control": confusion(MaskedModel(model, control))}
    fixed = output_layer_part(control)
    for c in removed_classes:
        images, labels = without_class(data.train_images, data.train_labels, c)
        batches = _batches(images, labels, config, 1000 * seed + 2 + c)
        name = data.class_names[c]
        masks[name] = train_weight_mask(
            model, batches, _cross_entropy, config.mask, seed=100 * seed + 1 + c, fixed=fixed
        ).binary
        matrices[name] = confusion(MaskedModel(model, masks[name]))
    return CNNMaskAnalysisResult(data.class_names, removed_classes, matrices, masks, model, losses)


# --- over architectures and seeds: report.md, results.json, figures ---


#: B.3.3: the control mask must keep the network's accuracy (here: lose at most this much), otherwise the
#: class-removed masks are compared against a damaged network and the claim is not testable
CONTROL_MAX_ACCURACY_LOSS = 0.05


def claim_check(aggregated: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the thesis 3.4 claim holds for one architecture (means over classes, then over seeds);
    ``testable`` is False when the control mask lost more than :data:`CONTROL_MAX_ACCURACY_LOSS`."""
    drop = aggregated["mean_over_classes"]["relative_drop"][0]
    ratio = aggregated["mean_over_classes"]["largest_other_over_target"][0]
    accuracy = aggregated["accuracy"]
    testable = accuracy["control"][0] >= accuracy["none"][0] - CONTROL_MAX_ACCURACY_LOSS
    holds = (
        testable
        and drop >= CLAIM_MIN_TARGET_DROP
        and not math.isnan(ratio)
        and ratio <= CLAIM_MAX_OTHER_OVER_TARGET
    )
    return {
        "mean_relative_drop": drop,
        "mean_largest_other_over_target": ratio,
        "testable": bool(testable),
        "holds": bool(holds),
    }


def mean_difference(per_seed: Mapping[str, Any], name: str) -> np.ndarray:
    """The removed-minus-control row-rate difference for class ``name``, averaged over seeds."""
    differences = [
        row_rates(np.asarray(s["confusion"][name])) - row_rates(np.asarray(s["confusion"]["control"]))
        for s in per_seed.values()
    ]
    return np.mean(differences, axis=0)


def _scale_note(config: CNNMaskAnalysisConfig, seeds: Sequence[int], data: ClassImages) -> str:
    mask = config.mask
    sizes = f"{len(data.train_labels)} training, {len(data.valid_labels)} validation images"
    source = f"scikit-learn 8x8 digits ({sizes})" if config.data.source == "digits" else f"CIFAR-10 ({sizes})"
    return (
        f"Seeds {list(seeds)}; mean ± std over seeds. {source}. Tab. B.4 CNN with channels "
        f"{config.model.channels}; {config.train_steps} training steps (batch {config.batch_size}, lr "
        f"{config.learning_rate}); masks {mask.steps} steps each (lr {mask.learning_rate}, alpha "
        f"{mask.alpha:.3g}, {mask.n_samples} samples). Thesis: CIFAR-10, channels [32, 64, 128, 256], 20k "
        "training steps, 20k steps per mask, beta 1e-4, 10 seeds; ResNet-110 (out of CPU scope)."
    )


def render_report(
    config: CNNMaskAnalysisConfig,
    seeds: Sequence[int],
    aggregated: Mapping[str, Mapping[str, Any]],
    claims: Mapping[str, Mapping[str, Any]],
    instead: Mapping[str, Mapping[str, str]],
    heatmap: str,
    data: ClassImages,
    wall_seconds: float | None = None,
) -> str:
    """``aggregated[architecture]``: the mean ± std tree of the seeds' summaries."""
    lines = [
        "# CNN class removal: class-exclusive weights in the feature detectors (thesis 3.4, Fig. 3.7, B.3.8)",
        "",
        _scale_note(config, seeds, data),
        "",
        wall_time_note(aggregated, wall_seconds),
        "",
        "**Thesis claim (3.4):** with the mask trained on the data without class c (output layer fixed to "
        "the control mask's), class c's accuracy drops sharply (simple CNN: 40-60 %, B.3.8) while the other "
        "classes are barely affected (Fig. 3.7b): class-exclusive, non-shared weights in the feature "
        "detectors. We count it as holding when, averaged over classes, the target's relative drop is at "
        f"least {100 * CLAIM_MIN_TARGET_DROP:.0f} % and the largest non-target relative drop is at most "
        f"{100 * CLAIM_MAX_OTHER_OVER_TARGET:.0f} % of the target's; it is not testable when the control "
        f"mask loses more than {100 * CONTROL_MAX_ACCURACY_LOSS:.0f} points of the unmasked accuracy "
        "(B.3.3).",
        "",
        "| architecture | accuracy, no mask [%] | accuracy, control mask [%] | mean relative drop [%] (3.7a) "
        "| mean largest other / target [%] (3.7b) | claim holds |",
        "|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        claim = claims[architecture]
        lines.append(
            f"| {architecture} | {format_mean_std(stats['accuracy']['none'])} "
            f"| {format_mean_std(stats['accuracy']['control'])} "
            f"| {format_mean_std(stats['mean_over_classes']['relative_drop'])} "
            f"| {format_mean_std(stats['mean_over_classes']['largest_other_over_target'])} "
            f"| {'**yes**' if claim['holds'] else '**no**' if claim['testable'] else 'not testable'} |"
        )
    if {"simple_cnn", "simple_cnn_no_dropout"} <= set(aggregated):
        with_dropout = claims["simple_cnn"]["mean_relative_drop"]
        without = claims["simple_cnn_no_dropout"]["mean_relative_drop"]
        spread = (
            aggregated["simple_cnn"]["mean_over_classes"]["relative_drop"][1]
            + aggregated["simple_cnn_no_dropout"]["mean_over_classes"]["relative_drop"][1]
        )
        difference = with_dropout - without
        verdict = (
            "the thesis's direction" if difference > spread
            else "within the seed spread" if difference > -spread else "the opposite of the thesis"
        )  # fmt: skip
        lines += [
            "",
            "Dropout ablation (B.3.8: dropout gives a 30-40 % higher per-class drop): mean relative drop "
            f"{100 * with_dropout:.0f} % with dropout vs {100 * without:.0f} % without, a difference of "
            f"{100 * difference:.0f} points against a summed seed std of {100 * spread:.0f} ({verdict}).",
        ]
    lines += [
        "",
        "Per removed class (mean ± std over seeds). Accuracy is the class's recall on the validation set; "
        "relative drop r = (control - removed) / control (Fig. 3.7a); largest other / target = the largest r "
        "of a non-target class (clipped at 0) over the target's r (Fig. 3.7b); predicted instead: the class "
        "whose share of the target's images grows most (seed-mean difference matrix).",
        "",
        "| architecture | class | control acc. [%] | removed acc. [%] | relative drop [%] "
        "| largest other / target [%] | predicted instead | kept weights [%] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        for name, cls in stats["classes"].items():
            lines.append(
                f"| {architecture} | {name} | {format_mean_std(cls['control_accuracy'])} "
                f"| {format_mean_std(cls['removed_accuracy'])} | {format_mean_std(cls['relative_drop'])} "
                f"| {format_mean_std(cls['largest_other_over_target'])} "
                f"| {instead[architecture][name]} "
                f"| {format_mean_std(stats['kept_fraction'][name])} |"
            )
    lines += [
        "",
        "![Fig. 3.7a/b: relative drop of the target class and largest non-target drop](class_drops.png)",
        "",
        f"![confusion-matrix difference with class {heatmap} removed](confusion_difference.png)",
        "",
    ]
    return "\n".join(lines)


def plot_class_drops(
    aggregated: Mapping[str, Mapping[str, Any]], class_names: Sequence[str], path: str | Path
) -> Path:
    """Fig. 3.7: (a) the target's relative drop, (b) largest non-target drop over the target's, per class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(max(5.0, 0.6 * len(class_names) + 1.5), 4.6), sharex=True)
    width = 0.8 / len(aggregated)
    keys = [
        ("relative_drop", "(a) relative drop [%]"),
        ("largest_other_over_target", "(b) largest other / target [%]"),
    ]
    for ax, (key, label) in zip(axes, keys, strict=True):
        for index, (architecture, stats) in enumerate(aggregated.items()):
            names = [n for n in class_names if n in stats["classes"]]
            positions = [class_names.index(n) + (index - (len(aggregated) - 1) / 2) * width for n in names]
            values: list[MeanStd] = [stats["classes"][n][key] for n in names]
            ax.bar(
                positions,
                [100 * v[0] for v in values],
                width=width,
                yerr=[100 * v[1] for v in values],
                capsize=2,
                label=architecture,
            )
        ax.set_ylabel(label, fontsize=8)
    axes[0].legend(fontsize=7, ncol=len(aggregated))
    axes[1].set_xticks(range(len(class_names)), class_names, rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_confusion_difference(
    differences: Mapping[str, np.ndarray], class_names: Sequence[str], removed: str, path: str | Path
) -> Path:
    """Heat maps of removed-minus-control row rates [%] for one class, one panel per architecture (B.11)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(class_names)
    fig, axes = plt.subplots(1, len(differences), figsize=(4.2 * len(differences), 4.0), squeeze=False)
    largest = max(float(np.nanmax(np.abs(d), initial=0.0)) for d in differences.values())
    limit = max(1.0, 100 * largest)  # [%]; symmetric, so white is "no change"
    for ax, (architecture, difference) in zip(axes[0], differences.items(), strict=True):
        image = ax.imshow(100 * difference, cmap="RdBu_r", vmin=-limit, vmax=limit)
        for i in range(n):
            for j in range(n):
                value = 100 * difference[i, j]
                if abs(value) >= 0.5:
                    ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=6)
        ax.set_xticks(range(n), class_names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), class_names, fontsize=7)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(f"{architecture}\nclass {removed} removed", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="difference [%]")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass
class MaskCNNReproductionConfig:
    """``recombine reproduce masks-cnn``: :func:`cpu_scale_config` per architecture over ``seeds``.

    ``architectures`` replaces ``analysis.architecture``: every listed one (``simple_cnn``,
    ``simple_cnn_no_dropout``) runs with the same ``analysis`` settings."""

    analysis: CNNMaskAnalysisConfig = field(default_factory=cpu_scale_config)
    architectures: list[str] = field(default_factory=lambda: list(ARCHITECTURES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])

    def __post_init__(self) -> None:
        if not self.architectures:
            raise UserError("give at least one architecture")
        for architecture in self.architectures:
            check_choice("architecture", architecture, ARCHITECTURES)


def run_masks_cnn(out: str | Path, config: MaskCNNReproductionConfig) -> dict[str, Any]:
    """The analysis for every architecture and seed; writes report.md, results.json and the figures."""
    if not config.seeds:
        raise UserError("give at least one seed")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    datasets: dict[int, ClassImages] = {}

    def data_for(seed: int) -> ClassImages:  # the digits split depends on the seed, CIFAR-10 does not
        key = seed if config.analysis.data.source == "digits" else 0
        if key not in datasets:
            datasets[key] = load_class_images(config.analysis.data, seed)
        return datasets[key]

    first = data_for(config.seeds[0])
    if not 0 <= config.analysis.heatmap_class < first.n_classes:
        raise UserError(
            f"heatmap_class {config.analysis.heatmap_class} is not a class index 0..{first.n_classes - 1}"
        )

    def analyse(architecture: str, seed: int) -> dict[str, Any]:
        analysis = dataclasses.replace(config.analysis, architecture=architecture)
        return run_cnn_mask_analysis(analysis, seed, data_for(seed)).summary()

    trials = analyse_every_architecture_and_seed(
        config.architectures,
        config.seeds,
        analyse,
        lambda s: (
            f"mean relative drop {s['mean_over_classes']['relative_drop']:.2f}, largest other / target "
            f"{s['mean_over_classes']['largest_other_over_target']:.2f}"
        ),
        out_dir=out,
        settings=trial_settings(config),
    )
    names = first.class_names
    aggregated = {name: stats["mean_std"] for name, stats in trials["architectures"].items()}
    claims = {name: claim_check(stats) for name, stats in aggregated.items()}
    removed_names = list(aggregated[config.architectures[0]]["classes"])
    heatmap = names[config.analysis.heatmap_class]
    if heatmap not in removed_names:  # heatmap_class was not removed: draw the first removed class
        heatmap = removed_names[0]
    differences = {
        architecture: {name: mean_difference(stats["per_seed"], name) for name in removed_names}
        for architecture, stats in trials["architectures"].items()
    }
    instead = {
        architecture: {
            name: predicted_instead(differences[architecture][name], names, names.index(name))
            for name in removed_names
        }
        for architecture in differences
    }
    results = {
        "config": asdict(config),
        "seeds": list(config.seeds),
        "class_names": list(names),
        **trials,
        "claim": claims,
        "mean_confusion_difference": {
            architecture: {name: matrix.tolist() for name, matrix in per_class.items()}
            for architecture, per_class in differences.items()
        },
        "torch": torch.__version__,
        "thesis": {
            "simple_cnn_relative_drop": THESIS_SIMPLE_CNN_DROP,
            "claim_min_target_drop": CLAIM_MIN_TARGET_DROP,
            "claim_max_other_over_target": CLAIM_MAX_OTHER_OVER_TARGET,
        },
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    report = render_report(
        config.analysis, config.seeds, aggregated, claims, instead, heatmap, first, results["wall_seconds"]
    )
    (out / "report.md").write_text(report)
    plot_class_drops(aggregated, names, out / "class_drops.png")
    plot_confusion_difference(
        {architecture: per_class[heatmap] for architecture, per_class in differences.items()},
        names,
        heatmap,
        out / "confusion_difference.png",
    )
    return results
