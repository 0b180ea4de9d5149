"""GDRC SCAN jump, settings A and B over seeds: training speed against compositional test accuracy.

GDRC §5.2, Fig. 3b, App. B; CATALOG §1.1, §1.12, §4 R-GDRC ("redundant second input speeds training and
widens the generalization gap").

**Data** (§5.2, App. B: "The task contains 14,670 training and 7,706 test samples", SCAN ``addprim_jump``,
:func:`recombine.tasks.scan.split_parts`). Test: the official test part, every command that contains
``jump`` except the bare command, the same in both settings.

- Setting A: "we use the original dataset". In training ``jump`` occurs only as the bare command (1,467
  of the 14,670 lines), so the primitive word says which output syntax to expect (``jump`` -> a single
  action): the redundant input of GDRC's analysis.
- Setting B: "we changed 'jump' to other action word and corresponding output symbol uniformly at
  random"; "we remove the dependency of input semantics to output syntax by using action words uniformly
  at random, but we still keep the correspondence between input words and output actions". Our reading
  (the seeds give no more detail): every primitive word (``walk``, ``look``, ``run``, ``jump``) of every
  training line of A is redrawn, independently and uniformly among the four, and the line's output is the
  grammar's meaning of the new command (``jump`` -> ``I_JUMP`` etc.). The syntax of each line (the command
  with its primitives blanked) and the line count are those of A; the primitive is independent of the
  syntax. Like the image setting B (every combination in training, the second input uninformative), B
  therefore contains some of the test commands; the report also gives the accuracy on the test commands
  B never saw in training.

**Model and training** (App. B): :class:`recombine.models.lstm_seq2seq.LSTMSeq2Seq` with its defaults
(embedding 32, bidirectional LSTM encoder 16, attention decoder 64, ``s_0 = [h_1; h_|x|]``); Adam, cross
entropy (:class:`recombine.train.objectives.Seq2SeqObjective`), batches of 256 drawn uniformly with
replacement, learning rate 0.01 decayed by 0.96 every 100 steps, 2,000 steps (``steps``; the CPU run uses
fewer).

**Measured**, per (setting, seed): the teacher-forced exact-match accuracy of every training batch
(before its update; the paper's Fig. 3b discusses "steps 10-25"), and every ``eval_every`` steps the
sentence accuracy (greedy decoding, exact match, thesis C.1) on a fixed sample of ``n_eval_train`` training
lines and ``n_eval_test`` test lines (the same test lines in both settings). *Steps to fit* is the first
evaluated step with training accuracy >= ``fit_threshold``; the gap is final training accuracy minus
final test accuracy. :func:`run_gdrc_scan` writes ``report.md``, ``results.json`` and ``gdrc_scan.png``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from recombine.errors import UserError, choices_hint
from recombine.experiments.gdrc_images import first_step_reaching
from recombine.experiments.progress import training_bar, trial_done
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.models.lstm_seq2seq import LSTMSeq2Seq, LSTMSeq2SeqConfig
from recombine.tasks.base import TaskData, Vocabulary
from recombine.tasks.scan import ACTIONS, INPUT_WORDS, PRIMITIVES, generate_examples, split_parts
from recombine.tasks.seq2seq_parts import Example, encode_split
from recombine.train.batching import PaddedSeq2SeqSplit
from recombine.train.objectives import Seq2SeqObjective

SCAN_SETTINGS = ("A", "B")
#: group ids of the evaluated test lines: whether the setting's training set holds the same command
UNSEEN, SEEN = 0, 1
PRIMITIVE_WORDS = tuple(PRIMITIVES)


@dataclass
class GDRCScanConfig:
    """Defaults are GDRC App. B (the published CPU run overrides steps, seeds and evaluation sizes)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])  # the paper ran 5
    settings: list[str] = field(default_factory=lambda: list(SCAN_SETTINGS))
    steps: int = 2000
    batch_size: int = 256
    lr: float = 0.01
    lr_decay: float = 0.96  # multiply the learning rate by this ...
    lr_decay_every: int = 100  # ... every this many steps
    eval_every: int = 100
    n_eval_train: int = 1000  # training lines evaluated by greedy decoding (a fixed sample)
    n_eval_test: int = 1000  # test lines evaluated (a fixed sample; 0 = all 7,706)
    early_steps: int = 100  # the report's "early training" window for batch accuracy: steps 0..early_steps-1
    paper_window: list[int] = field(default_factory=lambda: [10, 25])  # Fig. 3b's "steps 10-25", inclusive
    fit_threshold: float = 0.9
    threads: int = 1
    model: LSTMSeq2SeqConfig = field(default_factory=LSTMSeq2SeqConfig)

    def __post_init__(self) -> None:
        for setting in self.settings:
            if setting not in SCAN_SETTINGS:
                raise UserError(
                    f"unknown GDRC SCAN setting {setting!r}; {choices_hint(setting, SCAN_SETTINGS)}"
                )
        if not self.seeds or not self.settings:
            raise UserError("need at least one seed and one setting")
        for name in ("steps", "batch_size", "eval_every", "lr_decay_every", "n_eval_train", "early_steps"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.paper_window) != 2 or not 0 <= self.paper_window[0] <= self.paper_window[1]:
            raise UserError(
                f"paper_window must be [first, last] steps with first <= last, got {self.paper_window}"
            )
        if self.n_eval_test < 0:
            raise UserError(f"n_eval_test must be >= 0 (0 = the whole test set), got {self.n_eval_test}")
        if self.lr <= 0 or not 0.0 < self.lr_decay <= 1.0:
            raise UserError(f"need lr > 0 and lr_decay in (0, 1], got {self.lr} and {self.lr_decay}")
        if not 0.0 < self.fit_threshold <= 1.0:
            raise UserError(f"fit_threshold must be in (0, 1], got {self.fit_threshold}")


