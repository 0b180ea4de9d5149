"""SCAN weight masks: does a mask trained on a split's train set solve its test set? (thesis 3.3).

Thesis 3.3 asks why seq2seq networks fail on SCAN's systematic splits (Lake & Baroni, 2018). Either (a)
the network learned the right algorithm but not the symmetry that would carry it over to the new
combinations, or (b) it learned patterns that need their own weights for every kind of case. The test:

1. pretrain the network on the IID data (the ``simple`` split's train set), so that its weights can
   solve the full problem: (a) alone can then no longer explain a failure;
2. freeze it; for each split (``simple``, the IID control, ``length``, ``addprim_jump``,
   ``addprim_turn_left``) train a weight mask (:mod:`recombine.probes.weight_masks`, thesis 3.1) on the
   split's train set: the mask removes the weights that set does not need;
3. evaluate the masked network on the split's test set with greedy decoding and sequence exact match.

Every split's train set holds all the rules, so a mask that hurts the test set removed weights that
only the test set's cases use: the solution is pattern-like rather than made of reusable rules
(explanation (b)). The thesis finds "a large generalization gap" (Fig. 3.5a): the IID mask (trained on
the ``simple`` train set, "the full problem") keeps every test set accurate, each split's own mask does
not. Fig. 3.5b: with the ``addprim_jump`` mask, "almost half of the weights corresponding to I_JUMP are
removed" from the LSTM decoder's output layer.

Networks (thesis 3.3, B.3.7): the ``lstm_seq2seq`` model (the thesis uses the 2-layer Lake & Baroni
LSTM encoder-decoder; ours has a bidirectional encoder and an attention decoder, GDRC App. B) with word
embeddings of 16 (B.3.7), and the ``transformer_seq2seq`` model with an untied output layer so that the
output layer is masked (B.3.7: PyTorch's Transformer; ``d_model = 100``, ``d_ff = 200``, 4 heads, 3 + 3
layers). Word embeddings are not masked (B.3.7). Training (B.3.7): Adam, batch 256, gradient clipping
5, 25k steps, always teacher-forced here (B.3.7 uses teacher forcing on half of the LSTM's batches);
masks: lr 1e-2, ``beta = 3e-5`` for the LSTM and ``1e-3`` for the Transformer, 25k steps each.

:func:`run_masks_scan` runs every architecture x seed and writes ``report.md`` (accuracy without a
mask, with the IID mask and with the split's own mask, mean +- std over seeds; the claim and whether it
holds; per-token removed output-layer weights), ``results.json``, ``accuracy.png`` (Fig. 3.5a) and
``output_layer.png`` (Fig. 3.5b). :class:`MasksScanConfig` holds the CPU scale (documented in
``docs/probes/masks-scan.md``).
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
from recombine.models.lstm_seq2seq import LSTMSeq2SeqConfig
from recombine.models.transformer_seq2seq import TransformerSeq2SeqConfig
from recombine.probes.mask_analysis_common import (
    MeanStd,
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
    output_token_labels,
    pretrain_teacher_forced,
    removed_per_output_token,
    subset,
    train_seq2seq_mask,
)
from recombine.probes.weight_masks import MaskTrainingConfig, alpha_from_beta
from recombine.tasks.base import TaskData
from recombine.tasks.scan import SCANConfig, build_scan
from recombine.train.batching import PaddedSeq2SeqSplit

#: the splits of thesis Fig. 3.5a, in its order; ``simple`` is the IID control
SPLITS = ("simple", "length", "addprim_jump", "addprim_turn_left")
IID_SPLIT = "simple"
ARCHITECTURES = ("lstm", "transformer")
#: architecture -> registered model (``recombine.models``)
MODEL_NAMES = {"lstm": "lstm_seq2seq", "transformer": "transformer_seq2seq"}
#: the decoder's output layer in both models (thesis Fig. 3.5b)
OUTPUT_LAYER = "output.weight"
#: the claim holds for a split when the own mask's test accuracy is this far below the IID mask's
GAP_THRESHOLD = 0.10
#: the claim is testable when the IID mask keeps at least this accuracy on the IID test set (thesis 3.3:
#: the pretrained weights "are capable of solving the full problem")
IID_PRECONDITION = 0.90
#: the token and split of thesis Fig. 3.5b
FIG_3_5B_SPLIT, FIG_3_5B_TOKEN = "addprim_jump", "I_JUMP"
SPLIT_LABELS = {
    "simple": "simple (IID)",
    "length": "length",
    "addprim_jump": "add jump",
    "addprim_turn_left": "add turn left",
}


def default_lstm() -> LSTMSeq2SeqConfig:
    """Word embeddings of 16 (B.3.7); a bidirectional encoder of 2 x 32 units and a 128-unit decoder
    started from the first and last encoder outputs (GDRC App. B's form). The Lake & Baroni baseline the
    thesis uses has two 200-unit layers and no attention."""
    return LSTMSeq2SeqConfig(embedding_size=16, encoder_size=32, decoder_size=128)


def default_transformer() -> TransformerSeq2SeqConfig:
    """4 heads and an untied output layer (masked, unlike the embeddings; B.3.7); 2 + 2 layers of
    ``d_model = 64``, ``d_ff = 128`` (thesis B.3.7: 3 + 3 layers, 100, 200)."""
    return TransformerSeq2SeqConfig(
        d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2, n_decoder_layers=2, tied_embedding=False
    )


@dataclass
class MasksScanConfig:
    """``recombine reproduce masks-scan``: the SCAN mask analysis of thesis 3.3 at CPU scale.

    Thesis scale (B.3.7) in the comments; ``docs/probes/masks-scan.md`` gives the cost."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # thesis Fig. 3.5: 10 seeds (3.1)
    architectures: list[str] = field(default_factory=lambda: list(ARCHITECTURES))
    splits: list[str] = field(default_factory=lambda: list(SPLITS))
    lstm: LSTMSeq2SeqConfig = field(default_factory=default_lstm)
    transformer: TransformerSeq2SeqConfig = field(default_factory=default_transformer)
    train_steps: int = 5_000  # B.3.7: 25k
    batch_size: int = 128  # B.3.7: 256; also the mask-training batch, split between the mask samples
    learning_rate: float = 1e-3
    grad_clip: float = 5.0  # B.3.7
    mask_steps: int = 3_000  # B.3.7: 25k per mask; 1,500 left the Transformer's IID mask below 90 %
    mask_learning_rate: float = 2e-2  # B.3.7: 1e-2 (for 25k steps)
    lstm_beta: float = 3e-5  # B.3.7; alpha = beta / batch_size (B.3.2)
    transformer_beta: float = 5e-5  # B.3.7: 1e-3, too strong here (B.3.3; docs/probes/masks-scan.md)
    mask_samples: int = 4  # B.3.2
    n_test: int = 0  # test examples per split (a seeded subset); 0: the whole test set
    n_train_eval: int = 1_000  # train examples per split to check each mask on its own train set; 0: all
    eval_batch_size: int = 512
    data_seed: int = 0  # the random 80/20 of the simple split (the official split is one fixed split)
    official_dir: str = ""  # "": SCAN generated from its grammar; else the official files (tasks/scan.py)
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not self.architectures:
            raise UserError("give at least one architecture")
        for architecture in self.architectures:
            check_choice("architecture", architecture, ARCHITECTURES)
        if not self.splits:
            raise UserError("give at least one split")
        for split in self.splits:
            check_choice("SCAN split", split, SPLITS)
        if len(set(self.splits)) != len(self.splits) or len(set(self.architectures)) != len(
            self.architectures
        ):
            raise UserError("splits and architectures must not repeat")
        if self.train_steps < 0 or self.mask_steps < 0:
            raise UserError("train_steps and mask_steps must be >= 0")
        if self.n_test < 0 or self.n_train_eval < 0:
            raise UserError("n_test and n_train_eval must be >= 0 (0: every example)")
        if self.mask_samples < 1 or self.batch_size < self.mask_samples:
            raise UserError(
                f"batch_size ({self.batch_size}) must be >= mask_samples ({self.mask_samples}) >= 1"
            )
        if self.eval_batch_size < 1:
            raise UserError("eval_batch_size must be >= 1")
        for name in ("learning_rate", "mask_learning_rate"):
            if getattr(self, name) <= 0:
                raise UserError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.lstm_beta < 0 or self.transformer_beta < 0 or self.grad_clip < 0:
            raise UserError("lstm_beta, transformer_beta and grad_clip must be >= 0")

    def mask_config(self, architecture: str) -> MaskTrainingConfig:
        """Mask training for ``architecture``: B.3.7's lr and beta, ``alpha = beta / batch_size``
        (applied by the per-sample loop, which :func:`train_seq2seq_mask` picks for every seq2seq model)."""
        beta = self.lstm_beta if architecture == "lstm" else self.transformer_beta
        return MaskTrainingConfig(
            steps=self.mask_steps,
            learning_rate=self.mask_learning_rate,
            alpha=alpha_from_beta(beta, self.batch_size),
            n_samples=self.mask_samples,
        )

    def mask_splits(self) -> list[str]:
        """The splits that get a mask: the IID one first (always), then the others."""
        return [IID_SPLIT, *(s for s in self.splits if s != IID_SPLIT)]


# --- data and model ---


@dataclass
class ScanSplitData:
    """One SCAN split: its train set (mask training), its test set and the labels of its tokens."""

    name: str
    train: PaddedSeq2SeqSplit
    test: PaddedSeq2SeqSplit
    data: TaskData


def load_scan_splits(config: MasksScanConfig) -> dict[str, ScanSplitData]:
    """Every split of :meth:`MasksScanConfig.mask_splits`: the official train and test sets (no
    validation carved out), the test set capped at ``n_test`` examples."""
    loaded = {}
    for name in config.mask_splits():
        task = SCANConfig(
            split=name, valid_iid_fraction=0.0, valid_ood_fraction=0.0, official_dir=config.official_dir
        )
        data = build_scan(task, config.data_seed)
        test_role = "test_iid" if name == IID_SPLIT else "test_ood"
        test = PaddedSeq2SeqSplit.from_split(data.splits[test_role])  # type: ignore[arg-type]
        loaded[name] = ScanSplitData(
            name=name,
            train=PaddedSeq2SeqSplit.from_split(data.splits["train"]),  # type: ignore[arg-type]
            test=subset(test, config.n_test, config.data_seed),
            data=data,
        )
    return loaded


def build_network(config: MasksScanConfig, architecture: str, data: TaskData) -> nn.Module:
    """The registered model of ``architecture`` (``lstm_seq2seq`` / ``transformer_seq2seq``) for SCAN."""
    model_config = config.lstm if architecture == "lstm" else config.transformer
    return models.build(MODEL_NAMES[architecture], data.spec, **asdict(model_config))


def pretrain(
    config: MasksScanConfig, architecture: str, iid: ScanSplitData, seed: int
) -> tuple[nn.Module, list[float]]:
    """The network trained on the IID train set (thesis 3.3: "we pretrain the model on the IID data"):
    teacher-forced token cross-entropy, Adam, gradient clipping (B.3.7). Left in eval mode."""
    torch.manual_seed(seed)
    model = build_network(config, architecture, iid.data).to(config.device)
    losses = pretrain_teacher_forced(
        model,
        iid.train,
        iid.data.spec.n_classes,
        batch_size=config.batch_size,
        steps=config.train_steps,
        learning_rate=config.learning_rate,
        grad_clip=config.grad_clip,
        seed=seed,
        description=f"{architecture} seed {seed}",
        device=config.device,
    )
    return model, losses


# --- one trial ---


@dataclass
class ScanMaskTrialResult:
    """One architecture and seed. ``accuracy[split]``: test exact match ``none`` (no mask), ``iid``
    (the IID mask) and ``own`` (the split's own mask; the IID mask for ``simple``)."""

    accuracy: dict[str, dict[str, float]]
    own_train_accuracy: dict[str, float]  # each mask on (a sample of) its own train set
    kept_fraction: dict[str, float]  # per mask
    removed_per_token: dict[str, dict[str, float]]  # per mask: output token -> removed fraction
    final_mask_loss: dict[str, float]  # per mask: the task loss of its last step
    masks: dict[str, MaskSet]
    model: nn.Module
    train_losses: list[float]

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers (no masks, no model)."""
        return {
            "accuracy": self.accuracy,
            "gap": {s: a["iid"] - a["own"] for s, a in self.accuracy.items()},
            "own_train_accuracy": self.own_train_accuracy,
            "kept_fraction": self.kept_fraction,
            "removed_per_token": self.removed_per_token,
            "final_mask_loss": self.final_mask_loss,
            "final_train_loss": self.train_losses[-1] if self.train_losses else math.nan,
        }


def run_scan_mask_trial(
    config: MasksScanConfig,
    architecture: str,
    seed: int,
    splits: Mapping[str, ScanSplitData] | None = None,
) -> ScanMaskTrialResult:
    """Pretrain on the IID split, train one mask per split on its train set, evaluate on the test sets.

    ``splits``: :func:`load_scan_splits` of ``config`` (loaded here when not given)."""
    check_choice("architecture", architecture, ARCHITECTURES)
    splits = splits if splits is not None else load_scan_splits(config)
    iid = splits[IID_SPLIT]
    n_classes = iid.data.spec.n_classes
    labels = output_token_labels(iid.data.output_vocab.tokens)
    model, losses = pretrain(config, architecture, iid, seed)

    mask_config = config.mask_config(architecture)
    masks: dict[str, MaskSet] = {}
    final_mask_loss: dict[str, float] = {}
    own_train: dict[str, float] = {}
    for index, name in enumerate(config.mask_splits()):
        trained = train_seq2seq_mask(
            model,
            splits[name].train,
            n_classes,
            mask_config,
            config.batch_size,
            seed=1000 * seed + index,
            device=config.device,
            description=f"{architecture} seed {seed}: {name} mask",
        )
        masks[name] = trained.binary
        final_mask_loss[name] = trained.task_losses[-1] if trained.task_losses else math.nan
        train_sample = subset(splits[name].train, config.n_train_eval, config.data_seed + 1)
        own_train[name] = exact_match_accuracy(
            MaskedSeq2Seq(model, masks[name]), train_sample, n_classes, config.eval_batch_size
        )

    accuracy: dict[str, dict[str, float]] = {}
    for name in config.splits:
        test = splits[name].test
        row = {
            "none": exact_match_accuracy(model, test, n_classes, config.eval_batch_size),
            "iid": exact_match_accuracy(
                MaskedSeq2Seq(model, masks[IID_SPLIT]), test, n_classes, config.eval_batch_size
            ),
        }
        row["own"] = (
            row["iid"]
            if name == IID_SPLIT
            else exact_match_accuracy(
                MaskedSeq2Seq(model, masks[name]), test, n_classes, config.eval_batch_size
            )
        )
        accuracy[name] = row
    return ScanMaskTrialResult(
        accuracy=accuracy,
        own_train_accuracy=own_train,
        kept_fraction={name: mask.kept_fraction() for name, mask in masks.items()},
        removed_per_token={
            name: removed_per_output_token(mask, labels, OUTPUT_LAYER) for name, mask in masks.items()
        },
        final_mask_loss=final_mask_loss,
        masks=masks,
        model=model,
        train_losses=losses,
    )


# --- the claims ---


def generalization_gap_verdicts(stats: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per non-IID split of one architecture (mean over seeds): the gap ``iid - own``, whether the split
    can test the claim (the IID mask solves *its* test set, at least :data:`IID_PRECONDITION`: otherwise
    a gap says nothing about the split's own mask, Fig. 3.5a's blue/orange bars) and whether the thesis's
    claim holds for it (testable, and the own mask at least :data:`GAP_THRESHOLD` below the IID mask)."""
    verdicts = {}
    for split, row in stats["accuracy"].items():
        if split == IID_SPLIT:
            continue
        gap = stats["gap"][split]
        iid_on_split = row.get("iid")
        testable = iid_on_split is None or iid_on_split[0] >= IID_PRECONDITION
        verdicts[split] = {
            "gap": gap,
            "testable": testable,
            "holds": bool(testable and gap[0] >= GAP_THRESHOLD),
        }
    return verdicts


def claim_status(stats: Mapping[str, Any]) -> str:
    """One architecture's verdict on thesis 3.3's claim: ``holds`` (every systematic split shows the
    gap), ``partly`` (some do), ``does not hold``, ``not testable`` (the IID mask does not solve the IID
    test set, :data:`IID_PRECONDITION`), or ``no systematic split`` in the run."""
    verdicts = generalization_gap_verdicts(stats)
    if not verdicts:
        return "no systematic split"
    iid = stats["accuracy"].get(IID_SPLIT, {}).get("iid")
    if iid is not None and iid[0] < IID_PRECONDITION:
        return "not testable"
    testable = [v for v in verdicts.values() if v["testable"]]
    if not testable:
        return "not testable"
    held = sum(v["holds"] for v in testable)
    return "holds" if held == len(verdicts) else "partly" if held else "does not hold"


def jump_verdict(stats: Mapping[str, Any]) -> dict[str, Any] | None:
    """Fig. 3.5b for one architecture: the share of I_JUMP's output weights the ``addprim_jump`` mask
    removes, whether it is the largest among the action tokens, and the IID mask's share for contrast.
    None when the run has no ``addprim_jump`` mask or no masked output layer."""
    removed = stats.get("removed_per_token", {})
    jump = removed.get(FIG_3_5B_SPLIT, {})
    if FIG_3_5B_TOKEN not in jump:
        return None
    actions = {token: value[0] for token, value in jump.items() if token.startswith("I_")}
    return {
        "removed": jump[FIG_3_5B_TOKEN],
        "removed_by_iid_mask": removed.get(IID_SPLIT, {}).get(FIG_3_5B_TOKEN),
        "largest_of_actions": max(actions, key=actions.__getitem__) == FIG_3_5B_TOKEN,
    }


# --- report, figures ---


def has_fig_3_5b(aggregated: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the run has Fig. 3.5b: the LSTM with an ``addprim_jump`` mask and a masked output layer."""
    return "lstm" in aggregated and jump_verdict(aggregated["lstm"]) is not None


def _scale_table(config: MasksScanConfig) -> list[str]:
    lstm, tf = config.lstm, config.transformer
    return [
        "| | thesis (B.3.7) | this run |",
        "|---|---|---|",
        "| LSTM | Lake & Baroni 2-layer encoder-decoder, 200 units, no attention, embeddings 16 "
        f"| `lstm_seq2seq`: embeddings {lstm.embedding_size}, bidirectional {lstm.encoder_size}-unit "
        f"encoder, {lstm.decoder_size}-unit decoder with {lstm.attention} attention |",
        "| Transformer | d_model 100, d_ff 200, 4 heads, 3 + 3 layers "
        f"| `transformer_seq2seq`: d_model {tf.d_model}, d_ff {tf.d_ff}, {tf.n_heads} heads, "
        f"{tf.n_encoder_layers} + {tf.n_decoder_layers} layers, tied output layer: {tf.tied_embedding} |",
        f"| pretraining | 25k steps, batch 256, clip 5; LSTM teacher-forced on half the batches "
        f"| {config.train_steps} steps, batch {config.batch_size}, lr {config.learning_rate}, clip "
        f"{config.grad_clip}, always teacher-forced |",
        f"| each mask | 25k steps, lr 1e-2, beta 3e-5 (LSTM) / 1e-3 (Transformer) "
        f"| {config.mask_steps} steps, lr {config.mask_learning_rate}, beta {config.lstm_beta:g} / "
        f"{config.transformer_beta:g} (alpha = beta / {config.batch_size}), {config.mask_samples} samples |",
        f"| seeds | 10 (thesis 3.1) | {len(config.seeds)}: {config.seeds} |",
        "| test sets | the official ones | "
        + ("all of each split's test set" if config.n_test == 0 else f"{config.n_test} per split")
        + " |",
    ]


def render_report(
    config: MasksScanConfig, aggregated: Mapping[str, Mapping[str, Any]], wall_seconds: float | None = None
) -> str:
    """``aggregated[architecture]``: mean ± std over seeds of the trial summaries."""
    lines = [
        "# SCAN: weight masks trained on each split (thesis 3.3, Fig. 3.5, B.3.7)",
        "",
        "The network is pretrained on the IID (`simple`) train set and frozen; a mask is trained on each "
        "split's train set; exact match (greedy decoding) on the split's test set. `IID mask`: the mask "
        'trained on the `simple` train set (the thesis\'s "mask trained on the full problem"). '
        "Mean ± std over seeds.",
        "",
        wall_time_note(aggregated, wall_seconds),
        "",
        "## Fig. 3.5a: test accuracy [%]",
        "",
        "| architecture | split | no mask | IID mask | own mask | gap (IID − own) "
        "| own mask on its train set | kept weights, IID / own mask |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for architecture, stats in aggregated.items():
        for split, row in stats["accuracy"].items():
            own_train = stats["own_train_accuracy"][split]
            kept = f"{format_mean_std(stats['kept_fraction'][IID_SPLIT])} / "
            kept += format_mean_std(stats["kept_fraction"][split])
            cells = [format_mean_std(row[mask]) for mask in ("none", "iid", "own")]
            cells += [format_mean_std(stats["gap"][split]), format_mean_std(own_train), kept]
            lines.append(f"| {architecture} | {split} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "![Fig. 3.5a](accuracy.png)",
        "",
        "## The claim",
        "",
        "Thesis 3.3: masks trained on a split's train set lose accuracy on its test set, \"a large "
        'generalization gap" (Fig. 3.5a), while the IID mask keeps the network able to solve every test set. '
        f"Here the claim holds for a split when the own mask's mean test accuracy is at least "
        f"{100 * GAP_THRESHOLD:.0f} points below the IID mask's; it can be tested when the pretrained "
        f"network under the IID mask solves the IID test set and the split's test set (at least "
        f"{100 * IID_PRECONDITION:.0f} % each).",
        "",
    ]
    for architecture, stats in aggregated.items():
        status = claim_status(stats)
        verdicts = generalization_gap_verdicts(stats)
        parts = [
            f"{split}: gap {format_mean_std(v['gap'])} points "
            f"({'yes' if v['holds'] else 'no' if v['testable'] else 'not testable: IID mask below the bar'})"
            for split, v in verdicts.items()
        ]
        iid = stats["accuracy"].get(IID_SPLIT, {}).get("iid")
        precondition = (
            f"the IID mask on the IID test set: {format_mean_std(iid)} % (needed: "
            f"{100 * IID_PRECONDITION:.0f} %)"
            if iid is not None
            else "the IID test set was not evaluated (add `simple` to `splits`)"
        )
        lines.append(f"* **{architecture}: {status}**. " + "; ".join([*parts, precondition]) + ".")
    lines += [
        "",
        "## Fig. 3.5b: output-layer weights removed per output token [%]",
        "",
        "Share of the decoder output layer's weights into each output token that the mask removes (the "
        "pad row is left out). Thesis: for the LSTM's `addprim_jump` mask, \"almost half of the weights "
        'corresponding to I_JUMP are removed".',
        "",
    ]
    table_rows = [
        (architecture, split, removed)
        for architecture, stats in aggregated.items()
        for split, removed in stats.get("removed_per_token", {}).items()
        if removed
    ]
    if table_rows:
        tokens = list(table_rows[0][2])
        lines += [
            "| architecture | mask | " + " | ".join(tokens) + " |",
            "|---" * (len(tokens) + 2) + "|",
        ]
        for architecture, split, removed in table_rows:
            cells = " | ".join(format_mean_std(removed[token]) for token in tokens)
            lines.append(f"| {architecture} | {split} | {cells} |")
        lines.append("")
    for architecture, stats in aggregated.items():
        verdict = jump_verdict(stats)
        if verdict is None:
            continue
        iid = verdict["removed_by_iid_mask"]
        contrast = f" (IID mask: {format_mean_std(iid)} %)" if iid is not None else ""
        largest = "the largest" if verdict["largest_of_actions"] else "not the largest"
        lines.append(
            f"* **{architecture}**: the `addprim_jump` mask removes {format_mean_std(verdict['removed'])} % "
            f"of I_JUMP's output weights{contrast}, {largest} share among the six actions."
        )
    if has_fig_3_5b(aggregated):
        lines += ["", "![Fig. 3.5b](output_layer.png)"]
    lines += ["", "## Scale: thesis vs this run", "", *_scale_table(config), ""]
    return "\n".join(lines)


def plot_accuracy(aggregated: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path:
    """Thesis Fig. 3.5a: grouped bars per split, the IID mask then the split's own mask per architecture
    (colours in the thesis's order: LSTM IID blue, Transformer IID orange, LSTM own green, Transformer
    own red), mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    architectures = list(aggregated)
    splits = list(next(iter(aggregated.values()))["accuracy"])
    series = [(a, "iid") for a in architectures] + [(a, "own") for a in architectures]
    width = 0.8 / len(series)
    positions = np.arange(len(splits))
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(splits) + 1.5), 3.0))
    for index, (architecture, mask) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * width
        values = [aggregated[architecture]["accuracy"][split][mask] for split in splits]
        label = f"{architecture}, {'IID mask' if mask == 'iid' else 'own mask'}"
        ax.bar(
            positions + offset,
            [100 * v[0] for v in values],
            width=width,
            yerr=[100 * v[1] for v in values],
            capsize=2,
            label=label,
            color=f"C{index}",
        )
    ax.set_xticks(list(positions), [SPLIT_LABELS.get(s, s) for s in splits], fontsize=8)
    ax.set_ylabel("test accuracy [%]")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=len(series), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_removed_per_token(
    removed: Mapping[str, MeanStd], path: str | Path, reference: Mapping[str, MeanStd] | None = None
) -> Path:
    """Thesis Fig. 3.5b: % of output-layer weights removed per output token (mean ± std), the
    ``addprim_jump`` mask; ``reference`` (the IID mask) as a second bar for contrast."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = list(removed)
    positions = np.arange(len(tokens))
    bars = [("add jump mask", removed)] + ([("IID mask", reference)] if reference else [])
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(tokens) + 1.5), 2.8))
    for index, (label, values) in enumerate(bars):
        offset = (index - (len(bars) - 1) / 2) * width
        ax.bar(
            positions + offset,
            [100 * values[t][0] for t in tokens],
            width=width,
            yerr=[100 * values[t][1] for t in tokens],
            capsize=2,
            label=label,
        )
    ax.set_xticks(list(positions), tokens, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("weights removed [%]")
    ax.set_ylim(0, 100)
    ax.set_title("LSTM decoder output layer, per output token", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_masks_scan(out: str | Path, config: MasksScanConfig) -> dict[str, Any]:
    """Every architecture x seed of the SCAN mask analysis; writes ``report.md``, ``results.json``,
    ``accuracy.png`` (Fig. 3.5a) and, with the LSTM and ``addprim_jump``, ``output_layer.png`` (Fig. 3.5b).

    The scripted-reproduction form ``run(out_dir, config)``; one progress line per trial."""
    if not config.seeds:
        raise UserError("give at least one seed")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    splits = load_scan_splits(config)

    def headline(summary: dict[str, Any]) -> str:
        gaps = ", ".join(f"{s} {100 * g:.0f}" for s, g in summary["gap"].items() if s != IID_SPLIT)
        iid = summary["accuracy"].get(IID_SPLIT, {}).get("iid")
        parts = ([f"IID mask on IID test {100 * iid:.0f} %"] if iid is not None else []) + (
            [f"gaps [points] {gaps}"] if gaps else []
        )
        return "; ".join(parts)

    trials = analyse_every_architecture_and_seed(
        config.architectures,
        config.seeds,
        lambda architecture, seed: run_scan_mask_trial(config, architecture, seed, splits).summary(),
        headline,
        out_dir=out,
        settings=trial_settings(config),
    )
    aggregated = {name: stats["mean_std"] for name, stats in trials["architectures"].items()}
    claims = {
        name: {
            "status": claim_status(stats),
            "generalization_gap": generalization_gap_verdicts(stats),
            "fig_3_5b": jump_verdict(stats),
        }
        for name, stats in aggregated.items()
    }
    results = {
        "config": asdict(config),
        "seeds": list(config.seeds),
        **trials,
        "claims": claims,
        "gap_threshold": GAP_THRESHOLD,
        "iid_precondition": IID_PRECONDITION,
        "test_sizes": {name: len(s.test) for name, s in splits.items()},
        "torch": torch.__version__,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True))
    plot_accuracy(aggregated, out / "accuracy.png")
    if has_fig_3_5b(aggregated):
        removed = aggregated["lstm"]["removed_per_token"]
        plot_removed_per_token(removed[FIG_3_5B_SPLIT], out / "output_layer.png", removed.get(IID_SPLIT))
    (out / "report.md").write_text(render_report(config, aggregated, trials["wall_seconds"]))
    return results
