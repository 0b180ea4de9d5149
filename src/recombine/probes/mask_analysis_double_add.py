"""Double-addition weight-mask analysis with an FNN: is addition reused across two pairs? (thesis 3.2.2).

Task (thesis 3.2.2, :func:`recombine.tasks.addmul.build_double_addition`): ``a + b`` and ``c + d``
modulo 100 on separate units, 80 inputs and 40 outputs. The FNN variant feeds one pair at a time: "for
the FNN, we perform two forward passes. In each pass, we feed only one pair of numbers to the network
(either a, b or c, d), while zeroing out the other" (thesis 3.2.2). Every example therefore gives two
*passes*; pass ``p`` has the other pair zeroed (:func:`~recombine.tasks.addmul.only_pair`) and is
scored on pair ``p``'s 20 output logits only. Training on the full task trains on both passes of every
example; the mask for pair ``p`` trains on pair ``p``'s passes only.

Protocol (thesis 3.2.2, B.3.4, B.3.5): train the FNN on the full task, freeze it, train a mask on the
full task (the B.3.3 sanity check), one on pair 1 and one on pair 2, then report

* accuracy on each pair under each mask and each inverted mask (thesis Tab. 3.1: columns ``full``,
  ``pair1``, ``~pair1``, ``pair2``, ``~pair2``; ``none`` is the unmasked model). The key result: the
  inverted pair-1 mask (every weight pair 1 needs removed) keeps pair 2 accurate (94 +- 6.7 %);
* the hidden-layer inversion of Tab. B.2 (``hidden~pair1``, ``hidden~pair2``): the mask inverted on the
  hidden layers only, the full-task mask on the input and output layers (thesis B.3.5);
* per-layer sharing between the pair-1 and pair-2 masks (thesis Fig. 3.3: "the first and last layers
  have no shared weights"), with IoU and IoMin per layer and over all layers (thesis 3.1).

:func:`run_double_add_reproduction` repeats this over seeds and writes ``report.md`` (mean +- std, the
thesis's numbers next to ours), ``results.json`` and ``sharing.png`` (Fig. 3.3 style, mean +- std).

Thesis scale (B.3.4, B.3.5): the FNN of B.3.4 (5 layers of 2000), 20k training steps, 20k steps per mask,
mask lr 1e-2, ``beta = 4e-4`` (``alpha = beta / 128``). The defaults here are the B.3.4 "small" network
(hidden sizes 400, 400, 200) with the thesis's step counts; :func:`cpu_scale_config` is the
scale that runs 3 seeds in minutes on one CPU thread.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from recombine.errors import UserError
from recombine.models.fnn import FeedForwardNetwork, FNNConfig
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
from recombine.tasks.addmul import AddMulConfig, DoubleAdditionSplit, build_double_addition, only_pair

PAIRS = ("pair1", "pair2")

#: Thesis Tab. 3.1, FNN row: accuracy [%] (mean, std over seeds) per mask column and pair.
THESIS_TABLE_3_1: dict[str, dict[str, tuple[float, float]]] = {
    "full": {"pair1": (100.0, 0.0), "pair2": (100.0, 0.0)},
    "pair1": {"pair1": (100.0, 0.0), "pair2": (1.0, 0.1)},
    "~pair1": {"pair1": (20.0, 12.7), "pair2": (94.0, 6.7)},
    "pair2": {"pair1": (1.0, 0.1), "pair2": (100.0, 0.0)},
    "~pair2": {"pair1": (92.0, 10.5), "pair2": (21.0, 11.0)},
}
#: Thesis Tab. B.2, FNN row: hidden layers inverted, the full-task mask on the input and output layers.
THESIS_TABLE_B_2: dict[str, dict[str, tuple[float, float]]] = {
    "hidden~pair1": {"pair1": (7.0, 4.0), "pair2": (62.0, 16.9)},
    "hidden~pair2": {"pair1": (63.0, 15.9), "pair2": (8.0, 5.0)},
}


def _default_mask_config() -> MaskTrainingConfig:
    return MaskTrainingConfig(steps=20_000, learning_rate=1e-2, alpha=alpha_from_beta(4e-4, 128))  # B.3.5


@dataclass
class DoubleAddAnalysisConfig:
    task: AddMulConfig = field(default_factory=AddMulConfig)
    model: FNNConfig = field(default_factory=lambda: FNNConfig(hidden_sizes=[400, 400, 200]))
    train_steps: int = 20_000  # B.3.4
    batch_size: int = 128  # examples per step (each gives two passes); B.3.2
    learning_rate: float = 1e-3  # B.3.2
    grad_clip: float = 1.0  # B.3.2
    mask: MaskTrainingConfig = field(default_factory=_default_mask_config)
    full_mask: bool = True  # the B.3.3 sanity-check mask; also needed for the Tab. B.2 columns
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.train_steps < 0 or self.batch_size < 1:
            raise UserError("train_steps must be >= 0 and batch_size >= 1")


def cpu_scale_config() -> DoubleAddAnalysisConfig:
    """The scale of the reported CPU numbers: 3 seeds in about 10 minutes on one thread."""
    return DoubleAddAnalysisConfig(
        task=AddMulConfig(n_digits=2, n_train=100_000, n_test=2_000),
        model=FNNConfig(hidden_sizes=[256, 256, 128]),
        train_steps=3_000,
        batch_size=128,
        learning_rate=1e-3,
        mask=MaskTrainingConfig(steps=2_000, learning_rate=2e-2, alpha=alpha_from_beta(1e-3, 128)),
    )


@dataclass
class DoubleAddAnalysisResult:
    accuracy: dict[str, dict[str, float]]  # mask ("none", "pair1", "~pair1", ...) -> pair -> accuracy
    sharing: dict[str, LayerSharing]  # pair-1 mask vs pair-2 mask, per parameter
    iou: float  # over all masked weights
    iomin: float
    masks: dict[str, MaskSet]  # "full" (when trained), "pair1", "pair2"
    model: FeedForwardNetwork
    train_losses: list[float]

    def accuracy_table(self) -> str:
        """Markdown, one row per pair, one column per mask (thesis Tab. 3.1 layout)."""
        columns = list(self.accuracy)
        lines = ["| pair | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for pair in PAIRS:
            cells = " | ".join(f"{100 * self.accuracy[c][pair]:.0f}" for c in columns)
            lines.append(f"| {pair} | {cells} |")
        return "\n".join(lines)

    def summary(self) -> dict[str, object]:
        """JSON-ready numbers: accuracies, IoU/IoMin, per-layer sharing."""
        return {
            "accuracy": self.accuracy,
            "iou": self.iou,
            "iomin": self.iomin,
            "kept_fraction": {name: mask.kept_fraction() for name, mask in self.masks.items()},
            "sharing": {
                layer: {
                    **asdict(stats),
                    "iou": stats.iou,
                    "iomin": stats.iomin,
                    "shared_of_pair1": stats.shared_of_a,
                    "shared_of_pair2": stats.shared_of_b,
                }
                for layer, stats in self.sharing.items()
            },
            "final_train_loss": self.train_losses[-1] if self.train_losses else math.nan,
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


def _pass_batches(
    passes: tuple[np.ndarray, ...], batch_size: int, seed: int, device: str
) -> Iterator[tuple[tuple[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
    inputs, digits, pair = (torch.as_tensor(a, device=device) for a in passes)
    generator = torch.Generator().manual_seed(seed)
    while True:
        index = torch.randint(len(inputs), (batch_size,), generator=generator).to(device)
        yield (inputs[index],), (digits[index], pair[index])


@torch.no_grad()
def pair_accuracy(
    model: torch.nn.Module, split: DoubleAdditionSplit, pair: int, n_digits: int, device: str = "cpu"
) -> float:
    """Fraction of examples whose pair-``pair`` sum is right in every digit, pair fed alone."""
    inputs, digits, pairs = (torch.as_tensor(a, device=device) for a in pair_passes(split, [pair]))
    predicted = pair_logits(model(inputs), pairs, n_digits).argmax(-1)
    return float((predicted == digits).all(-1).float().mean())


def train_fnn(
    config: DoubleAddAnalysisConfig, train: DoubleAdditionSplit, seed: int
) -> tuple[FeedForwardNetwork, list[float]]:
    """The FNN on the full task: every step both passes of ``batch_size`` examples (thesis 3.2.2)."""
    from recombine.experiments.progress import training_bar  # not at the top: the package imports us

    torch.manual_seed(seed)
    n_digits = config.task.n_digits
    model = FeedForwardNetwork(train.inputs.shape[1], 2 * 10 * n_digits, config.model).to(config.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    passes = {p: pair_passes(train, [p]) for p in (0, 1)}
    tensors = {p: [torch.as_tensor(a, device=config.device) for a in passes[p]] for p in (0, 1)}
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    with training_bar(config.train_steps, f"FNN seed {seed}") as bar:
        for _ in range(config.train_steps):
            index = torch.randint(len(train), (config.batch_size,), generator=generator).to(config.device)
            inputs = torch.cat([tensors[p][0][index] for p in (0, 1)])
            digits = torch.cat([tensors[p][1][index] for p in (0, 1)])
            pair = torch.cat([tensors[p][2][index] for p in (0, 1)])
            loss = pair_loss(model(inputs), (digits, pair))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            losses.append(float(loss.detach()))
            bar.update()
    return model.eval(), losses


def hidden_inversion(mask: MaskSet, full: MaskSet, io_layers: Sequence[str]) -> MaskSet:
    """``mask`` inverted on the hidden layers, ``full`` on the I/O layers (thesis B.3.5, Tab. B.2)."""
    return MaskSet({n: full[n].clone() if n in io_layers else ~m for n, m in mask.masks.items()})


def run_double_add_analysis(config: DoubleAddAnalysisConfig, seed: int = 0) -> DoubleAddAnalysisResult:
    """Train the FNN and the masks; evaluate every mask and inverted mask on both pairs (Tab. 3.1)."""
    splits = build_double_addition(config.task, seed)
    n_digits = config.task.n_digits
    model, losses = train_fnn(config, splits["train"], seed)

    targets: dict[str, Sequence[int]] = {"pair1": [0], "pair2": [1]}
    if config.full_mask:
        targets = {"full": [0, 1], **targets}
    masks: dict[str, MaskSet] = {}
    for index, (target, pairs) in enumerate(targets.items()):
        passes = pair_passes(splits["train"], pairs)
        batches = _pass_batches(passes, config.batch_size, seed * 1000 + index + 1, config.device)
        masks[target] = train_weight_mask(model, batches, pair_loss, config.mask, seed=seed + index).binary

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
    accuracy = {
        name: {
            pair: pair_accuracy(evaluated_model, splits["test"], index, n_digits, config.device)
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


# --- over seeds: report.md, results.json, sharing.png ---


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def aggregate(summaries: Sequence[dict[str, object]]) -> dict[str, object]:
    """Mean and sample std over seeds of every accuracy, IoU/IoMin and per-layer sharing number."""
    first = summaries[0]
    accuracy = first["accuracy"]
    sharing = first["sharing"]
    assert isinstance(accuracy, dict) and isinstance(sharing, dict)
    return {
        "accuracy": {
            mask: {
                pair: _mean_std([s["accuracy"][mask][pair] for s in summaries])  # type: ignore[index]
                for pair in PAIRS
            }
            for mask in accuracy
        },
        "iou": _mean_std([s["iou"] for s in summaries]),  # type: ignore[misc]
        "iomin": _mean_std([s["iomin"] for s in summaries]),  # type: ignore[misc]
        "sharing": {
            layer: {
                key: _mean_std([s["sharing"][layer][key] for s in summaries])  # type: ignore[index]
                for key in ("iou", "iomin", "shared_of_pair1", "shared_of_pair2")
            }
            for layer in sharing
        },
    }


def _cell(mean_std: tuple[float, float], scale: float = 100.0) -> str:
    mean, std = mean_std
    return f"{scale * mean:.0f} ± {scale * std:.1f}"


def render_report(
    config: DoubleAddAnalysisConfig, seeds: Sequence[int], aggregated: dict[str, object]
) -> str:
    accuracy = aggregated["accuracy"]
    sharing = aggregated["sharing"]
    assert isinstance(accuracy, dict) and isinstance(sharing, dict)
    thesis = {**THESIS_TABLE_3_1, **THESIS_TABLE_B_2}
    lines = [
        "# Double addition: weight masks of an FNN (thesis Tab. 3.1, Tab. B.2, Fig. 3.3)",
        "",
        f"Seeds {list(seeds)}; mean ± std over seeds. FNN hidden sizes {config.model.hidden_sizes}, "
        f"{config.train_steps} training steps (batch {config.batch_size} examples, two passes each), "
        f"masks {config.mask.steps} steps (lr {config.mask.learning_rate}, alpha {config.mask.alpha:.3g}, "
        f"{config.mask.n_samples} samples), modulo {config.task.modulus}, "
        f"{config.task.n_test} test examples.",
        "",
        "Accuracy [%] on each pair; the column is the mask (`~`: inverted; `hidden~`: inverted on the hidden "
        "layers, the full-task mask on the input and output layers, Tab. B.2). Thesis: FNN row of "
        "Tab. 3.1 / B.2 (5 x 2000 FNN, 20k steps).",
        "",
        "| mask | pair 1 (ours) | pair 1 (thesis) | pair 2 (ours) | pair 2 (thesis) |",
        "|---|---|---|---|---|",
    ]
    for mask, per_pair in accuracy.items():
        cells = []
        for pair in PAIRS:
            reference = thesis.get(mask, {}).get(pair)
            cells += [_cell(per_pair[pair]), _cell(reference, 1.0) if reference else "-"]
        lines.append(f"| {mask} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Sharing between the pair-1 and pair-2 masks over all masked weights: IoU "
        f"{_cell(aggregated['iou'])} %, IoMin {_cell(aggregated['iomin'])} %. "  # type: ignore[arg-type]
        "Thesis Fig. 3.3: low sharing, none in the first and last layers.",
        "",
        "| layer | IoU [%] | IoMin [%] | pair-1 weights shared [%] | pair-2 weights shared [%] |",
        "|---|---|---|---|---|",
    ]
    for layer, stats in sharing.items():
        keys = ("iou", "iomin", "shared_of_pair1", "shared_of_pair2")
        lines.append(f"| {layer} | " + " | ".join(_cell(stats[k]) for k in keys) + " |")
    lines += ["", "![per-layer sharing](sharing.png)", ""]
    return "\n".join(lines)


def plot_mean_sharing(sharing: dict[str, dict[str, tuple[float, float]]], path: str | Path) -> Path:
    """Fig. 3.3 style: shared-weight percentage per layer for each pair's mask, mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = list(sharing)
    positions = np.arange(len(layers))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(layers) + 1.5), 2.6))
    width = 0.4
    for offset, key, label in (
        (-width / 2, "shared_of_pair1", "pair 1"),
        (width / 2, "shared_of_pair2", "pair 2"),
    ):
        means = [100 * sharing[layer][key][0] for layer in layers]
        stds = [100 * sharing[layer][key][1] for layer in layers]
        ax.bar(positions + offset, means, width=width, yerr=stds, capsize=2, label=label)
    ax.set_xticks(list(positions), layers, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("shared weights [%]")
    ax.set_ylim(0, 100)
    ax.legend(ncol=2, loc="upper center", fontsize=8)
    ax.set_title("double addition, FNN", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_double_add_reproduction(
    config: DoubleAddAnalysisConfig, seeds: Sequence[int], out: str | Path
) -> dict[str, object]:
    """The analysis for every seed; writes ``report.md``, ``results.json``, ``sharing.png`` to ``out``."""
    from recombine.experiments.progress import trial_done  # not at the top: the package imports us

    if not seeds:
        raise UserError("give at least one seed")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    per_seed: dict[int, dict[str, object]] = {}
    for index, seed in enumerate(seeds, 1):
        started = time.perf_counter()
        per_seed[seed] = summary = run_double_add_analysis(config, seed).summary()
        kept = summary["accuracy"]["~pair1"]["pair2"]  # type: ignore[index]
        seconds = time.perf_counter() - started
        trial_done(index, len(seeds), f"seed {seed}", seconds, f"pair 2 under ~pair1 {kept:.3f}")
    aggregated = aggregate(list(per_seed.values()))
    results = {
        "config": asdict(config),
        "seeds": list(seeds),
        "per_seed": {str(seed): summary for seed, summary in per_seed.items()},
        "mean_std": aggregated,
        "thesis": {"table_3_1_fnn": THESIS_TABLE_3_1, "table_b_2_fnn": THESIS_TABLE_B_2},
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    (out / "report.md").write_text(render_report(config, seeds, aggregated))
    plot_mean_sharing(aggregated["sharing"], out / "sharing.png")  # type: ignore[arg-type]
    return results


@dataclass
class MaskDoubleAddReproductionConfig:
    """``recombine reproduce masks-double-add``: the analysis at :func:`cpu_scale_config` over ``seeds``."""

    analysis: DoubleAddAnalysisConfig = field(default_factory=cpu_scale_config)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])


def run_masks_double_add(out: str | Path, config: MaskDoubleAddReproductionConfig) -> dict[str, object]:
    """:func:`run_double_add_reproduction` in the ``run(out_dir, config)`` form of a scripted reproduction."""
    return run_double_add_reproduction(config.analysis, config.seeds, out)
