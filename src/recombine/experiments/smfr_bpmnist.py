"""Block-permuted images (BPMNIST): SMFR vs FNN vs Transformer, with routing indicators over training
(Block-Operations paper, sec. 5.4, Tab. 3, A.2.4; reproduction ``smfr-bpmnist``).

Data (:mod:`recombine.tasks.block_permuted_images`): an image cut into four horizontal strips, permuted by one
of eight balanced permutations whose id is a fifth, one-hot block; one digit is never trained with each of
the four test permutations. The model maps the five blocks to one output block whose first ten units are the
class scores.

Training (A.2): Adam, lr 3e-4, gradient-norm clipping 0.1, LeakyReLU(0.01) FNNs inside the SMFR; the A.3
saturation regulariser (threshold 20, weight 1) on every routing logit. Not stated, our choices: the loss
(cross-entropy on the ten class units; ``training.loss="mse"`` regresses a one-hot instead), batch 64, and one
permutation per training batch (A.2.4 speaks of "the permutation used in a training batch";
``batches="mixed"`` draws every example's permutation independently).

Measured at every evaluation: accuracy on a fixed subset of the training examples, on ``valid_iid`` (the
paper's validation: held-out images, permutations 0-3), on ``test`` (the paper's test: test images,
permutations 4-7) and its two parts ``test_iid`` / ``test_ood`` (the removed digit x permutation
combinations, never trained), and for SMFRs the three indicators of A.2.4
(:mod:`recombine.probes.block_routing`) on ``probe_images`` validation images shown under all eight
permutations. The paper reports test accuracy after 25k and after 250k steps (Tab. 3: "averaged over the five
best models of that type according to the validation set"), so we report it at ``early_step`` (default a
tenth of the run, the paper's ratio) and at the end, over all our seeds.

The two SMFR variants of Tab. 3 (BLOCK 5.4: "SMFR_bias was equipped with an artificial bias for the first
300 training steps only, causing it to learn the ideal permutation quickly. SMFR_no_context used a modified
FNNR in which the original input blocks before the Multiplexer are not used as extra input"):

* SMFR_no_context is ``model_config: {input_context: false}`` (:class:`recombine.models.layers.fnnr.MFNNR`).
* SMFR_bias is a :class:`BPMNISTArchitecture` with ``bias_steps`` > 0 (300 for the default row). For
  training steps ``1..bias_steps`` the first Multiplexer's routing logits get ``+bias`` on one entry per
  output block: output block ``n`` (``n < 4``) on the input position that holds original strip ``n`` under
  the example's own permutation (:func:`ideal_routing_targets`), so the first layer puts the strips back in
  their original order (the "ideal permutation"); output blocks beyond the fourth and the indicator input
  get no bias. The first layer needs at least four output blocks (depth >= 1, width >= 4). The bias acts
  only in training mode (:attr:`recombine.models.layers.multiplexer.Multiplexer.logit_bias`), so every
  evaluation and every routing indicator shows the network's own routing. The paper does not state the
  magnitude; ours is :data:`IDEAL_ROUTING_BIAS` = +5 on the logit: with the near-zero logits of a fresh
  model that puts about 97% of an output block's weight on the ideal input (e^5 / (e^5 + 4) = 0.974), a
  near-copy that leaves the softmax far from saturation (the A.3 threshold is 20); +2 and +10 behaved the
  same in a short check (docs/models/block-operations.md).

Scale: the paper's models have about 4 million parameters on 28x28 MNIST (block size 196, contained FNNs of
depth 4 and width 400) and train for 250k steps; the defaults here use the embedded 8x8 digits (block size
16), models of 74-102k parameters and 20,000 steps (2,000 for the early column); one trial takes 20-100 s on
one CPU core (measured: SMFR ~40 s, Transformer ~95 s, FNN ~25 s), so 3 seeds x 5 models about 12 minutes.
Point ``task.source=mnist task.mnist_dir=...`` at the IDX files (and scale the architectures up) for the
paper's data.

:func:`run_bpmnist` writes ``report.md``, ``results.json``, ``bpmnist_accuracy.png``,
``bpmnist_indicators.png`` and one ``bpmnist_routing_<architecture>.png`` per SMFR architecture (its routing
weights and gates on one image under all eight permutations, for the seed with the best final validation
accuracy).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from recombine.config_validation import validate_into
from recombine.errors import UserError, choices_hint
from recombine.experiments.block_digit_training import (
    BlockArchitecture,
    BlockTrainingConfig,
    train_every_trial,
)
from recombine.experiments.progress import training_bar
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.models.layers.multiplexer import Multiplexer, multiplexer_logit_bias
from recombine.models.layers.saturation_regularizer import saturation_loss
from recombine.models.smfr import SMFR, BlockShape, SMFRConfig, build_block_model, count_parameters
from recombine.probes.block_routing import (
    IndicatorCurve,
    RoutingIndicators,
    measure_routing,
    routing_arrays,
    save_indicator_figure,
    save_routing_figure,
)
from recombine.tasks.block_permuted_images import (
    N_BLOCKS,
    N_CLASSES,
    N_PERMUTATIONS,
    PERMUTATIONS,
    BlockPermutedImagesConfig,
    BlockPermutedImagesData,
    PermutedImageSplit,
    build_block_permuted_images,
    inverse_permutations,
)

BATCH_MODES = ("per_permutation", "mixed")
EVALUATED = ("train", "valid_iid", "test", "test_iid", "test_ood")

#: BLOCK Tab. 3: test accuracy, mean ± std of the five best models per type by validation accuracy,
#: (after 25k steps, after 250k steps); ~4M parameters each, MNIST.
PAPER_TABLE_3: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "FNN": ((0.949, 0.00166), (0.950, 0.00032)),
    "Transformer": ((0.975, 0.00034), (0.977, 0.00083)),
    "SMFR": ((0.945, 0.00980), (0.985, 0.00092)),
    "SMFR_bias": ((0.984, 0.00045), (0.986, 0.00111)),
    "SMFR_no_context": ((0.982, 0.00060), (0.984, 0.00267)),
}


#: SMFR_bias (BLOCK 5.4): "an artificial bias for the first 300 training steps only".
PAPER_BIAS_STEPS = 300
#: Added to the first Multiplexer's logit of the ideal input of every output block while the bias is on. Not
#: stated in the paper; +5 gives a fresh model ~0.97 of the weight on that input (see the module doc).
IDEAL_ROUTING_BIAS = 5.0


@dataclass
class BPMNISTArchitecture(BlockArchitecture):
    """A :class:`BlockArchitecture` plus the SMFR_bias option (BLOCK 5.4): for training steps
    ``1..bias_steps`` the first Multiplexer's logit of the ideal input of every output block gets ``+bias``
    (``bias_steps=0``: no bias)."""

    bias_steps: int = 0
    bias: float = IDEAL_ROUTING_BIAS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bias_steps < 0:
            raise UserError(f"bias_steps must be >= 0, got {self.bias_steps}")
        if self.bias_steps and self.model != "smfr":
            raise UserError(
                f"{self.label}: bias_steps (SMFR_bias) needs an SMFR, the routing bias acts on its first "
                f"Multiplexer; got model {self.model!r}"
            )
        if self.bias_steps:
            smfr = validate_into(SMFRConfig(), dict(self.model_config), "model")
            first_outputs = smfr.width if smfr.depth >= 1 else 1  # depth 0: the only MFNNR emits the output
            if first_outputs < N_BLOCKS:
                raise UserError(
                    f"{self.label}: the ideal-permutation bias (bias_steps) needs a first layer of at least "
                    f"{N_BLOCKS} output blocks, one per image strip (depth >= 1 and width >= {N_BLOCKS}); "
                    f"got depth={smfr.depth}, width={smfr.width}"
                )


def paper_row(architecture: BlockArchitecture) -> str:
    """The row of Tab. 3 an architecture is compared with."""
    if architecture.model == "fnn":
        return "FNN"
    if architecture.model == "transformer":
        return "Transformer"
    if getattr(architecture, "bias_steps", 0) > 0:
        return "SMFR_bias"
    return "SMFR" if architecture.model_config.get("input_context", True) else "SMFR_no_context"


def default_bpmnist_architectures() -> list[BPMNISTArchitecture]:
    """One model per row of Tab. 3 at the 8x8-digit scale, of similar size (the paper kept all ~4M).

    SMFR depth 1, width 4: the first MFNNR can put the four strips back in order ("The best SMFRs had a low
    stack depth", A.2.4); contained FNNs of depth 2 (the paper raised them to depth 4, width 400 on MNIST).
    SMFR_bias and SMFR_no_context are the same SMFR with the routing bias for the first 300 steps and without
    the input context of the FNNRs (BLOCK 5.4)."""
    smfr = {"depth": 1, "width": 4, "fnn_depth": 2}
    return [
        BPMNISTArchitecture("SMFR d1 w4", "smfr", dict(smfr)),
        BPMNISTArchitecture("SMFR_bias d1 w4", "smfr", dict(smfr), bias_steps=PAPER_BIAS_STEPS),
        BPMNISTArchitecture("SMFR_no_context d1 w4", "smfr", {**smfr, "input_context": False}),
        BPMNISTArchitecture("FNN 3x200", "fnn", {"width": 200, "depth": 3}),
        BPMNISTArchitecture("Transformer 2x64", "transformer", {"d_model": 64, "n_layers": 2, "d_ff": 256}),
    ]


def ideal_routing_targets(permutation: np.ndarray) -> np.ndarray:
    """``[batch, 4]`` int64: entry ``[b, n]`` is the input position that holds original strip ``n`` under
    example ``b``'s permutation, the input the first Multiplexer's output block ``n`` reads to undo it."""
    return inverse_permutations()[np.asarray(permutation, dtype=np.int64)]


def ideal_routing_bias(permutation: np.ndarray, n_outputs: int, n_inputs: int, bias: float) -> torch.Tensor:
    """``[batch, n_outputs, n_inputs]`` float32: ``bias`` at ``[b, n, ideal_routing_targets[b, n]]`` for the
    first four output blocks, 0 elsewhere (further output blocks and the indicator input are left alone)."""
    if n_outputs < N_BLOCKS:
        raise UserError(
            f"the ideal-permutation bias needs a first Multiplexer with at least {N_BLOCKS} output blocks "
            f"(one per image strip), this one has {n_outputs}"
        )
    targets = torch.from_numpy(ideal_routing_targets(permutation))
    out = torch.zeros(len(targets), n_outputs, n_inputs)
    out[:, :N_BLOCKS].scatter_(2, targets.unsqueeze(-1), bias)
    return out


def first_multiplexer(model: nn.Module) -> Multiplexer:
    if not isinstance(model, SMFR):
        raise UserError(f"the routing bias needs an SMFR, got {type(model).__name__}")
    return model.layers[0].multiplexer


@contextlib.contextmanager
def routing_bias_at_step(
    model: nn.Module, architecture: BlockArchitecture, step: int, permutation: np.ndarray
) -> Iterator[None]:
    """SMFR_bias: while training step ``step`` (1-based) runs, bias the first Multiplexer towards the ideal
    permutation of each example if ``step <= architecture.bias_steps``; otherwise (and for architectures
    without ``bias_steps``) do nothing."""
    if not 1 <= step <= getattr(architecture, "bias_steps", 0):
        yield
        return
    first = first_multiplexer(model)
    bias = ideal_routing_bias(
        permutation, first.n_outputs, first.n_inputs, getattr(architecture, "bias", IDEAL_ROUTING_BIAS)
    )
    with multiplexer_logit_bias(first, bias):
        yield


@dataclass
class SMFRBPMNISTConfig:
    architectures: list[BPMNISTArchitecture] = field(default_factory=default_bpmnist_architectures)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # the seed also draws the split and digits
    task: BlockPermutedImagesConfig = field(default_factory=BlockPermutedImagesConfig)
    steps: int = 20000  # 10-15 CPU-minutes for 3 seeds x 5 models (paper: 25k and 250k on MNIST)
    eval_every: int = 1000
    early_step: int = 0  # also evaluated; 0 = steps // 10 (the paper's 25k of 250k steps)
    training: BlockTrainingConfig = field(default_factory=lambda: BlockTrainingConfig(loss="cross_entropy"))
    batches: str = "per_permutation"  # one permutation per batch (A.2.4), or "mixed"
    n_eval_train: int = 2000  # training examples evaluated (a fixed random subset)
    eval_limit: int = 0  # at most this many examples of each evaluated split (fixed subset); 0 = all
    probe_images: int = 64  # validation images x 8 permutations for the routing indicators

    def __post_init__(self) -> None:
        if not self.architectures or not self.seeds:
            raise UserError("need at least one architecture and one seed")
        labels = [a.label for a in self.architectures]
        if len(set(labels)) != len(labels):
            raise UserError(f"architecture labels must be unique, got {labels}")
        if self.batches not in BATCH_MODES:
            raise UserError(
                f"batches={self.batches!r} is not valid; {choices_hint(self.batches, BATCH_MODES)}"
            )
        if self.steps < 1 or self.eval_every < 1 or self.n_eval_train < 1 or self.probe_images < 1:
            raise UserError("steps, eval_every, n_eval_train and probe_images must be >= 1")
        if self.eval_limit < 0 or not 0 <= self.early_step <= self.steps:
            raise UserError("eval_limit must be >= 0 and early_step in [0, steps]")

    @property
    def resolved_early_step(self) -> int:
        return self.early_step or max(1, self.steps // 10)

    def evaluation_steps(self) -> list[int]:
        steps = set(range(self.eval_every, self.steps + 1, self.eval_every))
        return sorted(steps | {self.resolved_early_step, self.steps})


@dataclass
class BPMNISTTrial:
    label: str
    model: str
    paper_row: str
    seed: int
    n_parameters: int
    removed_digits: list[int]
    early: dict[str, float]  # accuracies at early_step
    final: dict[str, float]  # accuracies at the last step
    selected: dict[str, float]  # at the evaluation with the best valid_iid accuracy (the paper's selection)
    selected_step: int
    routing: dict[str, Any] | None  # final RoutingIndicators (SMFRs)
    example_routing: dict[str, Any] | None  # final weights/gates/predictions on the example inputs (SMFRs)
    seconds: float
    history: list[dict[str, Any]]


@dataclass
class EvalSet:
    blocks: torch.Tensor  # [n, n_in, block_size]
    labels: torch.Tensor  # [n]
    parts: dict[str, np.ndarray]  # name -> boolean mask over the n examples


def _subset(n: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(n, limit, replace=False)) if 0 < limit < n else np.arange(n)


def evaluation_sets(
    data: BlockPermutedImagesData, config: SMFRBPMNISTConfig, seed: int
) -> dict[str, EvalSet]:
    """Fixed example subsets: ``train``, ``valid_iid`` and ``test`` (with its iid / ood parts)."""
    rng = np.random.default_rng([seed, 2])
    sets: dict[str, EvalSet] = {}
    for name, limit in (
        ("train", config.n_eval_train),
        ("valid_iid", config.eval_limit),
        ("test", config.eval_limit),
    ):
        split = data.splits[name]
        index = _subset(len(split), limit, rng)
        part = split.take(index)
        parts = {name: np.ones(len(part), dtype=bool)}
        if name == "test":
            unseen = np.zeros(len(part), dtype=bool)
            for digit, permutation in data.removed_combinations:
                unseen |= (part.labels == digit) & (part.permutation == permutation)
            parts.update({"test_iid": ~unseen, "test_ood": unseen})
        sets[name] = EvalSet(torch.from_numpy(data.blocks(part)), torch.from_numpy(part.labels), parts)
    return sets


def probe_split(data: BlockPermutedImagesData, n_images: int) -> PermutedImageSplit:
    """The first ``n_images`` validation images, each under all eight permutations (image-major)."""
    valid = data.splits["valid_iid"]
    images = np.unique(valid.image)[:n_images]
    image = np.repeat(images, N_PERMUTATIONS)
    permutation = np.tile(np.arange(N_PERMUTATIONS, dtype=np.int64), len(images))
    return PermutedImageSplit(image, permutation, data.image_labels[image])


def example_split(data: BlockPermutedImagesData) -> PermutedImageSplit:
    """One validation image of the first removed digit under all eight permutations (A.4: "a set of example
    inputs for which you expect different routing behavior"); it includes the never-trained combination."""
    valid = data.splits["valid_iid"]
    of_digit = np.flatnonzero(valid.labels == data.removed_digits[0])
    image = int(valid.image[of_digit[0] if len(of_digit) else 0])
    images = np.full(N_PERMUTATIONS, image, dtype=np.int64)
    return PermutedImageSplit(images, np.arange(N_PERMUTATIONS, dtype=np.int64), data.image_labels[images])


def class_scores(model: nn.Module, blocks: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """The first ten units of the (single) output block are the class scores."""
    out = model(blocks)
    return out.blocks[:, 0, :N_CLASSES], out


def classification_loss(scores: torch.Tensor, labels: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "mse":
        return F.mse_loss(scores, F.one_hot(labels, N_CLASSES).to(scores.dtype))
    return F.cross_entropy(scores, labels)


@torch.no_grad()
def evaluate(model: nn.Module, sets: dict[str, EvalSet], batch_size: int = 2048) -> dict[str, float]:
    was_training = model.training
    model.eval()
    accuracy: dict[str, float] = {}
    for eval_set in sets.values():
        correct = torch.cat(
            [
                class_scores(model, eval_set.blocks[i : i + batch_size])[0].argmax(-1)
                == eval_set.labels[i : i + batch_size]
                for i in range(0, len(eval_set.labels), batch_size)
            ]
        ).numpy()
        for name, mask in eval_set.parts.items():
            accuracy[name] = float(correct[mask].mean()) if mask.any() else float("nan")
    model.train(was_training)
    return accuracy


def train_bpmnist(
    architecture: BlockArchitecture, seed: int, config: SMFRBPMNISTConfig, data: BlockPermutedImagesData
) -> BPMNISTTrial:
    """Train one model with one seed on ``data`` (built with the same seed)."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    shape = BlockShape(data.n_input_blocks, 1, data.block_size)
    model = build_block_model(architecture.model, shape, **architecture.model_config)
    is_smfr = architecture.model == "smfr"
    optimizer = torch.optim.Adam(model.parameters(), lr=config.training.lr)
    train = data.splits["train"]
    by_permutation = [np.flatnonzero(train.permutation == p) for p in range(N_PERMUTATIONS)]
    rng = np.random.default_rng([seed, 54])
    sets = evaluation_sets(data, config, seed)
    probe = probe_split(data, config.probe_images)
    probe_blocks = torch.from_numpy(data.blocks(probe))
    permutations = np.asarray(PERMUTATIONS)
    evaluation_steps = set(config.evaluation_steps())

    history: list[dict[str, Any]] = []
    with training_bar(config.steps, f"{architecture.label} seed {seed}") as bar:
        for step in range(1, config.steps + 1):
            if config.batches == "per_permutation":
                pool = by_permutation[int(rng.integers(N_PERMUTATIONS))]
                index = pool[rng.integers(len(pool), size=config.training.batch_size)]
            else:
                index = rng.integers(len(train), size=config.training.batch_size)
            with routing_bias_at_step(model, architecture, step, train.permutation[index]):
                scores, out = class_scores(model, torch.from_numpy(data.blocks(train, index)))
            task_loss = classification_loss(
                scores, torch.from_numpy(train.labels[index]), config.training.loss
            )
            loss = task_loss + config.training.saturation_weight * saturation_loss(
                out.routing_logits, config.training.saturation_threshold
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.training.grad_clip)
            optimizer.step()
            if step in evaluation_steps:
                record: dict[str, Any] = {
                    "step": step,
                    "loss": float(task_loss.detach()),
                    **evaluate(model, sets),
                }
                if is_smfr:
                    indicators, _ = measure_routing(model, probe_blocks, probe.permutation, permutations)
                    record["routing"] = indicators.as_dict()
                history.append(record)
            bar.update()

    example_routing = None
    if is_smfr:
        examples = example_split(data)
        with torch.no_grad():
            model.eval()
            scores, out = class_scores(model, torch.from_numpy(data.blocks(examples)))
        weights, gates = routing_arrays(out)
        example_routing = {
            "image": int(examples.image[0]),
            "label": int(examples.labels[0]),
            "predictions": scores.argmax(-1).tolist(),
            "weights": [w.tolist() for w in weights],
            "gates": [g.tolist() for g in gates],
        }
    early_step = config.resolved_early_step
    selected = max(history, key=lambda r: (r["valid_iid"], r["step"]))
    return BPMNISTTrial(
        label=architecture.label,
        model=architecture.model,
        paper_row=paper_row(architecture),
        seed=seed,
        n_parameters=count_parameters(model),
        removed_digits=list(data.removed_digits),
        early=_accuracies(next(r for r in history if r["step"] == early_step)),
        final=_accuracies(history[-1]),
        selected=_accuracies(selected),
        selected_step=int(selected["step"]),
        routing=history[-1].get("routing"),
        example_routing=example_routing,
        seconds=time.perf_counter() - start,
        history=history,
    )


def _accuracies(record: dict[str, Any]) -> dict[str, float]:
    return {name: float(record[name]) for name in EVALUATED}


@dataclass
class BPMNISTResult:
    trials: list[BPMNISTTrial]
    report: Path
    results: Path
    figures: list[Path]


def _mean_std(values: list[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if not len(array):
        return float("nan"), float("nan")
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def _cell(values: list[float]) -> str:
    mean, std = _mean_std(values)
    return "-" if np.isnan(mean) else f"{mean:.3f} ± {std:.3f}"


def summarise(config: SMFRBPMNISTConfig, trials: list[BPMNISTTrial]) -> dict[str, dict[str, Any]]:
    """Per architecture: mean and std over seeds of every accuracy (early / final / selected) and of the
    final routing indicators."""
    summary: dict[str, dict[str, Any]] = {}
    for architecture in config.architectures:
        mine = [t for t in trials if t.label == architecture.label]
        entry: dict[str, Any] = {"n_parameters": mine[0].n_parameters, "paper_row": mine[0].paper_row}
        for when in ("early", "final", "selected"):
            entry[when] = {name: _mean_std([getattr(t, when)[name] for t in mine]) for name in EVALUATED}
        routed = [t.routing for t in mine if t.routing is not None]
        if routed:
            entry["routing"] = {
                "sharpness_first": _mean_std([r["sharpness"][0] for r in routed]),
                "sharpness_mean": _mean_std([float(np.mean(r["sharpness"])) for r in routed]),
                "permutation_difference": _mean_std([r["permutation_difference"] for r in routed]),
                "fairness": _mean_std([r["fairness"] for r in routed]),
                "indicator_share": _mean_std([r["indicator_share"] for r in routed]),
                "block_share": np.mean([r["block_share"] for r in routed], axis=0).tolist(),
                "gate": np.mean([r["gate"] for r in routed], axis=0).tolist(),
            }
        summary[architecture.label] = entry
    return summary


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def run_bpmnist(out_dir: str | Path, config: SMFRBPMNISTConfig | None = None) -> BPMNISTResult:
    """Every architecture x every seed; writes the report, ``results.json`` and the figures to ``out_dir``."""
    config = config or SMFRBPMNISTConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    datasets: dict[int, BlockPermutedImagesData] = {}

    def data_for(seed: int) -> BlockPermutedImagesData:
        if seed not in datasets:
            datasets[seed] = build_block_permuted_images(config.task, seed)
        return datasets[seed]

    trials = train_every_trial(
        config.architectures,
        config.seeds,
        lambda architecture, seed: train_bpmnist(architecture, seed, config, data_for(seed)),
        headline=lambda t: f"test {t.final['test']:.3f}, test OOD {t.final['test_ood']:.3f}",
    )
    summary = summarise(config, trials)
    figures = [save_accuracy_figure(config, trials, out / "bpmnist_accuracy.png")]
    smfr_trials = [t for t in trials if t.routing is not None]
    if smfr_trials:
        curves = [
            IndicatorCurve(
                f"{t.label} seed {t.seed}",
                [r["step"] for r in t.history],
                [RoutingIndicators(**r["routing"]) for r in t.history],
            )
            for t in smfr_trials
        ]
        figures.append(
            save_indicator_figure(
                curves, out / "bpmnist_indicators.png", "SMFR routing indicators over training (BLOCK A.2.4)"
            )
        )
        for architecture in config.architectures:
            mine = [t for t in smfr_trials if t.label == architecture.label]
            if mine:
                best = max(mine, key=lambda t: t.final["valid_iid"])
                path = out / f"bpmnist_routing_{_slug(architecture.label)}.png"
                figures.append(save_example_routing(best, data_for(best.seed), path))
    results = out / "results.json"
    results.write_text(
        json.dumps(
            {
                "config": asdict(config),
                "paper_table_3": {
                    row: {"25k": list(early), "250k": list(late)}
                    for row, (early, late) in PAPER_TABLE_3.items()
                },
                "summary": summary,
                "trials": [asdict(t) for t in trials],
            },
            indent=2,
            allow_nan=True,
        )
    )
    report = out / "report.md"
    report.write_text(render_report(config, trials, summary, datasets, figures))
    return BPMNISTResult(trials, report, results, figures)


def save_example_routing(trial: BPMNISTTrial, data: BlockPermutedImagesData, path: Path) -> Path:
    """The routing weights and gates of ``trial``'s final model on its example image (all permutations)."""
    example = trial.example_routing
    assert example is not None
    split = PermutedImageSplit(
        np.full(N_PERMUTATIONS, example["image"], dtype=np.int64),
        np.arange(N_PERMUTATIONS, dtype=np.int64),
        np.full(N_PERMUTATIONS, example["label"], dtype=np.int64),
    )
    height, width = data.image_shape
    seen = data.blocks(split)[:, :N_BLOCKS].reshape(N_PERMUTATIONS, height, width)
    unseen = {p for d, p in data.removed_combinations if d == example["label"]}
    titles = [
        f"perm {p} {''.join(map(str, PERMUTATIONS[p]))}{' (unseen)' if p in unseen else ''}: "
        f"pred {example['predictions'][p]}"
        for p in range(N_PERMUTATIONS)
    ]
    labels = [f"pos {j}" for j in range(N_BLOCKS)] + (["perm id"] if data.config.task_indicator else [])
    return save_routing_figure(
        [np.asarray(w) for w in example["weights"]],
        [np.asarray(g) for g in example["gates"]],
        path,
        titles,
        images=seen,
        input_labels=labels,
        suptitle=f"{trial.label}, seed {trial.seed}: digit {example['label']} under the 8 permutations "
        "(position j holds strip PERMUTATIONS[p][j])",
    )


def save_accuracy_figure(config: SMFRBPMNISTConfig, trials: list[BPMNISTTrial], path: Path) -> Path:
    """Accuracy over training per split: mean over seeds (thick) and every seed (thin)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ("train", "valid_iid", "test", "test_ood")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4))
    colours = plt.get_cmap("tab10")
    for i, architecture in enumerate(config.architectures):
        mine = [t for t in trials if t.label == architecture.label]
        steps = [r["step"] for r in mine[0].history]
        for ax, name in zip(axes, panels, strict=True):
            curves = np.array([[r[name] for r in t.history] for t in mine], dtype=np.float64)
            for curve in curves:
                ax.plot(steps, curve, color=colours(i % 10), lw=0.6, alpha=0.5)
            ax.plot(steps, np.nanmean(curves, axis=0), color=colours(i % 10), lw=2, label=architecture.label)
    for ax, name in zip(axes, panels, strict=True):
        ax.set_title(name if name != "test_ood" else "test_ood (removed digit x permutation)", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"block-permuted {config.task.source}: accuracy over training, {len(config.seeds)} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _pair(stat: tuple[float, float]) -> str:
    return "-" if np.isnan(stat[0]) else f"{stat[0]:.3f} ± {stat[1]:.3f}"


def render_report(
    config: SMFRBPMNISTConfig,
    trials: list[BPMNISTTrial],
    summary: dict[str, dict[str, Any]],
    datasets: dict[int, BlockPermutedImagesData],
    figures: list[Path],
) -> str:
    t = config.training
    some = next(iter(datasets.values()))
    sizes = ", ".join(f"{name} {len(split)}" for name, split in some.splits.items())
    early = config.resolved_early_step
    lines = [
        "# Block-permuted images: SMFR vs FNN vs Transformer (BLOCK 5.4, Tab. 3, A.2.4)",
        "",
        f"Data: {config.task.source} ({some.image_shape[0]}x{some.image_shape[1]}), four horizontal strips "
        f"of {some.block_size} pixels, eight balanced permutations, permutation id as a one-hot fifth block: "
        f"{config.task.task_indicator}. Split sizes (seed {config.seeds[0]}): {sizes}. Removed digit per "
        "test permutation 4-7, per seed: "
        + "; ".join(f"seed {s}: {list(d.removed_digits)}" for s, d in sorted(datasets.items()))
        + ".",
        "",
        f"Training: {config.steps} steps, batch {t.batch_size} ({config.batches.replace('_', ' ')}), Adam lr "
        f"{t.lr}, clip {t.grad_clip}, loss {t.loss}, saturation regulariser weight {t.saturation_weight}; "
        f"evaluated every {config.eval_every} steps and at step {early}. Seeds {config.seeds}.",
        "",
        "**Scale.** Paper: MNIST 28x28 (block size 196), every model about 4 million parameters, 25k and "
        "250k steps, test accuracy averaged over the five best models per type by validation accuracy. Ours: "
        f"{config.task.source}, the models below, {early} and {config.steps} steps, every trial "
        "(mean ± std over seeds). The paper's columns are therefore a reference point, not a target.",
        "",
        f"| architecture | params | train acc | valid acc | test @ {early} | test @ {config.steps} "
        f"| test IID @ {config.steps} | test OOD @ {config.steps} | paper test @ 25k | paper test @ 250k |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for architecture in config.architectures:
        entry = summary[architecture.label]
        row = PAPER_TABLE_3.get(entry["paper_row"])
        paper = [f"{m:.3f} ± {s:.4f}" for m, s in row] if row else ["-", "-"]
        final, first = entry["final"], entry["early"]
        lines.append(
            f"| {architecture.label} | {entry['n_parameters']:,} | {_pair(final['train'])} | "
            f"{_pair(final['valid_iid'])} | {_pair(first['test'])} | {_pair(final['test'])} | "
            f"{_pair(final['test_iid'])} | {_pair(final['test_ood'])} | {paper[0]} | {paper[1]} |"
        )
    run_rows = {summary[a.label]["paper_row"] for a in config.architectures}
    not_run = [row for row in PAPER_TABLE_3 if row not in run_rows]
    biased = [a for a in config.architectures if getattr(a, "bias_steps", 0) > 0]
    lines += [
        "",
        "`test` is the paper's test accuracy (permutations 4-7, all digits); `test OOD` is its part that was "
        "never trained (the removed digit of each test permutation), `test IID` the rest."
        + (f" Paper rows not run here: {', '.join(not_run)}." if not_run else ""),
        "",
        "Variants (BLOCK 5.4): SMFR_no_context is the SMFR with `model_config: {input_context: false}` (the "
        "FNNRs do not get the Multiplexer's input blocks as extra input). SMFR_bias is the SMFR with "
        "`bias_steps`: during the first training steps the first Multiplexer's routing logit of the ideal "
        "input of every output block (output n reads the position that holds original strip n under the "
        "example's permutation) gets `+bias`; training mode only, so every accuracy and indicator here is "
        "measured without it. The paper gives no magnitude."
        + "".join(f" {a.label}: {a.bias_steps} steps, +{a.bias:g}." for a in biased),
        "",
        "At the evaluation with the best validation accuracy (the paper's selection criterion):",
        "",
        "| architecture | test | test OOD |",
        "|---|---|---|",
    ]
    for architecture in config.architectures:
        selected = summary[architecture.label]["selected"]
        lines.append(f"| {architecture.label} | {_pair(selected['test'])} | {_pair(selected['test_ood'])} |")
    routed = [a for a in config.architectures if "routing" in summary[a.label]]
    if routed:
        lines += [
            "",
            f"Routing indicators of the SMFRs at step {config.steps} (A.2.4; "
            "`recombine.probes.block_routing`), on "
            f"{config.probe_images} validation images x 8 permutations, mean ± std over seeds. Sharpness: "
            "1 = every output block copies one input; permutation difference: 0 = the first layer routes the "
            "original strips the same way under every permutation (it undid the permutation); fairness: "
            "1 = every strip gets the same share of the first layer's attention.",
            "",
            "| architecture | sharpness (first layer) | sharpness (all) | permutation difference | fairness "
            "| share per strip (top..bottom) | share on the indicator | mean gate per layer |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for architecture in routed:
            r = summary[architecture.label]["routing"]
            lines.append(
                f"| {architecture.label} | {_pair(r['sharpness_first'])} | {_pair(r['sharpness_mean'])} | "
                f"{_pair(r['permutation_difference'])} | {_pair(r['fairness'])} | "
                f"{', '.join(f'{s:.2f}' for s in r['block_share'])} | {_pair(r['indicator_share'])} | "
                f"{', '.join(f'{g:.2f}' for g in r['gate'])} |"
            )
    lines += [
        "",
        "Per trial (final step):",
        "",
        "| architecture | seed | train | valid | test | test IID | test OOD | best-valid step | perm. diff. "
        "| sharpness | fairness | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for trial in trials:
        f = trial.final
        r = trial.routing
        routing_cells = (
            f"{r['permutation_difference']:.3f} | {r['sharpness'][0]:.3f} | {r['fairness']:.3f}"
            if r
            else "- | - | -"
        )
        lines.append(
            f"| {trial.label} | {trial.seed} | {f['train']:.3f} | {f['valid_iid']:.3f} | {f['test']:.3f} | "
            f"{f['test_iid']:.3f} | {f['test_ood']:.3f} | {trial.selected_step} | {routing_cells} | "
            f"{trial.seconds:.0f} |"
        )
    lines.append("")
    lines += [f"![{path.stem}]({path.name})" for path in figures]
    lines.append("")
    return "\n".join(lines)


SMFR_BPMNIST = ScriptedReproduction(
    "smfr-bpmnist",
    "block-permuted digits: SMFR vs FNN vs Transformer on unseen digit x permutation combinations, "
    "with routing indicators over training (BLOCK Tab. 3, A.2.4)",
    "BLOCK 5.4, Tab. 3, A.2.4",
    SMFRBPMNISTConfig,
    run_bpmnist,
    quick={"steps": 40, "eval_every": 20, "n_eval_train": 200, "eval_limit": 400, "probe_images": 8},
)
