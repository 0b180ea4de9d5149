"""The report of a DNC reproduction that has not finished: its runs so far (``recombine report DIR``).

A DNC reproduction (``dnc-repeat-copy``, ``dnc-assoc-recall``, ``dnc-key-value``) writes ``report.md`` when
every run has finished; at the thesis's A.2 sizes that is hours to days away and spans sessions. Until then
``recombine report DIR`` renders this progress report from the kept runs and the checkpoints
(:func:`recombine.experiments.dnc_trial_listing.dnc_trials`):

* ``progress_loss.png``: the training loss (the moving average the finished report uses, thesis Fig. 2.3b)
  and the loss on the fixed evaluation set, one colour per variant, one line per seed, the convergence
  threshold dashed;
* ``progress.md``: one row per run (its step, last evaluation and steps to the threshold so far) and, per
  variant, how many seeds have reached the threshold so far, the measure of the finished report's "steps
  to threshold" column. A seed that has not reached it yet may still do so: "so far" is the point.

The threshold and the window are the reproduction's own (``threshold_fraction`` x the chance loss,
``smooth`` steps; :func:`~recombine.experiments.dnc_memory.steps_to_threshold`), read from its
``experiment.yaml``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from recombine.errors import UserError
from recombine.experiments.dnc_memory import DNCComparisonConfig, chance_loss, steps_to_threshold
from recombine.experiments.dnc_trial_listing import DNCTrialProgress, dnc_trials

PROGRESS_REPORT = "progress.md"
PROGRESS_FIGURE = "progress_loss.png"


def render_dnc_progress(out_dir: Path) -> str:
    """Write ``progress.md`` and ``progress_loss.png`` into ``out_dir``; the Markdown."""
    trials = [trial for trial in dnc_trials(out_dir) if trial.status != "unreadable"]
    if not trials:
        raise UserError(
            f"{out_dir} has no report yet and no run of it has been kept or checkpointed; "
            "start the reproduction (the same `recombine reproduce` command resumes it)"
        )
    threshold_fraction, smooth = _convergence_settings(out_dir)
    chance = chance_loss(trials[0].task)
    threshold = threshold_fraction * chance
    reached = {id(trial): _steps_to_threshold(trial, threshold, smooth) for trial in trials}
    save_progress_figure(trials, out_dir / PROGRESS_FIGURE, threshold, smooth)
    kept = sum(trial.status == "kept" for trial in trials)
    lines = [
        f"# DNC reproduction in progress: {out_dir}",
        "",
        f"{kept} of {len(trials)} runs kept, {len(trials) - kept} checkpointed: the same "
        "`recombine reproduce` command resumes them, and writes `report.md` when all have finished.",
        "",
        f"Steps to threshold: first step after which the {smooth}-step moving average of the training loss "
        f"is below {threshold:.3g} ({threshold_fraction:g} x the chance loss {chance:.3g}); '-' = not yet.",
        "",
        "| variant | seed | status | step | eval loss | bit error | seq. acc. | steps to threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for trial in trials:
        lines.append(
            f"| {trial.variant} | {trial.seed} | {trial.status} | {trial.step}/{trial.steps} "
            f"| {trial.eval_loss:.3g} | {trial.bit_error:.4f} | {trial.sequence_accuracy:.3f} "
            f"| {_or_dash(reached[id(trial)])} |"
        )
    lines += ["", "| variant | seeds past the threshold so far | their steps to it |", "|---|---|---|"]
    for variant in dict.fromkeys(trial.variant for trial in trials):
        steps = [reached[id(t)] for t in trials if t.variant == variant]
        past = sorted(s for s in steps if s is not None)
        lines.append(f"| {variant} | {len(past)} of {len(steps)} | {', '.join(map(str, past)) or '-'} |")
    lines += ["", f"![training and evaluation loss so far]({PROGRESS_FIGURE})", ""]
    text = "\n".join(lines)
    (out_dir / PROGRESS_REPORT).write_text(text)
    return text


def save_progress_figure(trials: list[DNCTrialProgress], path: Path, threshold: float, smooth: int) -> Path:
    """Two panels: the ``smooth``-step moving average of the training loss and the evaluation loss, per run
    (colour: variant; line style: seed), log scale, ``threshold`` dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(trial.variant for trial in trials))
    seeds = sorted({trial.seed for trial in trials})
    styles = ["-", "--", ":", "-."]
    fig, (train_ax, eval_ax) = plt.subplots(1, 2, figsize=(10.0, 3.8), sharey=True)
    for trial in trials:
        colour = f"C{variants.index(trial.variant) % 10}"
        style = styles[seeds.index(trial.seed) % len(styles)]
        label = f"{trial.variant} seed {trial.seed}"
        if trial.train_loss is not None and len(trial.train_loss) >= smooth:
            average = np.convolve(trial.train_loss, np.ones(smooth) / smooth, mode="valid")
            train_ax.plot(np.arange(smooth, len(trial.train_loss) + 1), average, colour, ls=style, lw=1.0)
        if trial.evaluations:
            steps, losses = zip(*[(step, loss) for step, loss, _, _ in trial.evaluations], strict=True)
            eval_ax.plot(steps, losses, colour, ls=style, lw=1.0, label=label)
    for ax, title in ((train_ax, f"training loss ({smooth}-step average)"), (eval_ax, "evaluation loss")):
        ax.axhline(threshold, color="0.4", ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_title(title, fontsize=10)
    train_ax.set_ylabel("loss (BCE per sequence)")
    eval_ax.legend(fontsize=7, ncol=max(1, len(variants)), loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _steps_to_threshold(trial: DNCTrialProgress, threshold: float, smooth: int) -> int | None:
    return None if trial.train_loss is None else steps_to_threshold(trial.train_loss, threshold, smooth)


def _convergence_settings(out_dir: Path) -> tuple[float, int]:
    """``threshold_fraction`` and ``smooth`` from the reproduction's ``experiment.yaml`` (the comparison's
    defaults where it lacks them or cannot be read)."""
    import yaml

    from recombine.experiments.scripted_reproduction import CONFIG_FILE

    defaults = {field.name: field.default for field in dataclasses.fields(DNCComparisonConfig)}
    try:
        values = yaml.safe_load((out_dir / CONFIG_FILE).read_text())
    except (OSError, yaml.YAMLError):
        values = None
    values = values if isinstance(values, dict) else {}
    fraction = values.get("threshold_fraction", defaults["threshold_fraction"])
    smooth = values.get("smooth", defaults["smooth"])
    return float(fraction), int(smooth)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
