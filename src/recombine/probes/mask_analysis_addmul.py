"""Add/mul weight-mask analysis, FNN or LSTM: is each operation its own module? (thesis 3.2.1, B.3.4).

Protocol (thesis 3.2.1): train the network on addition and multiplication (mod 100, shared inputs and
outputs, an operation flag), freeze it, then train one mask on the addition examples only and one on
the multiplication examples only (and, as the B.3.3 sanity check, one on the full task). Report

* accuracy of the model under each mask and each inverted mask, on each operation (thesis Tab. B.1:
  columns ``full``, ``add``, ``~add``, ``mul``, ``~mul``; ``none`` is the unmasked model);
* which operation the masked model actually performs (thesis Fig. 3.2): the fraction of predictions
  equal to ``a + b``, to ``a * b``, or to neither (``none``); the first two overlap where
  ``a + b = a * b (mod 100)``;
* per-layer sharing between the add and mul masks (thesis Fig. 3.1), IoU and IoMin, and weights kept
  per layer (Fig. B.6).

Architectures (``architecture``): ``fnn`` (:mod:`recombine.models.fnn`) and ``lstm``, the thesis's LSTM
for this task: "we present the full input for a fixed number of timesteps. The result is the output at
the final step" (3.2.1), "3 time steps where the input is repeated for every step" (B.3.4)
(:class:`recombine.models.arithmetic_lstm.RepeatedInputLSTM`). The thesis has this one LSTM setting for
add/mul; its two LSTM settings are those of double addition (:mod:`.mask_analysis_double_add`).

Thesis scale (B.3.4): an FNN of 4 hidden layers of 2000 or an LSTM with a 256 state, 20k training
steps, masks 20k steps each, lr 1e-2, ``beta = 1e-4`` (``alpha = beta / batch size``). The defaults
here are the "small" FNN of B.3.4 (hidden sizes 400, 400, 200), which the thesis says solves the task;
:func:`cpu_scale_config` is the scale of ``recombine reproduce masks-addmul``, which
:func:`run_addmul_reproduction` runs over architectures and seeds (``report.md``, ``results.json``,
``sharing.png``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models.arithmetic_lstm import ArithmeticLSTMConfig, RepeatedInputLSTM
from recombine.models.fnn import FeedForwardNetwork, FNNConfig
from recombine.probes.mask_analysis_common import (
    ArithmeticMaskAnalysisConfig,
    accuracy_table,
    analyse_every_architecture_and_seed,
    check_choice,
    format_mean_std,
    plot_sharing_panels,
    random_batches,
    sharing_summary,
    train_model,
    trial_settings,
    wall_time_note,
)
from recombine.probes.mask_sets import (
    LayerSharing,
    MaskSet,
    intersection_over_minimum,
    intersection_over_union,
    per_layer_sharing,
)
from recombine.probes.weight_masks import (
    MaskedModel,
    MaskTrainingConfig,
    ModelOutput,
    alpha_from_beta,
    train_weight_mask,
)
from recombine.tasks.addmul import OPERATIONS, AddMulConfig, AddMulSplit, build_addmul

MASK_TARGETS = ("full", *OPERATIONS)
#: ``fnn``: the ReLU FNN; ``lstm``: the input repeated for ``lstm.steps`` steps, read at the last (B.3.4)
ARCHITECTURES = ("fnn", "lstm")

#: Thesis Tab. B.1: accuracy [%] (mean, std over 10 seeds) per architecture, mask column and operation.
THESIS_TABLE_B_1: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    "fnn": {
        "full": {"add": (100.0, 0.0), "mul": (100.0, 0.2)},
        "add": {"add": (100.0, 0.0), "mul": (0.0, 0.0)},
        "~add": {"add": (13.0, 5.5), "mul": (69.0, 9.7)},
        "mul": {"add": (1.0, 0.0), "mul": (100.0, 0.0)},
        "~mul": {"add": (20.0, 7.0), "mul": (17.0, 5.8)},
    },
    "lstm": {
        "full": {"add": (100.0, 0.0), "mul": (100.0, 0.1)},
        "add": {"add": (100.0, 0.0), "mul": (3.0, 1.2)},
        "~add": {"add": (2.0, 0.6), "mul": (6.0, 0.8)},
        "mul": {"add": (2.0, 0.6), "mul": (100.0, 0.0)},
        "~mul": {"add": (1.0, 0.2), "mul": (2.0, 1.2)},
    },
}
#: Thesis 3.2.1 (Fig. B.6): "the multiplication uses 3.8 times more weights than the addition".
THESIS_MUL_TO_ADD_WEIGHTS = 3.8


def _default_mask_config() -> MaskTrainingConfig:
    return MaskTrainingConfig(steps=20_000, learning_rate=1e-2, alpha=alpha_from_beta(1e-4, 128))


@dataclass
class AddMulAnalysisConfig(ArithmeticMaskAnalysisConfig):
    """Add/mul (thesis 3.2.1): ``lstm`` is B.3.4's 256 units, 3 steps."""

    ARCHITECTURES: ClassVar[tuple[str, ...]] = ARCHITECTURES

    mask: MaskTrainingConfig = field(default_factory=_default_mask_config)