# --- data ---


def grammar_meanings() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every SCAN command -> its action sequence (the grammar of :mod:`recombine.tasks.scan`)."""
    return dict(generate_examples())


def redraw_primitives(
    example: Example, rng: np.random.Generator, meanings: dict[tuple[str, ...], tuple[str, ...]]
) -> Example:
    """Setting B: each primitive word of the command redrawn uniformly among the four; the output is the
    grammar's meaning of the new command."""
    words = tuple(
        PRIMITIVE_WORDS[rng.integers(len(PRIMITIVE_WORDS))] if word in PRIMITIVES else word
        for word in example[0]
    )
    return words, meanings[words]


def scan_jump_parts(setting: str, seed: int) -> tuple[list[Example], list[Example]]:
    """``(train, test)`` lines of GDRC ``setting`` (module docstring); B's draws depend on ``seed``."""
    if setting not in SCAN_SETTINGS:
        raise UserError(f"unknown GDRC SCAN setting {setting!r}; {choices_hint(setting, SCAN_SETTINGS)}")
    train, test = split_parts("addprim_jump", generate_examples())
    if setting == "B":
        rng = np.random.default_rng([seed, 11])
        meanings = grammar_meanings()
        train = [redraw_primitives(example, rng, meanings) for example in train]
    return train, test


def build_scan_jump(setting: str, seed: int) -> TaskData:
    """The task of ``setting``: splits ``train`` and ``test_ood``; a test line's group is ``SEEN`` when its
    command is among the setting's training commands, else ``UNSEEN`` (the training lines' group is 0)."""
    train, test = scan_jump_parts(setting, seed)
    input_vocab, output_vocab = Vocabulary.build(list(INPUT_WORDS)), Vocabulary.build(list(ACTIONS))
    trained = {words for words, _ in train}
    splits = {
        "train": encode_split(train, input_vocab, output_vocab, lambda example: 0),
        "test_ood": encode_split(
            test, input_vocab, output_vocab, lambda example: SEEN if example[0] in trained else UNSEEN
        ),
    }
    return TaskData(
        name="scan",
        kind="seq2seq",
        input_vocab=input_vocab,
        output_vocab=output_vocab,
        splits=splits,
        description=f"SCAN addprim_jump, GDRC setting {setting} (GDRC 5.2, App. B)",
        metadata={"split": "addprim_jump", "gdrc_setting": setting, "group": "test command seen in training"},
    )


def subset(prepared: PaddedSeq2SeqSplit, rows: np.ndarray) -> PaddedSeq2SeqSplit:
    index = torch.as_tensor(rows, dtype=torch.int64)
    return PaddedSeq2SeqSplit(
        prepared.inputs[index],
        prepared.input_lengths[index],
        prepared.outputs[index],
        prepared.output_lengths[index],
        prepared.group[index],
    )


# --- training ---


