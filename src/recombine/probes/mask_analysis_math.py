"""Mathematics weight masks: does a mask trained on the "easy" questions solve the "hard" ones? (thesis 3.3).

Thesis 3.3 (Fig. 3.6, App. B.3.7) repeats the SCAN mask analysis (:mod:`recombine.probes.mask_analysis_scan`)
on the Mathematics Dataset (Saxton et al., 2019), whose train sets come in three difficulties that the
same rules govern:

1. train a seq2seq Transformer on one module's questions of *all three* train difficulties (easy, medium,
   hard), so that its weights can answer every difficulty; freeze it;
2. train two weight masks (:mod:`recombine.probes.weight_masks`, thesis 3.1) on it: the **IID mask** on the
   same mixed train set ("masks trained on IID data") and the **easy mask** on its easy third only;
3. evaluate the unmasked network and both masked ones on the **hard** held-out questions (greedy decoding,
   sequence exact match, thesis C.1).

The easy questions hold every rule the hard ones need. A drop of the easy mask below the IID mask on the
hard set therefore means that the hard questions use weights the easy ones do not: "samples in the 'hard'
split depend on exclusive weights, despite those being governed by the same underlying rules" (thesis 3.3;
Fig. 3.6 shows "a consistent performance drop" on add_or_sub, linear_1d, differentiate, sort and collect).
B.3.7 warns that the size of the drop is hard to read: a harder difficulty can contain questions as easy
as the easier ones, so the hard set's accuracy stays above zero even when no truly hard question is solved.

Data (:mod:`recombine.tasks.mathematics`, B.3.7: the official train files split into new train and
validation sets per difficulty, "no sample appears twice"): the ``math`` task's ``train`` split (a third
per difficulty, ``group`` 0/1/2 = easy/medium/hard) trains the network and the IID mask, its
``group == 0`` part the easy mask; its ``valid_iid`` split (per-difficulty validation questions, never in
``train``) gives the held-out sets, the ``group == 2`` part being the thesis's "hard test set".

Network (B.3.7: Saxton et al.'s Transformer, ``d_model = 256``, ``d_ff = 512``, 4 heads, 3 + 3 layers,
Adam lr 1e-4, clipping 1, always teacher-forced; 8 mask samples; per-module batch sizes, betas, mask
learning rates and step counts in Tab. B.3, :data:`THESIS_SETTINGS`): ``transformer_seq2seq`` at CPU
scale with an **untied** output layer, so that the output layer is masked (the thesis ties it to the
shared word embedding; word embeddings are not masked, B.3.7). :class:`MasksMathConfig` holds the scale,
``docs/probes/masks-math.md`` the cost.

:func:`run_masks_math` runs every module x seed and writes ``report.md`` (per module: hard-set accuracy
with no mask, the IID mask and the easy mask, the drop, each mask on its own training difficulty, the kept
weights, mean +- std over seeds; a verdict per module), ``results.json`` and ``accuracy.png`` (Fig. 3.6).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from recombine import models
from recombine.errors import UserError
from recombine.models.transformer_seq2seq import TransformerSeq2SeqConfig
from recombine.probes.mask_analysis_common import (
    analyse_every_architecture_and_seed,
    check_choice,
    format_mean_std,
    trial_settings,
    wall_time_note,
)
from recombine.probes.mask_sets import MaskSet
from recombine.probes.seq2seq_masks import (
    MaskedSeq2Seq,
    exact_match_accuracy,
    pretrain_teacher_forced,
    train_seq2seq_mask,
)
from recombine.probes.weight_masks import MaskTrainingConfig, alpha_from_beta
from recombine.tasks.base import Seq2SeqSplit, TaskData
from recombine.tasks.mathematics import MathematicsConfig, build_mathematics
from recombine.train.batching import PaddedSeq2SeqSplit

#: the modules of thesis Fig. 3.6, in its order
MODULES = ("add_or_sub", "linear_1d", "differentiate", "sort", "collect")
#: the train difficulties: ``group`` ids 0, 1, 2 of the ``math`` task (``mathematics.TRAIN_LEVELS``)
DIFFICULTIES = ("easy", "medium", "hard")
EASY, HARD = 0, 2
#: the masks: trained on every difficulty of the train set ("IID data") and on its easy part only
MASKS = ("iid", "easy")
#: the evaluated networks: unmasked, then each mask
NETWORKS = ("none", *MASKS)
NETWORK_LABELS = {"none": "no mask", "iid": "IID mask", "easy": "easy mask"}
#: the claim holds for a module when the easy mask's mean hard-set accuracy is this far below the IID mask's
DROP_THRESHOLD = 0.05
#: the claim is testable on a module when the IID mask keeps at least this hard-set accuracy (below it a
#: drop has no room to show; thesis B.3.7 chose modules with "good performance without masking")
MIN_HARD_ACCURACY = 0.20


@dataclass(frozen=True)
class ThesisModuleSettings:
    """One column of thesis Tab. B.3 (the network's and the masks' settings per module)."""

    batch_size: int  # the network's
    mask_batch_size: int
    beta: float  # the mask regulariser, alpha = beta / mask batch size (B.3.2)
    train_steps: int
    mask_steps: int
    mask_learning_rate: float
    warmup_steps: int  # linear learning-rate warmup of the network's training (0: none)


#: thesis Tab. B.3, per module
THESIS_SETTINGS = {
    "add_or_sub": ThesisModuleSettings(256, 256, 2e-5, 30_000, 30_000, 0.03, 0),
    "linear_1d": ThesisModuleSettings(512, 400, 1e-6, 200_000, 50_000, 0.02, 5_000),
    "differentiate": ThesisModuleSettings(128, 128, 1e-5, 40_000, 40_000, 0.03, 0),
    "sort": ThesisModuleSettings(256, 256, 3e-6, 30_000, 30_000, 0.03, 0),
    "collect": ThesisModuleSettings(128, 256, 1e-6, 200_000, 50_000, 0.02, 5_000),
}


def default_transformer() -> TransformerSeq2SeqConfig:
    """4 heads and an untied output layer, so that the output layer is masked (the embeddings are not;
    B.3.7); 2 + 2 layers of ``d_model = 128``, ``d_ff = 256`` (thesis B.3.7: 3 + 3 layers, 256, 512)."""
    return TransformerSeq2SeqConfig(
        d_model=128, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, tied_embedding=False
    )


#: the default betas are Tab. B.3's times this, since the masks train for 1,500 steps, not 30k-50k: in a
#: 300-step pilot on sort (``docs/probes/masks-math.md``) Tab. B.3's beta removed 5 % of the weights, and
#: up to 10x it the IID mask cost nothing
BETA_SCALE = 3.0


def _default_betas() -> dict[str, float]:
    return {module: BETA_SCALE * settings.beta for module, settings in THESIS_SETTINGS.items()}


def _thesis_mask_learning_rates() -> dict[str, float]:
    return {module: settings.mask_learning_rate for module, settings in THESIS_SETTINGS.items()}


@dataclass
class MasksMathConfig:
    """``recombine reproduce masks-math``: the Mathematics mask analysis of thesis 3.3 at CPU scale.

    Thesis scale (B.3.7, Tab. B.3) in the comments; ``docs/probes/masks-math.md`` gives the cost and why
    the default modules are three of the thesis's five."""

    # Fig. 3.6 has five; differentiate and collect have the longest questions (about twice the others'
    # length), differentiate is the slowest to generate, and the thesis trains collect's network longest
    modules: list[str] = field(default_factory=lambda: ["add_or_sub", "linear_1d", "sort"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # thesis Fig. 3.6: 5 seeds per task
    transformer: TransformerSeq2SeqConfig = field(default_factory=default_transformer)
    train_steps: int = 4_000  # Tab. B.3: 30k-200k
    batch_size: int = 128  # Tab. B.3: 128-512; also the mask batch, split between the mask samples
    learning_rate: float = 1e-3  # B.3.7: 1e-4 (for 30k+ steps)
    grad_clip: float = 1.0  # B.3.7
    mask_steps: int = 1_500  # Tab. B.3: 30k-50k per mask
    # Tab. B.3 x BETA_SCALE per module (shorter mask training); alpha = beta / batch_size (B.3.2)
    betas: dict[str, float] = field(default_factory=_default_betas)
    mask_learning_rates: dict[str, float] = field(default_factory=_thesis_mask_learning_rates)  # Tab. B.3
    mask_samples: int = 8  # B.3.7
    n_train: int = 30_000  # questions to train on, a third per difficulty (thesis: the official files)
    n_eval: int = 500  # held-out questions per difficulty (thesis B.3.7: 10k validation questions)
    eval_batch_size: int = 256
    data_seed: int = 0  # the generated questions; the same for every seed (one dataset, as in the thesis)
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not self.modules:
            raise UserError("give at least one module")
        for module in self.modules:
            check_choice("Mathematics module for the mask analysis", module, MODULES)
            for name in ("betas", "mask_learning_rates"):
                if module not in getattr(self, name):
                    raise UserError(f"{name} has no value for module {module!r}; add {name}.{module}=...")
        if len(set(self.modules)) != len(self.modules):
            raise UserError("modules must not repeat")
        if self.train_steps < 0 or self.mask_steps < 0:
            raise UserError("train_steps and mask_steps must be >= 0")
        if self.n_train < len(DIFFICULTIES) or self.n_eval < 1:
            raise UserError(
                f"n_train must be >= {len(DIFFICULTIES)} (a third per difficulty) and n_eval >= 1, "
                f"got {self.n_train} and {self.n_eval}"
            )
        if self.mask_samples < 1 or self.batch_size < self.mask_samples:
            raise UserError(
                f"batch_size ({self.batch_size}) must be >= mask_samples ({self.mask_samples}) >= 1"
            )
        if self.eval_batch_size < 1:
            raise UserError("eval_batch_size must be >= 1")
        if self.learning_rate <= 0 or self.grad_clip < 0:
            raise UserError("learning_rate must be > 0 and grad_clip >= 0")
        for module, beta in self.betas.items():
            if beta < 0:
                raise UserError(f"betas.{module} must be >= 0, got {beta}")
        for module, rate in self.mask_learning_rates.items():
            if rate <= 0:
                raise UserError(f"mask_learning_rates.{module} must be > 0, got {rate}")

    def mask_config(self, module: str) -> MaskTrainingConfig:
        """Mask training for ``module``: ``betas[module]`` (default: Tab. B.3's x :data:`BETA_SCALE`) and
        ``mask_learning_rates[module]`` (Tab. B.3), ``alpha = beta / batch_size``, 8 samples (B.3.7); the
        per-sample loop applies them (:func:`train_seq2seq_mask` picks it for every seq2seq model)."""
        return MaskTrainingConfig(
            steps=self.mask_steps,
            learning_rate=self.mask_learning_rates[module],
            alpha=alpha_from_beta(self.betas[module], self.batch_size),
            n_samples=self.mask_samples,
        )

    def task_config(self, module: str) -> MathematicsConfig:
        """The ``math`` task of ``module``: ``n_train`` train questions and ``n_eval`` held-out ones per
        difficulty (``valid_iid``); no interpolation or extrapolation sets (the analysis uses neither)."""
        return MathematicsConfig(
            module=module,
            n_train=self.n_train,
            n_valid_iid=len(DIFFICULTIES) * self.n_eval,
            n_test_iid=0,
            n_valid_ood=0,
            n_test_ood=0,
        )


# --- data and model ---


def difficulty_part(split: Seq2SeqSplit, group: int) -> Seq2SeqSplit:
    """The examples of ``split`` whose ``group`` (train difficulty) is ``group``, in their order."""
    return split.take(np.flatnonzero(split.group == group))


@dataclass
class MathModuleData:
    """One module's data: the train set (network and IID mask), its easy part (easy mask) and the
    held-out questions per difficulty (``evaluation["hard"]`` is the thesis's hard test set)."""

    module: str
    train: PaddedSeq2SeqSplit
    train_easy: PaddedSeq2SeqSplit
    evaluation: dict[str, PaddedSeq2SeqSplit]  # difficulty name -> held-out questions
    data: TaskData

    def mask_train_set(self, mask: str) -> PaddedSeq2SeqSplit:
        """The set ``mask`` (``iid`` / ``easy``) trains on."""
        check_choice("mask", mask, MASKS)
        return self.train if mask == "iid" else self.train_easy


def load_module(config: MasksMathConfig, module: str) -> MathModuleData:
    """Generate (or load from the cache) ``module``'s questions and cut them by difficulty."""
    data = build_mathematics(config.task_config(module), config.data_seed)
    train: Seq2SeqSplit = data.splits["train"]  # type: ignore[assignment]
    held_out: Seq2SeqSplit = data.splits["valid_iid"]  # type: ignore[assignment]
    return MathModuleData(
        module=module,
        train=PaddedSeq2SeqSplit.from_split(train),
        train_easy=PaddedSeq2SeqSplit.from_split(difficulty_part(train, EASY)),
        evaluation={
            name: PaddedSeq2SeqSplit.from_split(difficulty_part(held_out, group))
            for group, name in enumerate(DIFFICULTIES)
        },
        data=data,
    )


def build_network(config: MasksMathConfig, data: TaskData) -> nn.Module:
    """The ``transformer_seq2seq`` model of ``config.transformer`` for the module's task."""
    return models.build("transformer_seq2seq", data.spec, **asdict(config.transformer))


def pretrain(config: MasksMathConfig, module: MathModuleData, seed: int) -> tuple[nn.Module, list[float]]:
    """The network trained on every difficulty (thesis B.3.7: "First, we train the network on all
    difficulty levels"): teacher-forced token cross-entropy, Adam, gradient clipping. Left in eval mode."""
    torch.manual_seed(seed)
    model = build_network(config, module.data).to(config.device)
    losses = pretrain_teacher_forced(
        model,
        module.train,
        module.data.spec.n_classes,
        batch_size=config.batch_size,
        steps=config.train_steps,
        learning_rate=config.learning_rate,
        grad_clip=config.grad_clip,
        seed=seed,
        description=f"{module.module} seed {seed}",
        device=config.device,
    )
    return model, losses


# --- one trial ---


@dataclass
class MathMaskTrialResult:
    """One module and seed. ``accuracy[network][difficulty]``: held-out exact match of the unmasked network
    (``none``) and under the ``iid`` and ``easy`` masks, per difficulty (``hard``: Fig. 3.6)."""

    accuracy: dict[str, dict[str, float]]
    kept_fraction: dict[str, float]  # per mask
    final_mask_loss: dict[str, float]  # per mask: the task loss of its last step
    masks: dict[str, MaskSet]
    model: nn.Module
    train_losses: list[float]

    def own_accuracy(self) -> dict[str, float]:
        """Each mask on held-out questions of the difficulties it trained on: the IID mask on all three
        (their mean: the sets are the same size), the easy mask on the easy ones."""
        iid = self.accuracy["iid"]
        return {"iid": float(np.mean([iid[d] for d in DIFFICULTIES])), "easy": self.accuracy["easy"]["easy"]}

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers (no masks, no model)."""
        hard = {network: self.accuracy[network]["hard"] for network in NETWORKS}
        return {
            "accuracy": self.accuracy,
            "hard": hard,
            "drop": hard["iid"] - hard["easy"],
            "own_accuracy": self.own_accuracy(),
            "kept_fraction": self.kept_fraction,
            "final_mask_loss": self.final_mask_loss,
            "final_train_loss": self.train_losses[-1] if self.train_losses else math.nan,
        }


def run_math_mask_trial(
    config: MasksMathConfig, module: str, seed: int, data: MathModuleData | None = None
) -> MathMaskTrialResult:
    """Train the network on every difficulty, an IID and an easy mask on it, and evaluate all three on
    the held-out questions of each difficulty. ``data``: :func:`load_module` (loaded here if not given)."""
    check_choice("Mathematics module for the mask analysis", module, MODULES)
    data = data if data is not None else load_module(config, module)
    n_classes = data.data.spec.n_classes
    model, losses = pretrain(config, data, seed)

    mask_config = config.mask_config(module)
    masks: dict[str, MaskSet] = {}
    final_mask_loss: dict[str, float] = {}
    for index, mask in enumerate(MASKS):
        trained = train_seq2seq_mask(
            model,
            data.mask_train_set(mask),
            n_classes,
            mask_config,
            config.batch_size,
            seed=1000 * seed + index,
            device=config.device,
            description=f"{module} seed {seed}: {mask} mask",
        )
        masks[mask] = trained.binary
        final_mask_loss[mask] = trained.task_losses[-1] if trained.task_losses else math.nan

    networks: dict[str, nn.Module] = {"none": model, **{m: MaskedSeq2Seq(model, masks[m]) for m in MASKS}}
    accuracy = {
        name: {
            difficulty: exact_match_accuracy(network, split, n_classes, config.eval_batch_size)
            for difficulty, split in data.evaluation.items()
        }
        for name, network in networks.items()
    }
    return MathMaskTrialResult(
        accuracy=accuracy,
        kept_fraction={name: mask.kept_fraction() for name, mask in masks.items()},
        final_mask_loss=final_mask_loss,
        masks=masks,
        model=model,
        train_losses=losses,
    )


# --- the claim ---


def drop_verdict(stats: Mapping[str, Any], per_seed_drops: list[float] | None = None) -> dict[str, Any]:
    """One module's verdict on thesis 3.3's claim (mean over seeds): the drop ``iid - easy`` on the hard
    set, whether the module can test the claim (the IID mask keeps at least :data:`MIN_HARD_ACCURACY` on
    it) and whether the claim holds (testable and a drop of at least :data:`DROP_THRESHOLD`).
    ``per_seed_drops`` adds how many seeds drop at all (the thesis: "a consistent performance drop")."""
    drop = stats["drop"]
    iid_hard = stats["hard"]["iid"]
    testable = iid_hard[0] >= MIN_HARD_ACCURACY
    verdict: dict[str, Any] = {
        "drop": drop,
        "testable": bool(testable),
        "holds": bool(testable and drop[0] >= DROP_THRESHOLD),
        "iid_mask_cost": stats["hard"]["none"][0] - iid_hard[0],
    }
    if per_seed_drops is not None:
        verdict["seeds_with_a_drop"] = sum(d > 0 for d in per_seed_drops)
        verdict["seeds"] = len(per_seed_drops)
    return verdict


def claim_status(verdicts: Mapping[str, Mapping[str, Any]]) -> str:
    """The run's verdict: ``holds`` (every module shows the drop), ``partly`` (some testable ones do),
    ``does not hold`` (no testable one does), ``not testable`` (no module is testable)."""
    testable = [v for v in verdicts.values() if v["testable"]]
    if not testable:
        return "not testable"
    held = sum(v["holds"] for v in testable)
    return "holds" if held == len(verdicts) else "partly" if held else "does not hold"


# --- report, figure ---


def _scale_table(config: MasksMathConfig) -> list[str]:
    tf = config.transformer
    thesis_batches = ", ".join(f"{m} {s.batch_size}" for m, s in THESIS_SETTINGS.items())
    thesis_steps = ", ".join(f"{m} {s.train_steps // 1000}k" for m, s in THESIS_SETTINGS.items())
    thesis_masks = ", ".join(
        f"{m} {s.mask_steps // 1000}k / {s.mask_learning_rate:g} / {s.beta:g}"
        for m, s in THESIS_SETTINGS.items()
    )
    ours_masks = ", ".join(
        f"{m} {config.mask_learning_rates[m]:g} / {config.betas[m]:g}" for m in config.modules
    )
    return [
        "| | thesis (B.3.7, Tab. B.3) | this run |",
        "|---|---|---|",
        "| modules | add_or_sub, linear_1d, differentiate, sort, collect | "
        + ", ".join(config.modules)
        + " |",
        "| Transformer | d_model 256, d_ff 512, 4 heads, 3 + 3 layers, output layer tied to the shared "
        f"embedding | `transformer_seq2seq`: d_model {tf.d_model}, d_ff {tf.d_ff}, {tf.n_heads} heads, "
        f"{tf.n_encoder_layers} + {tf.n_decoder_layers} layers, tied output layer: {tf.tied_embedding} |",
        f"| network training | Adam lr 1e-4, clip 1, batch {thesis_batches}; steps {thesis_steps}; 5k warmup "
        f"for linear_1d and collect | {config.train_steps} steps, batch {config.batch_size}, Adam lr "
        f"{config.learning_rate:g}, clip {config.grad_clip:g}, no warmup |",
        f"| each mask: steps / lr / beta | {thesis_masks}; 8 samples | {config.mask_steps} steps; "
        f"{ours_masks} (alpha = beta / {config.batch_size}); {config.mask_samples} samples |",
        f"| seeds | 5 per module | {len(config.seeds)}: {config.seeds} |",
        f"| data | the official train files, 10k validation questions per difficulty | {config.n_train} "
        f"generated train questions (a third per difficulty), {config.n_eval} held-out per difficulty |",
    ]


def render_report(
    config: MasksMathConfig,
    aggregated: Mapping[str, Mapping[str, Any]],
    verdicts: Mapping[str, Mapping[str, Any]],
    wall_seconds: float | None = None,
) -> str:
    """``aggregated[module]``: mean ± std over seeds of the trial summaries; ``verdicts[module]``:
    :func:`drop_verdict`."""
    lines = [
        "# Mathematics: masks trained on easy questions, tested on hard ones (thesis 3.3, Fig. 3.6, B.3.7)",
        "",
        "A Transformer is trained on one module's questions of all three train difficulties and frozen; the "
        "IID mask is trained on the same mixed train set, the easy mask on its easy questions only. Exact "
        "match (greedy decoding) on held-out questions, mean ± std over seeds.",
        "",
        wall_time_note(aggregated, wall_seconds),
        "",
        "## Fig. 3.6: accuracy on the hard held-out questions [%]",
        "",
        "| module | no mask | IID mask | easy mask | drop (IID − easy) | IID mask on all difficulties "
        "| easy mask on easy | kept weights, IID / easy mask |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for module, stats in aggregated.items():
        cells = [format_mean_std(stats["hard"][network]) for network in NETWORKS]
        cells.append(format_mean_std(stats["drop"]))
        cells += [format_mean_std(stats["own_accuracy"][mask]) for mask in MASKS]
        kept = stats["kept_fraction"]
        cells.append(f"{format_mean_std(kept['iid'])} / {format_mean_std(kept['easy'])}")
        lines.append(f"| {module} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "![Fig. 3.6](accuracy.png)",
        "",
        "Every network on every difficulty's held-out questions [%]:",
        "",
        "| module | network | " + " | ".join(DIFFICULTIES) + " |",
        "|---" * (len(DIFFICULTIES) + 2) + "|",
    ]
    for module, stats in aggregated.items():
        for network in NETWORKS:
            cells = " | ".join(format_mean_std(stats["accuracy"][network][d]) for d in DIFFICULTIES)
            lines.append(f"| {module} | {NETWORK_LABELS[network]} | {cells} |")
    lines += [
        "",
        "## The claim",
        "",
        'Thesis 3.3: "In Fig. 3.6 a consistent performance drop can be observed when applying the inferred '
        "subnetwork on the 'hard' split using a mask trained on the 'easy' split. This demonstrates that "
        "samples in the 'hard' split depend on exclusive weights, despite those being governed by the same "
        f"underlying rules.\" Here the claim holds for a module when the easy mask's mean hard-set accuracy "
        f"is at least {100 * DROP_THRESHOLD:.0f} points below the IID mask's; it can be tested when the IID "
        f"mask keeps at least {100 * MIN_HARD_ACCURACY:.0f} % on the hard set. B.3.7: a harder difficulty "
        "can contain questions as easy as the easier ones, so the hard set's accuracy is not zero even when "
        "no truly hard question is solved, and the size of the drop is hard to interpret.",
        "",
        f"**Overall: {claim_status(verdicts)}.**",
        "",
    ]
    for module, verdict in verdicts.items():
        if verdict["holds"]:
            status = "holds"
        elif verdict["testable"]:
            status = "does not hold"
        else:
            status = (
                f"not testable: the IID mask keeps less than {100 * MIN_HARD_ACCURACY:.0f} % on the hard set"
            )
        seeds = (
            f", a drop in {verdict['seeds_with_a_drop']} of {verdict['seeds']} seeds"
            if "seeds" in verdict
            else ""
        )
        cost = verdict["iid_mask_cost"]
        note = (
            f"; the IID mask itself costs {100 * cost:.0f} points against no mask (beta too strong or the "
            "masks too short?)"
            if cost >= DROP_THRESHOLD
            else ""
        )
        lines.append(
            f"* **{module}: {status}**. Drop {format_mean_std(verdict['drop'])} points{seeds}{note}."
        )
    lines += ["", "## Scale: thesis vs this run", "", *_scale_table(config), ""]
    return "\n".join(lines)


def plot_accuracy(aggregated: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path:
    """Thesis Fig. 3.6: per module, bars for the hard-set accuracy with no mask, the IID mask and the easy
    mask (mean ± std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modules = list(aggregated)
    width = 0.8 / len(NETWORKS)
    positions = np.arange(len(modules))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(modules) + 1.5), 3.0))
    for index, network in enumerate(NETWORKS):
        offset = (index - (len(NETWORKS) - 1) / 2) * width
        values = [aggregated[module]["hard"][network] for module in modules]
        ax.bar(
            positions + offset,
            [100 * v[0] for v in values],
            width=width,
            yerr=[100 * v[1] for v in values],
            capsize=2,
            label=NETWORK_LABELS[network],
            color=f"C{index}",
        )
    ax.set_xticks(list(positions), modules, fontsize=8)
    ax.set_ylabel("accuracy on hard [%]")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=len(NETWORKS), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def run_masks_math(out: str | Path, config: MasksMathConfig) -> dict[str, Any]:
    """Every module x seed of the Mathematics mask analysis; writes ``report.md``, ``results.json`` and
    ``accuracy.png`` (Fig. 3.6). The scripted-reproduction form ``run(out_dir, config)``; one progress
    line per trial."""
    if not config.seeds:
        raise UserError("give at least one seed")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    loaded: dict[str, MathModuleData] = {}

    def analyse(module: str, seed: int) -> dict[str, Any]:
        if module not in loaded:  # one dataset per module, shared by its seeds
            loaded[module] = load_module(config, module)
        return run_math_mask_trial(config, module, seed, loaded[module]).summary()

    def headline(summary: dict[str, Any]) -> str:
        hard = summary["hard"]
        return (
            f"hard: no mask {100 * hard['none']:.0f} %, IID mask {100 * hard['iid']:.0f} %, "
            f"easy mask {100 * hard['easy']:.0f} %"
        )

    trials = analyse_every_architecture_and_seed(
        config.modules, config.seeds, analyse, headline, out_dir=out, settings=trial_settings(config)
    )
    per_module = trials.pop("architectures")
    aggregated = {module: stats["mean_std"] for module, stats in per_module.items()}
    verdicts = {
        module: drop_verdict(
            aggregated[module], [seed["drop"] for seed in per_module[module]["per_seed"].values()]
        )
        for module in aggregated
    }
    results = {
        "config": asdict(config),
        "seeds": list(config.seeds),
        "modules": per_module,
        "trials": [
            {"module": t["architecture"], "seed": t["seed"], "seconds": t["seconds"]}
            for t in trials["trials"]
        ],
        "wall_seconds": trials["wall_seconds"],
        "claim": {"status": claim_status(verdicts), "modules": verdicts},
        "drop_threshold": DROP_THRESHOLD,
        "min_hard_accuracy": MIN_HARD_ACCURACY,
        "eval_sizes": {
            module: {name: len(split) for name, split in data.evaluation.items()}
            for module, data in loaded.items()
        },
        "train_sizes": {
            module: {"all": len(data.train), "easy": len(data.train_easy)} for module, data in loaded.items()
        },
        "torch": torch.__version__,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    plot_accuracy(aggregated, out / "accuracy.png")
    (out / "report.md").write_text(render_report(config, aggregated, verdicts, trials["wall_seconds"]))
    return results