def cpu_scale_config() -> AddMulAnalysisConfig:
    """The scale of ``recombine reproduce masks-addmul`` (FNN and LSTM, 3 seeds each, one thread)."""
    return AddMulAnalysisConfig(
        task=AddMulConfig(n_digits=2, n_train=100_000, n_test=2_000),
        model=FNNConfig(hidden_sizes=[400, 400, 200]),
        lstm=ArithmeticLSTMConfig(hidden_size=256, n_layers=1, steps=3),
        train_steps=10_000,
        batch_size=128,
        learning_rate=1e-3,
        mask=MaskTrainingConfig(steps=1_500, learning_rate=2e-2, alpha=alpha_from_beta(1e-4, 128)),
    )


def build_model(config: AddMulAnalysisConfig, n_inputs: int, n_outputs: int) -> torch.nn.Module:
    """The configured architecture, ``[B, n_inputs] -> [B, n_outputs]`` logits."""
    if config.architecture == "lstm":
        return RepeatedInputLSTM(n_inputs, n_outputs, config.lstm, n_steps=config.lstm.steps)
    return FeedForwardNetwork(n_inputs, n_outputs, config.model)


@dataclass
class AddMulAnalysisResult:
    accuracy: dict[str, dict[str, float]]  # mask ("none", "add", "~add", ...) -> operation -> accuracy
    performed: dict[str, dict[str, dict[str, float]]]  # mask -> target op -> {"add", "mul", "none"}
    sharing: dict[str, LayerSharing]  # add mask vs mul mask, per parameter
    iou: float  # add vs mul over all masked weights
    iomin: float
    masks: dict[str, MaskSet]  # "full", "add", "mul"
    model: torch.nn.Module
    train_losses: list[float]

    def accuracy_table(self) -> str:
        """Markdown, one row per operation, one column per mask (thesis Tab. B.1 layout)."""
        return accuracy_table(self.accuracy, OPERATIONS, "operation")

    def summary(self) -> dict[str, object]:
        """JSON-ready numbers: accuracies, performed operations, IoU/IoMin, per-layer sharing."""
        return {
            "accuracy": self.accuracy,
            "performed": self.performed,
            "iou": self.iou,
            "iomin": self.iomin,
            "kept_fraction": {name: mask.kept_fraction() for name, mask in self.masks.items()},
            "n_kept": {name: mask.n_kept() for name, mask in self.masks.items()},
            "sharing": sharing_summary(self.sharing, ("add", "mul")),
            "final_train_loss": self.train_losses[-1] if self.train_losses else float("nan"),
        }