@dataclass
class ScanRun:
    """One seed of one setting: the curves and the numbers derived from them."""

    setting: str
    seed: int
    batch_accuracy: list[float]  # teacher-forced exact match of every training batch, before its update
    batch_loss: list[float]
    steps: list[int]  # evaluated steps
    accuracy: dict[str, list[float]]  # "train", "test", "test_unseen" -> sentence accuracy at each step
    steps_to_fit: int | None
    test_seen_share: float  # share of the evaluated test lines whose command is in the training set
    seconds: float

    @property
    def final(self) -> dict[str, float]:
        return {split: values[-1] for split, values in self.accuracy.items()}

    @property
    def generalization_gap(self) -> float:
        return self.final["train"] - self.final["test"]


def train_scan_setting(config: GDRCScanConfig, setting: str, seed: int) -> ScanRun:
    """Train the App. B seq2seq on ``setting`` with ``seed`` and record the curves."""
    start = time.perf_counter()
    torch.set_num_threads(config.threads)
    task = build_scan_jump(setting, seed)
    spec = task.spec
    objective = Seq2SeqObjective(spec.n_classes)
    train = objective.prepare(task.splits["train"])
    test = objective.prepare(task.splits["test_ood"])
    rows_rng = np.random.default_rng([seed, 12])  # the same test rows in both settings
    test_rows = (
        np.arange(len(test))
        if config.n_eval_test == 0
        else np.sort(rows_rng.choice(len(test), min(config.n_eval_test, len(test)), replace=False))
    )
    train_rows = np.sort(rows_rng.choice(len(train), min(config.n_eval_train, len(train)), replace=False))
    eval_test = subset(test, test_rows)
    unseen_rows = np.flatnonzero(eval_test.group.numpy() == UNSEEN)
    eval_sets = {
        "train": subset(train, train_rows),
        "test": eval_test,
        "test_unseen": subset(eval_test, unseen_rows),
    }
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LSTMSeq2Seq(spec, config.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, config.lr_decay_every, config.lr_decay)
    generator = torch.Generator().manual_seed(seed)
    accuracy: dict[str, list[float]] = {split: [] for split in eval_sets}
    steps: list[int] = []
    batch_accuracy: list[float] = []
    batch_loss: list[float] = []

    def evaluate(step: int) -> None:
        steps.append(step)
        for split, prepared in eval_sets.items():
            value = objective.evaluate(model, prepared, 500)["accuracy"] if len(prepared) else float("nan")
            accuracy[split].append(float(value))

    with training_bar(config.steps, f"setting {setting} seed {seed}") as bar:
        for step in range(config.steps):
            if step % config.eval_every == 0:
                evaluate(step)
            loss, n_correct, n = objective.loss(
                model, objective.batch(train, config.batch_size, generator, False)
            )
            batch_accuracy.append(n_correct / n)
            batch_loss.append(float(loss.item()))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            bar.update()
    evaluate(config.steps)
    return ScanRun(
        setting=setting,
        seed=seed,
        batch_accuracy=batch_accuracy,
        batch_loss=batch_loss,
        steps=steps,
        accuracy=accuracy,
        steps_to_fit=first_step_reaching(steps, accuracy["train"], config.fit_threshold),
        test_seen_share=float(1.0 - len(unseen_rows) / len(eval_test)),
        seconds=time.perf_counter() - start,
    )


# --- summary, report, figure ---


def mean_std(values: Sequence[float]) -> list[float]:
    """``[mean, std (ddof 0), n]`` over the finite values."""
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if len(array) == 0:
        return [float("nan"), float("nan"), 0.0]
    return [float(array.mean()), float(array.std()), float(len(array))]


def summarize(runs: list[ScanRun], config: GDRCScanConfig) -> dict[str, dict[str, list[float]]]:
    """Per setting: mean, std and count over seeds. A seed that never fits counts as ``steps``."""
    summary: dict[str, dict[str, list[float]]] = {}
    for setting in dict.fromkeys(run.setting for run in runs):
        mine = [run for run in runs if run.setting == setting]
        early = min(config.early_steps, config.steps)
        first, last = config.paper_window
        summary[setting] = {
            "paper_window_batch_accuracy": mean_std(
                [float(np.mean(r.batch_accuracy[first : last + 1] or [np.nan])) for r in mine]
            ),
            "steps_to_fit": mean_std(
                [config.steps if r.steps_to_fit is None else r.steps_to_fit for r in mine]
            ),
            "fit_rate": mean_std([float(r.steps_to_fit is not None) for r in mine]),
            "early_batch_accuracy": mean_std([float(np.mean(r.batch_accuracy[:early])) for r in mine]),
            "mean_batch_accuracy": mean_std([float(np.mean(r.batch_accuracy)) for r in mine]),
            "mean_train_accuracy": mean_std([float(np.mean(r.accuracy["train"])) for r in mine]),
            "generalization_gap": mean_std([r.generalization_gap for r in mine]),
            "test_seen_share": mean_std([r.test_seen_share for r in mine]),
            **{
                f"final_{split}": mean_std([r.final[split] for r in mine])
                for split in ("train", "test", "test_unseen")
            },
        }
    return summary


