"""Double-addition weight-mask analysis, FNN and LSTMs: is addition reused across two pairs? (thesis 3.2.2).

Task (thesis 3.2.2, :func:`recombine.tasks.addmul.build_double_addition`): ``a + b`` and ``c + d``
modulo 100 on separate units, 80 inputs and 40 outputs (pair 1 is the first half of both).

Architectures (``architecture``; all map the 80 inputs to the 40 output logits):

* ``fnn``: "for the FNN, we perform two forward passes. In each pass, we feed only one pair of numbers
  to the network (either a, b or c, d), while zeroing out the other" (3.2.2). Every example therefore
  gives two *passes*; pass ``p`` has the other pair zeroed (:func:`~recombine.tasks.addmul.only_pair`)
  and is scored on pair ``p``'s 20 output logits only. Training and evaluation use both passes.
* ``lstm_together``, the thesis's "LSTM" row of Tab. 3.1: "both pairs are presented together for a
  fixed number of steps, and the result is the final output" (3.2.2); "both tuples are presented for
  all 6 steps and the output is read from the last step" (B.3.5)
  (:class:`~recombine.models.arithmetic_lstm.RepeatedInputLSTM`, ``2 * lstm.steps`` steps).
* ``lstm_forced``, "LSTM (forced)": "feeding a single pair for multiple steps with the other zeroed out,
  and then read its output. This procedure is then repeated for the second pair without resetting the
  state" (3.2.2); pair 1 for the first 3 steps, read at the 3rd, pair 2 for the next 3, read at the 6th
  (B.3.5) (:class:`~recombine.models.arithmetic_lstm.PairByPairLSTM`).
* ``fnn_copied_io``, the sanity check of thesis B.3.1 (Fig. B.2): the FNN, trained as above, then pair
  2's input and output weights are overwritten with copies of pair 1's
  (:func:`copy_pair1_io_to_pair2`), "This ensures that the hidden layers cannot see any difference between
  the two pairs". The masks should then find the hidden layers almost perfectly shared, while the first
  and last layers stay unshared ("identical, but non-shared copies of the weights"): evidence that the
  method can discover sharing where there is some.

The LSTMs train on the full input, scored on both pairs, and are evaluated on the full input. The mask
for pair ``p`` trains on pair ``p``'s examples with the other pair's inputs zeroed, scored on pair
``p`` only, for every architecture (for the FNN these are its pair-``p`` passes; for the LSTMs this
follows the authors' public code, which zeroes the other tuple while a tuple's mask trains).

Protocol (thesis 3.2.2, B.3.4, B.3.5): train the network on the full task, freeze it, train a mask on
the full task (the B.3.3 sanity check), one on pair 1 and one on pair 2, then report

* accuracy on each pair under each mask and each inverted mask (thesis Tab. 3.1: columns ``full``,
  ``pair1``, ``~pair1``, ``pair2``, ``~pair2``; ``none`` is the unmasked model). The key result: the
  inverted pair-1 mask (every weight pair 1 needs removed) keeps pair 2 accurate (FNN 94 +- 6.7 %,
  LSTM 100 +- 0.2 %, LSTM forced 96 +- 4.1 %);
* the hidden-layer inversion of Tab. B.2 (``hidden~pair1``, ``hidden~pair2``): the mask inverted on the
  hidden layers only, the full-task mask on the input and output layers (the first and last masked
  weight matrices; thesis B.3.5);
* per-layer sharing between the pair-1 and pair-2 masks (thesis Fig. 3.3: "the first and last layers
  have no shared weights"), with IoU and IoMin per layer and over all layers (thesis 3.1).

:func:`run_double_add_reproduction` repeats this over architectures and seeds and writes ``report.md``
(mean +- std, the thesis's numbers next to ours), ``results.json`` and ``sharing.png`` (Fig. 3.3 style,
mean +- std, one panel per architecture).

Thesis scale (B.3.4, B.3.5): the FNN of B.3.4 (5 layers of 2000) or an LSTM with a 256 state, 20k
training steps, 20k steps per mask, mask lr 1e-2, ``beta = 4e-4`` for the FNN (``alpha = beta / 128``).
The defaults here are the B.3.4 "small" network (hidden sizes 400, 400, 200) with the thesis's step
counts; :func:`cpu_scale_config` is the scale that runs 3 seeds in minutes on one CPU thread.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models.arithmetic_lstm import ArithmeticLSTMConfig, PairByPairLSTM, RepeatedInputLSTM
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
    LossFunction,
    MaskedModel,
    MaskTrainingConfig,
    ModelOutput,
    alpha_from_beta,
    train_weight_mask,
)
from recombine.tasks.addmul import AddMulConfig, DoubleAdditionSplit, build_double_addition, only_pair

PAIRS = ("pair1", "pair2")
#: ``fnn``: one pair per pass; ``lstm_together``: both pairs for all steps; ``lstm_forced``: pair by pair;
#: ``fnn_copied_io``: the FNN with pair 2's input / output weights replaced by pair 1's (B.3.1)
ARCHITECTURES = ("fnn", "lstm_together", "lstm_forced", "fnn_copied_io")
#: the architectures fed one pair per pass (the FNN variants)
ONE_PAIR_PER_PASS = ("fnn", "fnn_copied_io")

_T = tuple[float, float]
#: Thesis Tab. 3.1: accuracy [%] (mean, std over 10 seeds) per architecture, mask column and pair.
THESIS_TABLE_3_1: dict[str, dict[str, dict[str, _T]]] = {
    "fnn": {
        "full": {"pair1": (100.0, 0.0), "pair2": (100.0, 0.0)},
        "pair1": {"pair1": (100.0, 0.0), "pair2": (1.0, 0.1)},
        "~pair1": {"pair1": (20.0, 12.7), "pair2": (94.0, 6.7)},
        "pair2": {"pair1": (1.0, 0.1), "pair2": (100.0, 0.0)},
        "~pair2": {"pair1": (92.0, 10.5), "pair2": (21.0, 11.0)},
    },
    "lstm_together": {
        "full": {"pair1": (100.0, 0.0), "pair2": (100.0, 0.0)},
        "pair1": {"pair1": (100.0, 0.0), "pair2": (1.0, 0.1)},
        "~pair1": {"pair1": (2.0, 0.5), "pair2": (100.0, 0.2)},
        "pair2": {"pair1": (1.0, 0.1), "pair2": (100.0, 0.0)},
        "~pair2": {"pair1": (99.0, 3.0), "pair2": (2.0, 0.3)},
    },
    "lstm_forced": {
        "full": {"pair1": (100.0, 0.0), "pair2": (100.0, 0.1)},
        "pair1": {"pair1": (100.0, 0.0), "pair2": (1.0, 0.1)},
        "~pair1": {"pair1": (4.0, 0.8), "pair2": (96.0, 4.1)},
        "pair2": {"pair1": (1.0, 0.1), "pair2": (100.0, 0.0)},
        "~pair2": {"pair1": (99.0, 0.7), "pair2": (3.0, 0.6)},
    },
}
#: Thesis Tab. B.2: hidden layers inverted, the full-task mask on the input and output layers.
THESIS_TABLE_B_2: dict[str, dict[str, dict[str, _T]]] = {
    "fnn": {
        "hidden~pair1": {"pair1": (7.0, 4.0), "pair2": (62.0, 16.9)},
        "hidden~pair2": {"pair1": (63.0, 15.9), "pair2": (8.0, 5.0)},
    },
    "lstm_together": {
        "hidden~pair1": {"pair1": (16.0, 4.1), "pair2": (97.0, 4.9)},
        "hidden~pair2": {"pair1": (99.0, 1.3), "pair2": (16.0, 5.9)},
    },
    "lstm_forced": {
        "hidden~pair1": {"pair1": (25.0, 6.1), "pair2": (94.0, 4.2)},
        "hidden~pair2": {"pair1": (76.0, 10.0), "pair2": (42.0, 14.7)},
    },
}


def _default_mask_config() -> MaskTrainingConfig:
    return MaskTrainingConfig(steps=20_000, learning_rate=1e-2, alpha=alpha_from_beta(4e-4, 128))  # B.3.5


@dataclass
class DoubleAddAnalysisConfig(ArithmeticMaskAnalysisConfig):
    """Double addition (thesis 3.2.2): ``lstm`` runs 3 steps per pair (B.3.5); ``batch_size`` counts
    examples per step (an FNN example gives two passes)."""

    ARCHITECTURES: ClassVar[tuple[str, ...]] = ARCHITECTURES

    mask: MaskTrainingConfig = field(default_factory=_default_mask_config)


def cpu_scale_config() -> DoubleAddAnalysisConfig:
    """The scale of the reported CPU numbers: 3 seeds in about 10 minutes on one thread (FNN)."""
    return DoubleAddAnalysisConfig(
        task=AddMulConfig(n_digits=2, n_train=100_000, n_test=2_000),
        model=FNNConfig(hidden_sizes=[256, 256, 128]),
        lstm=ArithmeticLSTMConfig(hidden_size=256, n_layers=1, steps=3),
        train_steps=3_000,
        batch_size=128,
        learning_rate=1e-3,
        mask=MaskTrainingConfig(steps=2_000, learning_rate=2e-2, alpha=alpha_from_beta(1e-3, 128)),
    )


def build_model(config: DoubleAddAnalysisConfig, n_inputs: int, n_outputs: int) -> torch.nn.Module:
    """The configured architecture, ``[B, n_inputs] -> [B, n_outputs]`` logits."""
    if config.architecture == "lstm_together":
        return RepeatedInputLSTM(n_inputs, n_outputs, config.lstm, n_steps=2 * config.lstm.steps)
    if config.architecture == "lstm_forced":
        return PairByPairLSTM(n_inputs, n_outputs, config.lstm)
    return FeedForwardNetwork(n_inputs, n_outputs, config.model)


@dataclass
class DoubleAddAnalysisResult:
    accuracy: dict[str, dict[str, float]]  # mask ("none", "pair1", "~pair1", ...) -> pair -> accuracy
    sharing: dict[str, LayerSharing]  # pair-1 mask vs pair-2 mask, per parameter
    iou: float  # over all masked weights
    iomin: float
    masks: dict[str, MaskSet]  # "full" (when trained), "pair1", "pair2"
    model: torch.nn.Module
    train_losses: list[float]

    def accuracy_table(self) -> str:
        """Markdown, one row per pair, one column per mask (thesis Tab. 3.1 layout)."""
        return accuracy_table(self.accuracy, PAIRS, "pair")

    def summary(self) -> dict[str, object]:
        """JSON-ready numbers: accuracies, IoU/IoMin, per-layer sharing."""
        return {
            "accuracy": self.accuracy,
            "iou": self.iou,
            "iomin": self.iomin,
            "kept_fraction": {name: mask.kept_fraction() for name, mask in self.masks.items()},
            "sharing": sharing_summary(self.sharing, PAIRS),
            "final_train_loss": self.train_losses[-1] if self.train_losses else float("nan"),
        }


# --- one pass per pair (thesis 3.2.2) ---


def pair_passes(split: DoubleAdditionSplit, pairs: Sequence[int] = (0, 1)) -> tuple[np.ndarray, ...]:
    """The passes of ``split`` for the given pairs, pair by pair: ``(inputs, digits, pair)``.

    ``inputs`` has the other pair zeroed, ``digits [N, n]`` are the sums' digits of the pass's pair and
    ``pair [N]`` its index (0 or 1)."""
    inputs = np.concatenate([only_pair(split.inputs, p) for p in pairs])
    digits = np.concatenate([split.targets[:, p] for p in pairs])
    pair = np.concatenate([np.full(len(split), p, dtype=np.int64) for p in pairs])
    return inputs, digits, pair


def pair_logits(outputs: torch.Tensor, pair: torch.Tensor, n_digits: int) -> torch.Tensor:
    """``[B, 2 * n * 10]`` logits -> ``[B, n, 10]``: the digit logits of each pass's own pair."""
    per_pair = outputs.reshape(len(outputs), 2, n_digits, 10)
    return per_pair[torch.arange(len(outputs), device=outputs.device), pair]


