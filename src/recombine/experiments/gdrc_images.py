"""GDRC image pairs, settings A and B over seeds: training speed against compositional test accuracy.

GDRC §5.1 and Fig. 3a, App. A; CATALOG §1.12, §4 R-GDRC ("redundant second input speeds training and
widens the generalization gap"). Data: :mod:`recombine.tasks.digit_pairs`; model:
:mod:`recombine.models.pair_image_cnn`.

Training (App. A): mini-batches of 64, 200 steps (our default: 800, see below), Adam with learning rate
0.001, hinge loss. The loss is Keras' ``hinge`` on one-hot targets (TensorFlow, App. A): one-vs-all,

    L = (1/n) sum_i (1/C) sum_c max(0, 1 - t_ic s_ic),    t_ic = +1 if c = y_i else -1,

(``s`` the class scores); ``loss="cross_entropy"`` is offered as an alternative. The training pairs are
a fixed sample (``n_train``) visited in a fresh random order every epoch. With the embedded 8x8 digits
the App. A network is tiny (its last feature map is ``1 x 5``) and with the hinge loss reaches 90% training
accuracy only after about 500 steps, so the default runs 800 steps (4 epochs of 12800 pairs); with MNIST
set ``steps=200`` for the paper's schedule.

Measured every ``eval_every`` steps, per seed: accuracy on a fixed subset of the training pairs
(``n_eval_train``), on ``test_iid`` and on ``test_ood`` (the paper's test distribution,
``Y2 = Y + 2..Y + 9``).
*Steps to fit* is the first evaluated step at which the training accuracy reaches ``fit_threshold`` (the
paper shows curves; a threshold turns "trains faster" into a number). The generalization gap is final
training accuracy minus final ``test_ood`` accuracy. The paper ran 5 seeds and plots mean and variance.

:func:`run_gdrc_images` writes ``report.md``, ``results.json`` and ``gdrc_images.png`` (mean ± std over
seeds, the layout of Fig. 3a).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.experiments.progress import training_bar, trial_done
from recombine.models.pair_image_cnn import PairImageCNN
from recombine.tasks.digit_pairs import N_CLASSES, PAIR_SETTINGS, DigitPairsConfig, build_digit_pairs

LOSSES = ("hinge", "cross_entropy")
EVALUATED_SPLITS = ("train", "test_iid", "test_ood")


@dataclass
class GDRCImagesConfig:
    source: str = "digits"  # "digits" (embedded 8x8) or "mnist" (IDX files at mnist_dir)
    mnist_dir: str = ""
    n_train: int = 12800
    n_test: int = 1000
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])  # the paper ran 5
    settings: list[str] = field(default_factory=lambda: list(PAIR_SETTINGS))
    steps: int = 800  # App. A: 200 on MNIST; on the 8x8 digits the hinge loss needs ~4x more to fit
    batch_size: int = 64
    lr: float = 1e-3
    loss: str = "hinge"
    eval_every: int = 25
    n_eval_train: int = 1000
    fit_threshold: float = 0.9
    threads: int = 1

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise UserError(f"unknown train.loss {self.loss!r}; {choices_hint(self.loss, LOSSES)}")
        for setting in self.settings:
            if setting not in PAIR_SETTINGS:
                raise UserError(f"unknown GDRC setting {setting!r}; {choices_hint(setting, PAIR_SETTINGS)}")
        if not self.seeds or not self.settings:
            raise UserError("need at least one seed and one setting")
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1 or self.n_eval_train < 1:
            raise UserError("steps, batch_size, eval_every and n_eval_train must be >= 1")
        if not 0.0 < self.fit_threshold <= 1.0:
            raise UserError(f"fit_threshold must be in (0, 1], got {self.fit_threshold}")

    def task(self, setting: str) -> DigitPairsConfig:
        return DigitPairsConfig(
            setting=setting,
            source=self.source,
            mnist_dir=self.mnist_dir,
            n_train=self.n_train,
            n_test=self.n_test,
        )


@dataclass
class PairRun:
    """One seed of one setting: accuracy curves and the numbers derived from them."""

    setting: str
    seed: int
    steps: list[int]
    accuracy: dict[str, list[float]]  # split -> accuracy at each evaluated step
    steps_to_fit: int | None  # first evaluated step with training accuracy >= fit_threshold
    final_accuracy_by_offset: list[float]  # k = (Y2 - Y1) mod 10 -> accuracy on the test images
    seconds: float

    @property
    def final(self) -> dict[str, float]:
        return {split: values[-1] for split, values in self.accuracy.items()}

    @property
    def generalization_gap(self) -> float:
        return self.final["train"] - self.final["test_ood"]


def one_vs_all_hinge(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Keras ``hinge`` on one-hot targets: ``mean_{i,c} max(0, 1 - t_ic s_ic)``, ``t = 2 onehot - 1``."""
    signs = 2.0 * nn.functional.one_hot(labels, scores.shape[-1]).to(scores.dtype) - 1.0
    return torch.clamp(1.0 - signs * scores, min=0.0).mean()