@dataclass
class GDRCScanResult:
    config: GDRCScanConfig
    runs: list[ScanRun]
    summary: dict[str, dict[str, list[float]]]
    report: Path
    results: Path
    figure: Path


def run_gdrc_scan(out_dir: str | Path, config: GDRCScanConfig | None = None) -> GDRCScanResult:
    """Train every (setting, seed), then write ``report.md``, ``results.json`` and ``gdrc_scan.png``."""
    config = config or GDRCScanConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[ScanRun] = []
    total = len(config.seeds) * len(config.settings)
    for seed in config.seeds:
        for setting in config.settings:
            started = time.perf_counter()
            runs.append(train_scan_setting(config, setting, seed))
            headline = f"final test accuracy {runs[-1].final['test']:.3f}"
            seconds = time.perf_counter() - started
            trial_done(len(runs), total, f"setting {setting} seed {seed}", seconds, headline, config.steps)
    summary = summarize(runs, config)
    results_path = out / "results.json"
    results_path.write_text(
        json.dumps(
            {
                "config": dataclasses.asdict(config),
                "summary": summary,
                "runs": [dataclasses.asdict(r) for r in runs],
            },
            indent=2,
        )
    )
    figure = save_curves_figure(runs, out / "gdrc_scan.png", config)
    report = out / "report.md"
    report.write_text(render_report(config, runs, summary, figure.name))
    return GDRCScanResult(config, runs, summary, report, results_path, figure)


def _fmt(stat: list[float], digits: int = 3) -> str:
    return f"{stat[0]:.{digits}f} ± {stat[1]:.{digits}f}"


def seeds_where_a_is_faster(runs: list[ScanRun], config: GDRCScanConfig) -> tuple[int, int]:
    """``(k, n)``: of the ``n`` seeds run in both settings, in ``k`` A's mean batch accuracy over the
    paper's window is higher than B's (a paired comparison)."""
    first, last = config.paper_window
    window = {(r.setting, r.seed): np.mean(r.batch_accuracy[first : last + 1] or [np.nan]) for r in runs}
    paired = [seed for seed in config.seeds if ("A", seed) in window and ("B", seed) in window]
    return sum(bool(window["A", seed] > window["B", seed]) for seed in paired), len(paired)