def pair_loss(outputs: ModelOutput, targets: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy over the digits of each pass's pair (the other pair's outputs are unscored)."""
    assert isinstance(outputs, torch.Tensor)
    digits, pair = targets
    logits = pair_logits(outputs, pair, digits.shape[1])
    return F.cross_entropy(logits.reshape(-1, 10), digits.reshape(-1))


def both_pairs_loss(outputs: ModelOutput, digits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every digit of both sums, ``digits [B, 2, n]`` (the LSTMs' full task)."""
    assert isinstance(outputs, torch.Tensor)
    return F.cross_entropy(outputs.reshape(-1, 10), digits.reshape(-1))


def _fnn_training_batches(
    train: DoubleAdditionSplit, batch_size: int, seed: int, device: str
) -> Iterator[tuple[tuple[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
    """Both passes of ``batch_size`` uniformly drawn examples per batch (thesis 3.2.2)."""
    tensors = {p: [torch.as_tensor(a, device=device) for a in pair_passes(train, [p])] for p in (0, 1)}
    generator = torch.Generator().manual_seed(seed)
    while True:
        index = torch.randint(len(train), (batch_size,), generator=generator).to(device)
        inputs, digits, pair = (torch.cat([tensors[p][k][index] for p in (0, 1)]) for k in range(3))
        yield (inputs,), (digits, pair)


@torch.no_grad()
def pair_accuracy(
    model: torch.nn.Module,
    split: DoubleAdditionSplit,
    pair: int,
    n_digits: int,
    device: str = "cpu",
    alone: bool = True,
) -> float:
    """Fraction of examples whose pair-``pair`` sum is right in every digit.

    ``alone``: the pair fed with the other zeroed (the FNN's passes); otherwise the full input (LSTMs)."""
    if alone:
        inputs, digits, pairs = (torch.as_tensor(a, device=device) for a in pair_passes(split, [pair]))
    else:
        inputs = torch.as_tensor(split.inputs, device=device)
        digits = torch.as_tensor(split.targets[:, pair], device=device)
        pairs = torch.full((len(split),), pair, dtype=torch.int64, device=device)
    predicted = pair_logits(model(inputs), pairs, n_digits).argmax(-1)
    return float((predicted == digits).all(-1).float().mean())


@torch.no_grad()
def copy_pair1_io_to_pair2(model: FeedForwardNetwork) -> None:
    """Thesis B.3.1: overwrite pair 2's input weights (the second half of the first layer's columns)
    and output weights and biases (the second half of the output layer's rows) with pair 1's, in place.

    Afterwards a pass with pair 2 = (a, b) and pair 1 zeroed gives the hidden layers exactly the
    activations of the pass with pair 1 = (a, b), and pair 2's logits equal pair 1's logits there."""
    first, output = model.layers[0], model.output
    half_in, half_out = first.in_features // 2, output.out_features // 2
    first.weight[:, half_in:] = first.weight[:, :half_in]
    output.weight[half_out:] = output.weight[:half_out]
    output.bias[half_out:] = output.bias[:half_out]


def train_network(
    config: DoubleAddAnalysisConfig, train: DoubleAdditionSplit, seed: int
) -> tuple[torch.nn.Module, list[float]]:
    """The network on the full task: the FNN on both passes of every example, an LSTM on the full input;
    ``fnn_copied_io`` then gets pair 1's input / output weights copied over pair 2's (B.3.1)."""
    torch.manual_seed(seed)
    model = build_model(config, train.inputs.shape[1], 2 * 10 * config.task.n_digits).to(config.device)
    if config.architecture in ONE_PAIR_PER_PASS:
        batches: Iterator[Any] = _fnn_training_batches(train, config.batch_size, seed, config.device)
        loss_fn: LossFunction = pair_loss  # type: ignore[assignment]
    else:
        batches = random_batches(train.inputs, train.targets, config.batch_size, seed, config.device)
        loss_fn = both_pairs_loss
    description = f"{config.architecture} seed {seed}"
    losses = train_model(
        model, batches, loss_fn, config.train_steps, config.learning_rate, config.grad_clip, description
    )
    if config.architecture == "fnn_copied_io":
        assert isinstance(model, FeedForwardNetwork)
        copy_pair1_io_to_pair2(model)
    return model, losses


def _mask_data(
    config: DoubleAddAnalysisConfig, train: DoubleAdditionSplit, target: str, seed: int
) -> tuple[Iterator[Any], LossFunction]:
    """The batches and loss of one mask target (``full``, ``pair1``, ``pair2``)."""
    if target == "full" and config.architecture not in ONE_PAIR_PER_PASS:
        batches = random_batches(train.inputs, train.targets, config.batch_size, seed, config.device)
        return batches, both_pairs_loss
    pairs = [0, 1] if target == "full" else [PAIRS.index(target)]
    inputs, digits, pair = pair_passes(train, pairs)
    return random_batches(inputs, (digits, pair), config.batch_size, seed, config.device), pair_loss  # type: ignore[return-value]


def hidden_inversion(mask: MaskSet, full: MaskSet, io_layers: Sequence[str]) -> MaskSet:
    """``mask`` inverted on the hidden layers, ``full`` on the I/O layers (thesis B.3.5, Tab. B.2)."""
    return MaskSet({n: full[n].clone() if n in io_layers else ~m for n, m in mask.masks.items()})


def run_double_add_analysis(config: DoubleAddAnalysisConfig, seed: int = 0) -> DoubleAddAnalysisResult:
    """Train the network and the masks; evaluate every mask and inverted mask on both pairs (Tab. 3.1)."""
    splits = build_double_addition(config.task, seed)
    n_digits = config.task.n_digits
    model, losses = train_network(config, splits["train"], seed)

    targets = ["full", *PAIRS] if config.full_mask else list(PAIRS)
    masks: dict[str, MaskSet] = {}
    for index, target in enumerate(targets):
        batches, loss_fn = _mask_data(config, splits["train"], target, seed * 1000 + index + 1)
        label = f"{config.architecture} seed {seed}: {target} mask"
        trained = train_weight_mask(
            model, batches, loss_fn, config.mask, seed=seed + index, description=label
        )
        masks[target] = trained.binary

    evaluated: dict[str, torch.nn.Module] = {"none": model}
    if "full" in masks:
        evaluated["full"] = MaskedModel(model, masks["full"])
    for pair in PAIRS:
        evaluated[pair] = MaskedModel(model, masks[pair])
        evaluated[f"~{pair}"] = MaskedModel(model, ~masks[pair])
    if "full" in masks:
        names = masks["full"].names
        io_layers = [names[0], names[-1]]  # first and last weight matrix: the I/O layers
        for pair in PAIRS:
            evaluated[f"hidden~{pair}"] = MaskedModel(
                model, hidden_inversion(masks[pair], masks["full"], io_layers)
            )
    alone = config.architecture in ONE_PAIR_PER_PASS
    accuracy = {
        name: {
            pair: pair_accuracy(evaluated_model, splits["test"], index, n_digits, config.device, alone)
            for index, pair in enumerate(PAIRS)
        }
        for name, evaluated_model in evaluated.items()
    }
    return DoubleAddAnalysisResult(
        accuracy=accuracy,
        sharing=per_layer_sharing(masks["pair1"], masks["pair2"]),
        iou=intersection_over_union(masks["pair1"], masks["pair2"]),
        iomin=intersection_over_minimum(masks["pair1"], masks["pair2"]),
        masks=masks,
        model=model,
        train_losses=losses,
    )


# --- over architectures and seeds: report.md, results.json, sharing.png ---


def _scale_note(config: DoubleAddAnalysisConfig, architectures: Sequence[str], seeds: Sequence[int]) -> str:
    mask = config.mask
    parts = []
    if any(a in ONE_PAIR_PER_PASS for a in architectures):
        parts.append(f"FNN hidden sizes {config.model.hidden_sizes} (two passes per example)")
    if any(a not in ONE_PAIR_PER_PASS for a in architectures):
        lstm = config.lstm
        parts.append(f"LSTM {lstm.n_layers} x {lstm.hidden_size}, {lstm.steps} steps per pair")
    return (
        f"Seeds {list(seeds)}; mean ± std over seeds. {'; '.join(parts)}. {config.train_steps} training "
        f"steps (batch {config.batch_size} examples, lr {config.learning_rate}), masks {config.mask.steps} "
        f"steps (lr {mask.learning_rate}, alpha {mask.alpha:.3g}, {mask.n_samples} samples), modulo "
        f"{config.task.modulus}, {config.task.n_test} test examples. Thesis: 5 x 2000 FNN / 256-unit LSTM, "
        "20k steps, 20k mask steps, 10 seeds."
    )


def render_report(
    config: DoubleAddAnalysisConfig,
    seeds: Sequence[int],
    aggregated: Mapping[str, Mapping[str, Any]],
    wall_seconds: float | None = None,
) -> str:
    """``aggregated[architecture]``: :func:`~.mask_analysis_common.mean_std_tree` of the seeds' summaries."""
    lines = [
        "# Double addition: weight masks of an FNN and LSTMs (thesis Tab. 3.1, Tab. B.2, Fig. 3.3)",
        "",
        _scale_note(config, list(aggregated), seeds),
        "",
        wall_time_note(aggregated, wall_seconds),
        "",
        "Accuracy [%] on each pair; the column is the mask (`~`: inverted; `hidden~`: inverted on the hidden "
        "layers, the full-task mask on the input and output layers, Tab. B.2). Thesis: the row of Tab. 3.1 / "
        "B.2 for the architecture (`fnn`: FNN, `lstm_together`: LSTM, `lstm_forced`: LSTM (forced); the "
        "thesis gives no accuracies for `fnn_copied_io`).",
        "",
        "| architecture | mask | pair 1 (ours) | pair 1 (thesis) | pair 2 (ours) | pair 2 (thesis) |",
        "|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        thesis = {**THESIS_TABLE_3_1.get(architecture, {}), **THESIS_TABLE_B_2.get(architecture, {})}
        for mask, per_pair in stats["accuracy"].items():
            cells = []
            for pair in PAIRS:
                reference = thesis.get(mask, {}).get(pair)
                cells += [
                    format_mean_std(per_pair[pair]),
                    format_mean_std(reference, 1.0) if reference else "-",
                ]
            lines.append(f"| {architecture} | {mask} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Sharing between the pair-1 and pair-2 masks. Thesis Fig. 3.3: low sharing, none in the first and "
        "last layers. `fnn_copied_io` (B.3.1, Fig. B.2, pair 2's input / output weights replaced by "
        "pair 1's): almost perfect sharing in the hidden layers, still none in the first and last layers.",
        "",
        "| architecture | layer | IoU [%] | IoMin [%] | pair-1 weights shared [%] "
        "| pair-2 weights shared [%] |",
        "|---|---|---|---|---|---|",
    ]
    keys = ("iou", "iomin", "shared_of_pair1", "shared_of_pair2")
    for architecture, stats in aggregated.items():
        cells = [format_mean_std(stats["iou"]), format_mean_std(stats["iomin"]), "", ""]
        lines.append(f"| {architecture} | all | " + " | ".join(cells) + " |")
        for layer, layer_stats in stats["sharing"].items():
            lines.append(
                f"| {architecture} | `{layer}` | "
                + " | ".join(format_mean_std(layer_stats[k]) for k in keys)
                + " |"
            )
    lines += ["", "![per-layer sharing](sharing.png)", ""]
    return "\n".join(lines)


def run_double_add_reproduction(
    config: DoubleAddAnalysisConfig,
    seeds: Sequence[int],
    out: str | Path,
    architectures: Sequence[str] | None = None,
) -> dict[str, object]:
    """The analysis for every architecture (default: ``config.architecture``) and seed.

    Writes ``report.md``, ``results.json`` (``architectures[name]["per_seed" | "mean_std"]``) and
    ``sharing.png`` to ``out``."""
    if not seeds:
        raise UserError("give at least one seed")
    architectures = list(architectures or [config.architecture])
    for architecture in architectures:
        check_choice("architecture", architecture, ARCHITECTURES)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trials = analyse_every_architecture_and_seed(
        architectures,
        seeds,
        lambda architecture, seed: run_double_add_analysis(
            dataclasses.replace(config, architecture=architecture), seed
        ).summary(),
        lambda summary: f"pair 2 under ~pair1 {summary['accuracy']['~pair1']['pair2']:.3f}",
        out_dir=out,
        settings=trial_settings(config),
    )
    aggregated = {name: stats["mean_std"] for name, stats in trials["architectures"].items()}
    results = {
        "config": asdict(config),
        "seeds": list(seeds),
        **trials,
        "torch": torch.__version__,
        "thesis": {"table_3_1": THESIS_TABLE_3_1, "table_b_2": THESIS_TABLE_B_2},
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    (out / "report.md").write_text(render_report(config, seeds, aggregated, results["wall_seconds"]))  # type: ignore[arg-type]
    plot_sharing_panels(
        {architecture: stats["sharing"] for architecture, stats in aggregated.items()},
        [("shared_of_pair1", "pair 1"), ("shared_of_pair2", "pair 2")],
        out / "sharing.png",
        title="double addition: share of each pair's mask the other pair's mask keeps",
    )
    return results


@dataclass
class MaskDoubleAddReproductionConfig:
    """``recombine reproduce masks-double-add``: :func:`cpu_scale_config` per architecture over ``seeds``.

    ``architectures`` replaces ``analysis.architecture``: every listed one (``fnn``, ``fnn_copied_io``,
    ``lstm_together``, ``lstm_forced``) runs with the same ``analysis`` settings."""

    analysis: DoubleAddAnalysisConfig = field(default_factory=cpu_scale_config)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    architectures: list[str] = field(default_factory=lambda: ["fnn"])

    def __post_init__(self) -> None:
        if not self.architectures:
            raise UserError("give at least one architecture")
        for architecture in self.architectures:
            check_choice("architecture", architecture, ARCHITECTURES)


def run_masks_double_add(out: str | Path, config: MaskDoubleAddReproductionConfig) -> dict[str, object]:
    """:func:`run_double_add_reproduction` in the ``run(out_dir, config)`` form of a scripted reproduction."""
    return run_double_add_reproduction(config.analysis, config.seeds, out, config.architectures)