def classification_loss(name: str, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if name == "hinge":
        return one_vs_all_hinge(scores, labels)
    return nn.functional.cross_entropy(scores, labels)


@torch.no_grad()
def predict(model: nn.Module, images: np.ndarray, batch_size: int = 1000) -> np.ndarray:
    model.eval()
    out = [
        model(torch.as_tensor(images[i : i + batch_size])).argmax(-1).numpy()
        for i in range(0, len(images), batch_size)
    ]
    model.train()
    return np.concatenate(out)


def first_step_reaching(steps: Sequence[int], values: Sequence[float], threshold: float) -> int | None:
    """The first of ``steps`` whose value reaches ``threshold``; None if none does."""
    for step, value in zip(steps, values, strict=True):
        if value >= threshold:
            return step
    return None


def train_pair_classifier(config: GDRCImagesConfig, setting: str, seed: int) -> PairRun:
    """Build the data of ``setting``, train the App. A CNN with ``seed`` and record the curves."""
    start = time.perf_counter()
    torch.set_num_threads(config.threads)
    data = build_digit_pairs(config.task(setting), seed)
    train = data.splits["train"]
    order_rng = np.random.default_rng([seed, 2])
    eval_rows = order_rng.choice(len(train), min(config.n_eval_train, len(train)), replace=False)
    eval_sets = {
        "train": (train.images[eval_rows], train.labels[eval_rows]),
        "test_iid": (data.splits["test_iid"].images, data.splits["test_iid"].labels),
        "test_ood": (data.splits["test_ood"].images, data.splits["test_ood"].labels),
    }
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = PairImageCNN(data.image_shape)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    images, labels = torch.as_tensor(train.images), torch.as_tensor(train.labels)
    accuracy: dict[str, list[float]] = {split: [] for split in EVALUATED_SPLITS}
    steps: list[int] = []

    def evaluate(step: int) -> None:
        steps.append(step)
        for split, (x, y) in eval_sets.items():
            accuracy[split].append(float((predict(model, x) == y).mean()))

    order = np.empty(0, dtype=np.int64)
    with training_bar(config.steps, f"setting {setting} seed {seed}") as bar:
        for step in range(config.steps):
            if step % config.eval_every == 0:
                evaluate(step)
            if len(order) < config.batch_size:
                order = np.concatenate([order, order_rng.permutation(len(train))])
            batch, order = torch.as_tensor(order[: config.batch_size]), order[config.batch_size :]
            loss = classification_loss(config.loss, model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bar.update()
    evaluate(config.steps)

    test_images = np.concatenate([data.splits["test_iid"].images, data.splits["test_ood"].images])
    test_labels = np.concatenate([data.splits["test_iid"].labels, data.splits["test_ood"].labels])
    test_offsets = np.concatenate([data.splits["test_iid"].offsets, data.splits["test_ood"].offsets])
    correct = predict(model, test_images) == test_labels
    by_offset = [float(correct[test_offsets == k].mean()) for k in range(N_CLASSES)]
    return PairRun(
        setting=setting,
        seed=seed,
        steps=steps,
        accuracy=accuracy,
        steps_to_fit=first_step_reaching(steps, accuracy["train"], config.fit_threshold),
        final_accuracy_by_offset=by_offset,
        seconds=time.perf_counter() - start,
    )


@dataclass
class GDRCImagesResult:
    config: GDRCImagesConfig
    runs: list[PairRun]
    summary: dict[str, dict[str, list[float]]]  # setting -> metric -> [mean, std, n]
    report: Path
    results: Path
    figure: Path


def mean_std(values: list[float]) -> list[float]:
    """``[mean, std (ddof 0), n]``; nan for an empty list."""
    array = np.asarray(values, dtype=np.float64)
    if len(array) == 0:
        return [float("nan"), float("nan"), 0.0]
    return [float(array.mean()), float(array.std()), float(len(array))]


def summarize(runs: list[PairRun], steps: int) -> dict[str, dict[str, list[float]]]:
    """Per setting: mean, std and count over seeds of every reported number.

    A seed that never reaches the fit threshold counts as ``steps`` in ``steps_to_fit`` (a lower bound);
    ``fit_rate`` says how many did."""
    summary: dict[str, dict[str, list[float]]] = {}
    for setting in dict.fromkeys(run.setting for run in runs):
        mine = [run for run in runs if run.setting == setting]
        summary[setting] = {
            "steps_to_fit": mean_std([steps if r.steps_to_fit is None else r.steps_to_fit for r in mine]),
            "fit_rate": mean_std([float(r.steps_to_fit is not None) for r in mine]),
            "mean_train_accuracy": mean_std([float(np.mean(r.accuracy["train"])) for r in mine]),
            "generalization_gap": mean_std([r.generalization_gap for r in mine]),
            **{f"final_{split}": mean_std([r.final[split] for r in mine]) for split in EVALUATED_SPLITS},
        }
    return summary


def run_gdrc_images(out_dir: str | Path, config: GDRCImagesConfig | None = None) -> GDRCImagesResult:
    """Train every (setting, seed), then write ``report.md``, ``results.json`` and ``gdrc_images.png``."""
    config = config or GDRCImagesConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[PairRun] = []
    total = len(config.settings) * len(config.seeds)
    for setting in config.settings:
        for seed in config.seeds:
            started = time.perf_counter()
            runs.append(train_pair_classifier(config, setting, seed))
            headline = f"final test_ood accuracy {runs[-1].final['test_ood']:.3f}"
            seconds = time.perf_counter() - started
            trial_done(len(runs), total, f"setting {setting} seed {seed}", seconds, headline, config.steps)
    summary = summarize(runs, config.steps)
    results_path = out / "results.json"
    results_path.write_text(
        json.dumps(
            {"config": asdict(config), "summary": summary, "runs": [asdict(run) for run in runs]}, indent=2
        )
    )
    figure = save_curves_figure(runs, out / "gdrc_images.png", config)
    report = out / "report.md"
    report.write_text(render_report(config, runs, summary, figure.name))
    return GDRCImagesResult(config, runs, summary, report, results_path, figure)


def _fmt(stat: list[float], digits: int = 3) -> str:
    return f"{stat[0]:.{digits}f} ± {stat[1]:.{digits}f}"


def render_report(
    config: GDRCImagesConfig, runs: list[PairRun], summary: dict[str, dict[str, list[float]]], figure: str
) -> str:
    n_seeds = len(config.seeds)
    lines = [
        "# GDRC image pairs: settings A and B (GDRC §5.1, Fig. 3a)",
        "",
        f"Images: `{config.source}`; {config.n_train} training pairs, {config.n_test} per test split; "
        f"CNN of App. A, {config.steps} steps, batch {config.batch_size}, Adam lr {config.lr}, "
        f"{config.loss} loss; {n_seeds} seeds ({', '.join(map(str, config.seeds))}); mean ± std over seeds.",
        "",
        f"| setting | steps to train acc >= {config.fit_threshold} | seeds fitted | mean train acc over "
        "training | final train | final test_iid | final test_ood | gap (train - test_ood) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for setting, stats in summary.items():
        fitted = round(stats["fit_rate"][0] * stats["fit_rate"][2])
        lines.append(
            f"| {setting} | {_fmt(stats['steps_to_fit'], 1)} | {fitted}/{int(stats['fit_rate'][2])} | "
            f"{_fmt(stats['mean_train_accuracy'])} | {_fmt(stats['final_train'])} | "
            f"{_fmt(stats['final_test_iid'])} | {_fmt(stats['final_test_ood'])} | "
            f"{_fmt(stats['generalization_gap'])} |"
        )
    lines += [
        "",
        "Final test accuracy by offset k = (Y2 - Y1) mod 10 (mean over seeds; A trains on k in {0, 1}):",
        "",
    ]
    lines += ["| setting | " + " | ".join(f"k={k}" for k in range(N_CLASSES)) + " |"]
    lines += ["|---" * (N_CLASSES + 1) + "|"]
    for setting in summary:
        by_offset = np.mean([r.final_accuracy_by_offset for r in runs if r.setting == setting], axis=0)
        lines.append(f"| {setting} | " + " | ".join(f"{v:.3f}" for v in by_offset) + " |")
    if {"A", "B"} <= set(summary):
        a, b = summary["A"], summary["B"]
        faster = (
            a["mean_train_accuracy"][0] > b["mean_train_accuracy"][0]
            and a["steps_to_fit"][0] < b["steps_to_fit"][0]
        )
        wider = a["generalization_gap"][0] > b["generalization_gap"][0]
        lines += [
            "",
            "Paper claim (R-GDRC): setting A trains faster (higher mean training accuracy over training, "
            f"fewer steps to fit): **{'yes' if faster else 'no'}**; and generalizes worse (larger gap): "
            f"**{'yes' if wider else 'no'}**.",
        ]
    lines += ["", f"![curves]({figure})", ""]
    return "\n".join(lines)


def save_curves_figure(runs: list[PairRun], path: Path, config: GDRCImagesConfig) -> Path:
    """Train and ``test_ood`` accuracy against steps, mean ± std over seeds, per setting (Fig. 3a)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {("A", "train"): "tab:blue", ("A", "test_ood"): "c", ("B", "train"): "tab:red"}
    colours[("B", "test_ood")] = "tab:brown"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for setting in config.settings:
        mine = [run for run in runs if run.setting == setting]
        steps = np.asarray(mine[0].steps)
        for split in ("train", "test_ood"):
            curves = 100 * np.asarray([run.accuracy[split] for run in mine])
            mean, std = curves.mean(0), curves.std(0)
            colour = colours.get((setting, split))
            label = f"{'Train' if split == 'train' else 'Test'} {setting}"
            ax.plot(steps, mean, color=colour, label=label)
            ax.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.2)
    ax.set_xlabel("steps")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"GDRC image pairs ({config.source}), mean ± std over {len(config.seeds)} seeds")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