def render_report(
    config: GDRCScanConfig, runs: list[ScanRun], summary: dict[str, dict[str, list[float]]], figure: str
) -> str:
    m = config.model
    early = min(config.early_steps, config.steps)
    lines = [
        "# GDRC SCAN jump: settings A and B (GDRC §5.2, Fig. 3b, App. B)",
        "",
        f"SCAN addprim_jump (14,670 training / 7,706 test lines); setting B redraws every primitive word of "
        f"every training line uniformly (our reading of App. B). LSTM seq2seq with {m.attention} attention "
        f"(embedding {m.embedding_size}, encoder {m.encoder_size} x {2 if m.bidirectional else 1}, decoder "
        f"{m.decoder_size}); Adam lr {config.lr} x {config.lr_decay} every {config.lr_decay_every} steps, "
        f"batch {config.batch_size} with replacement, {config.steps} steps (App. B: 2,000); "
        f"{len(config.seeds)} seeds ({', '.join(map(str, config.seeds))}); mean ± std over seeds. Sentence "
        f"accuracy by greedy decoding on {config.n_eval_train} training and "
        f"{config.n_eval_test or 'all'} test lines every {config.eval_every} steps.",
        "",
        f"| setting | batch acc., steps {config.paper_window[0]}-{config.paper_window[1]} (Fig. 3b) "
        f"| batch acc., steps 0-{early - 1} | batch acc., all steps | steps to train acc >= "
        f"{config.fit_threshold} | seeds fitted | final train | final test | gap (train - test) | "
        "share of test seen in training | final test, unseen commands |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, stats in summary.items():
        fitted = round(stats["fit_rate"][0] * stats["fit_rate"][2])
        lines.append(
            f"| {setting} | {_fmt(stats['paper_window_batch_accuracy'])} "
            f"| {_fmt(stats['early_batch_accuracy'])} | {_fmt(stats['mean_batch_accuracy'])} | "
            f"{_fmt(stats['steps_to_fit'], 1)} | {fitted}/{int(stats['fit_rate'][2])} | "
            f"{_fmt(stats['final_train'])} | {_fmt(stats['final_test'])} | "
            f"{_fmt(stats['generalization_gap'])} | "
            f"{_fmt(stats['test_seen_share'])} | {_fmt(stats['final_test_unseen'])} |"
        )
    lines += [
        "",
        "| setting | seed | steps to fit | final train | final test | final test unseen | seconds |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for run in runs:
        final = run.final
        lines.append(
            f"| {run.setting} | {run.seed} | {'never' if run.steps_to_fit is None else run.steps_to_fit} "
            "| "
            f"{final['train']:.3f} | {final['test']:.3f} | {final['test_unseen']:.3f} | {run.seconds:.0f} |"
        )
    if {"A", "B"} <= set(summary):
        a, b = summary["A"], summary["B"]
        faster = a["paper_window_batch_accuracy"][0] > b["paper_window_batch_accuracy"][0]
        wider = a["generalization_gap"][0] > b["generalization_gap"][0]
        k, n = seeds_where_a_is_faster(runs, config)
        first, last = config.paper_window
        lines += [
            "",
            f"Paper claim (R-GDRC, Fig. 3b): setting A's training accuracy rises faster early in training "
            f"(mean batch accuracy over steps {first}-{last}): **{'yes' if faster else 'no'}** (A higher "
            f"in {k} of {n} seeds, paired by seed); and its gap between training and test accuracy is "
            f"larger: **{'yes' if wider else 'no'}**.",
        ]
    lines += ["", f"![curves]({figure})", ""]
    return "\n".join(lines)


def save_curves_figure(runs: list[ScanRun], path: Path, config: GDRCScanConfig) -> Path:
    """Left: batch accuracy (moving average over 10 steps); right: train and test sentence accuracy at the
    evaluated steps; mean ± std over seeds per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"A": ("tab:blue", "c"), "B": ("tab:red", "tab:brown")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    window = min(10, config.steps)
    for setting in config.settings:
        mine = [run for run in runs if run.setting == setting]
        smooth = np.asarray(
            [np.convolve(r.batch_accuracy, np.ones(window) / window, mode="valid") for r in mine]
        )
        x = np.arange(smooth.shape[1]) + window - 1
        mean, std = 100 * smooth.mean(0), 100 * smooth.std(0)
        axes[0].plot(x, mean, color=colours[setting][0], label=f"setting {setting}")
        axes[0].fill_between(x, mean - std, mean + std, color=colours[setting][0], alpha=0.2)
        steps = np.asarray(mine[0].steps)
        for split, colour in zip(("train", "test"), colours[setting], strict=True):
            curves = 100 * np.asarray([r.accuracy[split] for r in mine])
            mean, std = curves.mean(0), curves.std(0)
            axes[1].plot(steps, mean, color=colour, label=f"{split.capitalize()} {setting}")
            axes[1].fill_between(steps, mean - std, mean + std, color=colour, alpha=0.2)
    axes[0].set_title(f"training-batch accuracy (teacher forced, mean over {window} steps)")
    axes[1].set_title("sentence accuracy (greedy decoding)")
    for ax in axes:
        ax.set_xlabel("steps")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"GDRC SCAN jump, mean ± std over {len(config.seeds)} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


GDRC_SCAN = ScriptedReproduction(
    "gdrc-scan",
    "SCAN jump, settings A and B: faster early training, worse compositional generalization (GDRC Fig. 3b)",
    "GDRC §5.2, Fig. 3b, App. B",
    GDRCScanConfig,
    run_gdrc_scan,
    defaults={"seeds": [0, 1, 2], "steps": 600, "eval_every": 50, "n_eval_train": 500, "n_eval_test": 500},
    quick={
        "seeds": [0],
        "steps": 10,
        "batch_size": 64,
        "eval_every": 5,
        "n_eval_train": 32,
        "n_eval_test": 32,
        "early_steps": 5,
        "paper_window": [0, 4],
    },
)