def digit_loss(outputs: ModelOutput, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the result digits (each a 10-way classification)."""
    assert isinstance(outputs, torch.Tensor)
    return F.cross_entropy(outputs.reshape(-1, 10), targets.reshape(-1))


@torch.no_grad()
def predict_numbers(model: torch.nn.Module, inputs: torch.Tensor, n_digits: int) -> np.ndarray:
    digits = model(inputs).reshape(len(inputs), n_digits, 10).argmax(-1).cpu().numpy()
    return (digits * 10 ** np.arange(n_digits)).sum(-1)


def performed_operation(split: AddMulSplit, predicted: np.ndarray, n_digits: int) -> dict[str, float]:
    """Fractions of predictions equal to ``a + b``, to ``a * b`` (mod 10^n), or to neither (Fig. 3.2)."""
    a, b = split.operands[:, 0], split.operands[:, 1]
    is_add = predicted == (a + b) % 10**n_digits
    is_mul = predicted == (a * b) % 10**n_digits
    return {
        "add": float(is_add.mean()),
        "mul": float(is_mul.mean()),
        "none": float((~is_add & ~is_mul).mean()),
    }


def train_network(
    config: AddMulAnalysisConfig, train: AddMulSplit, seed: int
) -> tuple[torch.nn.Module, list[float]]:
    """The configured network trained on both operations (Adam, clipping; B.3.2), in eval mode."""
    torch.manual_seed(seed)
    model = build_model(config, train.inputs.shape[1], 10 * config.task.n_digits).to(config.device)
    batches = random_batches(train.inputs, train.targets, config.batch_size, seed, config.device)
    losses = train_model(
        model,
        batches,
        digit_loss,
        config.train_steps,
        config.learning_rate,
        config.grad_clip,
        f"{config.architecture} seed {seed}",
    )
    return model, losses


def run_addmul_analysis(config: AddMulAnalysisConfig, seed: int = 0) -> AddMulAnalysisResult:
    """Train the network, the masks, and evaluate every mask and inverted mask on both operations."""
    splits = build_addmul(config.task, seed)
    n_digits = config.task.n_digits
    model, losses = train_network(config, splits["train"], seed)

    targets = MASK_TARGETS if config.full_mask else OPERATIONS
    masks: dict[str, MaskSet] = {}
    for index, target in enumerate(targets):
        data = splits["train"] if target == "full" else splits["train"].where(target)
        batches = random_batches(
            data.inputs, data.targets, config.batch_size, seed * 1000 + index + 1, config.device
        )
        label = f"{config.architecture} seed {seed}: {target} mask"
        trained = train_weight_mask(
            model, batches, digit_loss, config.mask, seed=seed + index, description=label
        )
        masks[target] = trained.binary

    evaluated: dict[str, torch.nn.Module] = {"none": model}
    for target, mask in masks.items():
        evaluated[target] = MaskedModel(model, mask)
        if target != "full":
            evaluated[f"~{target}"] = MaskedModel(model, ~mask)
    accuracy: dict[str, dict[str, float]] = {}
    performed: dict[str, dict[str, dict[str, float]]] = {}
    for name, evaluated_model in evaluated.items():
        accuracy[name], performed[name] = {}, {}
        for op in OPERATIONS:
            test = splits["test"].where(op)
            inputs = torch.as_tensor(test.inputs, device=config.device)
            predicted = predict_numbers(evaluated_model, inputs, n_digits)
            correct = predicted == (test.targets * 10 ** np.arange(n_digits)).sum(-1)
            accuracy[name][op] = float(correct.mean())
            performed[name][op] = performed_operation(test, predicted, n_digits)
    return AddMulAnalysisResult(
        accuracy=accuracy,
        performed=performed,
        sharing=per_layer_sharing(masks["add"], masks["mul"]),
        iou=intersection_over_union(masks["add"], masks["mul"]),
        iomin=intersection_over_minimum(masks["add"], masks["mul"]),
        masks=masks,
        model=model,
        train_losses=losses,
    )


# --- over architectures and seeds: report.md, results.json, sharing.png ---


def layer_roles(layers: Sequence[str]) -> dict[str, str]:
    """``input`` for the first masked weight, ``output`` for the last, ``hidden`` between (Fig. 3.1)."""
    return {
        layer: "input" if index == 0 else "output" if index == len(layers) - 1 else "hidden"
        for index, layer in enumerate(layers)
    }


def io_vs_hidden_sharing(sharing: Mapping[str, Mapping[str, tuple[float, float]]]) -> tuple[float, float]:
    """Mean shared fraction (the mean of the add and mul bars) over the I/O layers and over the hidden ones.

    The thesis's claim (3.2.1, Fig. 3.1): "more sharing in the input and output layers and less in the
    hidden layers"."""
    roles = layer_roles(list(sharing))
    per_layer = {layer: (s["shared_of_add"][0] + s["shared_of_mul"][0]) / 2 for layer, s in sharing.items()}
    io = [v for layer, v in per_layer.items() if roles[layer] != "hidden"]
    hidden = [v for layer, v in per_layer.items() if roles[layer] == "hidden"]
    return float(np.mean(io)), float(np.mean(hidden)) if hidden else float("nan")


def _scale_note(config: MaskAddMulReproductionConfig) -> str:
    analysis = config.analysis
    mask = analysis.mask
    parts = []
    if "fnn" in config.architectures:
        parts.append(f"FNN hidden sizes {analysis.model.hidden_sizes}")
    if "lstm" in config.architectures:
        lstm = analysis.lstm
        parts.append(
            f"LSTM {lstm.n_layers} x {lstm.hidden_size}, input repeated for {lstm.steps} steps, "
            "read at the last"
        )
    return (
        f"Seeds {list(config.seeds)}; mean ± std over seeds. {'; '.join(parts)}. "
        f"{analysis.train_steps} training steps (batch {analysis.batch_size}, lr {analysis.learning_rate}); "
        f"masks {mask.steps} steps each (lr {mask.learning_rate}, alpha {mask.alpha:.3g}, "
        f"{mask.n_samples} samples); modulo {analysis.task.modulus}, {analysis.task.n_train} training and "
        f"{analysis.task.n_test} test examples. Thesis (B.3.4): FNN 4 x 2000, LSTM 256, 20k training "
        "steps, 20k steps per mask, mask lr 1e-2, beta 1e-4, 10 seeds."
    )


def render_addmul_report(
    config: MaskAddMulReproductionConfig, aggregated: Mapping[str, Any], wall_seconds: float | None = None
) -> str:
    """``aggregated[architecture]``: :func:`~.mask_analysis_common.mean_std_tree` of the seeds' summaries."""
    lines = [
        "# Add/mul: weight masks of an FNN and an LSTM (thesis 3.2.1, Fig. 3.1, Fig. 3.2, Tab. B.1)",
        "",
        _scale_note(config),
        "",
        wall_time_note(aggregated, wall_seconds),
        "",
        "## Accuracy under the masks (Tab. B.1)",
        "",
        "Accuracy [%] on held-out additions and multiplications. The mask column: `none` unmasked, "
        "`full` the B.3.3 sanity check (mask trained on both operations), `add` / `mul` the mask "
        "trained on that operation only, `~`: that mask inverted (every weight the operation needs "
        "removed). Own mask: `add` on add; the other operation's mask: `mul` on add; inverted: `~add` on "
        "add.",
        "",
        "| architecture | mask | add (ours) | add (thesis) | mul (ours) | mul (thesis) |",
        "|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        thesis = THESIS_TABLE_B_1.get(architecture, {})
        for mask, per_op in stats["accuracy"].items():
            cells = []
            for op in OPERATIONS:
                reference = thesis.get(mask, {}).get(op)
                cells += [format_mean_std(per_op[op]), format_mean_std(reference, 1.0) if reference else "-"]
            lines.append(f"| {architecture} | {mask} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Weight sharing between the add and mul masks (Fig. 3.1, Fig. B.6)",
        "",
        "Per layer: IoU and IoMin of the two masks, the share of each mask's weights the other mask keeps "
        "too (the bars of Fig. 3.1), and the weights each mask keeps [%].",
        "",
        "| architecture | layer | role | IoU [%] | IoMin [%] | add weights shared [%] "
        "| mul weights shared [%] | add kept [%] | mul kept [%] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        sharing = stats["sharing"]
        roles = layer_roles(list(sharing))
        for layer, s in sharing.items():
            kept_add = (s["n_a"][0] / s["n_total"][0], s["n_a"][1] / s["n_total"][0])
            kept_mul = (s["n_b"][0] / s["n_total"][0], s["n_b"][1] / s["n_total"][0])
            cells = [format_mean_std(s[k]) for k in ("iou", "iomin", "shared_of_add", "shared_of_mul")]
            cells += [format_mean_std(kept_add), format_mean_std(kept_mul)]
            lines.append(f"| {architecture} | `{layer}` | {roles[layer]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| architecture | IoU [%] | IoMin [%] | mul / add kept weights | thesis | I/O vs hidden sharing |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for architecture, stats in aggregated.items():
        io, hidden = io_vs_hidden_sharing(stats["sharing"])
        ratio = (
            stats["n_kept"]["mul"][0] / stats["n_kept"]["add"][0]
            if stats["n_kept"]["add"][0]
            else float("nan")
        )
        verdict = "more in I/O" if io > hidden else "not more in I/O"
        lines.append(
            f"| {architecture} | {format_mean_std(stats['iou'])} | {format_mean_std(stats['iomin'])} | "
            f"{ratio:.1f} | {THESIS_MUL_TO_ADD_WEIGHTS} | "
            f"{100 * io:.0f} % vs {100 * hidden:.0f} %: {verdict} |"
        )
    lines += [
        "",
        "I/O vs hidden: the mean of the two shared-weight bars, averaged over the input and output layers "
        'and over the hidden layers. Thesis (3.2.1, Fig. 3.1): "more sharing in the input and output '
        'layers and less in the hidden layers", for both the FNN and the LSTM; the mul/add ratio is the '
        "ratio of the mean kept-weight counts (thesis: 3.8, Fig. B.6).",
        "",
        "## Which operation the masked network performs (Fig. 3.2)",
        "",
        "Fraction [%] of predictions equal to a + b, to a * b, or to neither, when one operation's mask is "
        "applied to the other operation's examples. Thesis: the FNN performs the operation of its mask, the "
        "LSTM tends to give invalid outputs (neither).",
        "",
        "| architecture | mask | examples | a + b | a * b | neither |",
        "|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        for mask, op in (("add", "mul"), ("mul", "add")):
            performed = stats["performed"][mask][op]
            cells = [format_mean_std(performed[k]) for k in ("add", "mul", "none")]
            lines.append(f"| {architecture} | {mask} | {op} | " + " | ".join(cells) + " |")
    lines += ["", "![per-layer sharing](sharing.png)", ""]
    return "\n".join(lines)


@dataclass
class MaskAddMulReproductionConfig:
    """``recombine reproduce masks-addmul``: :func:`cpu_scale_config` per architecture over ``seeds``.

    ``architectures`` replaces ``analysis.architecture``: every listed one is run with the same
    ``analysis`` settings."""

    analysis: AddMulAnalysisConfig = field(default_factory=cpu_scale_config)
    architectures: list[str] = field(default_factory=lambda: list(ARCHITECTURES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])

    def __post_init__(self) -> None:
        if not self.architectures or not self.seeds:
            raise UserError("give at least one architecture and one seed")
        for architecture in self.architectures:
            check_choice("architecture", architecture, ARCHITECTURES)


def run_addmul_reproduction(config: MaskAddMulReproductionConfig, out: str | Path) -> dict[str, object]:
    """The analysis for every architecture and seed; writes report.md, results.json and sharing.png."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trials = analyse_every_architecture_and_seed(
        config.architectures,
        config.seeds,
        lambda architecture, seed: run_addmul_analysis(
            dataclasses.replace(config.analysis, architecture=architecture), seed
        ).summary(),
        lambda summary: f"mul under its mask {summary['accuracy']['mul']['mul']:.3f}",
        out_dir=out,
        settings=trial_settings(config.analysis),
    )
    aggregated = {name: stats["mean_std"] for name, stats in trials["architectures"].items()}
    results = {
        "config": asdict(config),
        "seeds": list(config.seeds),
        **trials,
        "torch": torch.__version__,
        "thesis": {"table_b_1": THESIS_TABLE_B_1, "mul_to_add_weights": THESIS_MUL_TO_ADD_WEIGHTS},
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    (out / "report.md").write_text(render_addmul_report(config, aggregated, results["wall_seconds"]))  # type: ignore[arg-type]
    plot_sharing_panels(
        {architecture: stats["sharing"] for architecture, stats in aggregated.items()},
        [("shared_of_add", "+"), ("shared_of_mul", "*")],
        out / "sharing.png",
        title="add/mul: share of each mask's weights the other mask keeps",
    )
    return results


def run_masks_addmul(out: str | Path, config: MaskAddMulReproductionConfig) -> dict[str, object]:
    """:func:`run_addmul_reproduction` in the ``run(out_dir, config)`` form of a scripted reproduction."""
    return run_addmul_reproduction(config, out)
