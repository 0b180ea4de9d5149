"""The report of a DNC reproduction that has not finished: its runs so far (``recombine report DIR``).

A DNC reproduction (``dnc-repeat-copy``, ``dnc-assoc-recall``, ``dnc-key-value``) writes ``report.md`` when
every run has finished; at the thesis's A.2 sizes that is hours to days away and spans sessions. Until then
``recombine report DIR`` renders this progress report of the runs its ``experiment.yaml`` names (each
variant x seed), from the kept runs and the checkpoints
(:func:`recombine.experiments.dnc_trial_listing.dnc_trials`):

* ``progress_loss.png``: the training loss (the moving average the finished report uses, thesis Fig. 2.3b)
  and the loss on the fixed evaluation set, one colour per variant, one line style per seed, the
  convergence threshold dashed;
* ``progress.md``: one row per run (kept, checkpointed or not started; its step, last evaluation and steps
  to the threshold so far) and, per variant, how many seeds have reached the threshold so far, the measure
  of the finished report's "steps to threshold" column. A seed that has not reached it yet may still do so:
  "so far" is the point.

The task, the threshold (``threshold_fraction`` x the chance loss) and the window (``smooth`` steps;
:func:`~recombine.experiments.dnc_memory.steps_to_threshold`) are the reproduction's own. Runs of other
settings kept in the same directory (a shorter run kept before the reproduction was extended, another task)
are counted in one line and left out; checkpoints of other settings are named on stderr only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from recombine.errors import UserError, first_line
from recombine.experiments.dnc_memory import (
    DNCComparisonConfig,
    StoredTrials,
    chance_loss,
    steps_to_threshold,
)
from recombine.experiments.dnc_trial_listing import DNCTrialProgress, dnc_trials
from recombine.experiments.scripted_reproduction import CONFIG_FILE

PROGRESS_REPORT = "progress.md"
PROGRESS_FIGURE = "progress_loss.png"
PROGRESS_PAGE = "progress.html"


def render_dnc_progress(out_dir: Path, config: DNCComparisonConfig) -> str:
    """Write ``progress.md`` and ``progress_loss.png`` (if any run has started) into ``out_dir``, the
    directory of the DNC reproduction of ``config`` (:func:`reproduction_config`); the Markdown."""
    from recombine.probes.dnc_stored_trace import runs_of_config

    store = StoredTrials(out_dir)
    expected = runs_of_config(config, store)  # name -> run, variants x seeds
    listed = {trial.name: trial for trial in dnc_trials(out_dir)}
    trials = [listed[name] for name in expected if name in listed and listed[name].status != "unreadable"]
    # a checkpoint that cannot be read is not listed (said on stderr), but it is there
    unreadable_names = {
        name
        for name, run in expected.items()
        if (name in listed and listed[name].status == "unreadable")
        or (name not in listed and store.partial_path(run.task, run.model, run.train).is_file())
    }
    unreadable = len(unreadable_names)
    others = sum(name not in expected for name in listed)
    threshold = config.threshold_fraction * (chance := chance_loss(config.task()))
    reached = {trial.name: _steps_to_threshold(trial, threshold, config.smooth) for trial in trials}
    if trials:
        save_progress_figure(trials, out_dir / PROGRESS_FIGURE, threshold, config.smooth)
    kept = sum(trial.status == "kept" for trial in trials)
    counts = f"{kept} of {len(expected)} runs kept, {len(trials) - kept} checkpointed"
    if unreadable:
        counts += f", {unreadable} unreadable (see `recombine runs`)"
    lines = [
        f"# DNC reproduction in progress: {out_dir}",
        "",
        f"{counts}, {len(expected) - len(trials) - unreadable} not started: the same `recombine reproduce` "
        "command resumes them, and writes `report.md` when all have finished.",
        "",
        f"Steps to threshold: first step after which the {config.smooth}-step moving average of the training "
        f"loss is below {threshold:.3g} ({config.threshold_fraction:g} x the chance loss {chance:.3g}); "
        "'-' = not yet.",
        "",
        "| variant | seed | status | step | eval loss | bit error | seq. acc. | steps to threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in expected.items():
        trial = listed.get(name)
        if trial is None or name in unreadable_names:
            status = "unreadable" if name in unreadable_names else "not started"
            lines.append(f"| {run.model.variant} | {run.train.seed} | {status} | - | - | - | - | - |")
            continue
        lines.append(
            f"| {trial.variant} | {trial.seed} | {trial.status} | {trial.step}/{trial.steps} "
            f"| {trial.eval_loss:.3g} | {trial.bit_error:.4f} | {trial.sequence_accuracy:.3f} "
            f"| {_or_dash(reached[name])} |"
        )
    lines += ["", "| variant | seeds past the threshold so far | their steps to it |", "|---|---|---|"]
    for variant in config.variants:
        past = sorted(
            step for trial in trials if trial.variant == variant and (step := reached[trial.name]) is not None
        )
        lines.append(
            f"| {variant} | {len(past)} of {len(config.seeds)} | {', '.join(map(str, past)) or '-'} |"
        )
    if others:
        which = "1 kept run" if others == 1 else f"{others} kept runs"
        verb = "is" if others == 1 else "are"
        lines += [
            "",
            f"{which} of other settings in {out_dir} {verb} left out (`recombine runs` lists them).",
        ]
    if trials:
        lines += ["", f"![training and evaluation loss so far]({PROGRESS_FIGURE})"]
    text = "\n".join([*lines, ""])
    (out_dir / PROGRESS_REPORT).write_text(text)
    return text


def reproduction_config(out_dir: Path) -> DNCComparisonConfig | None:
    """The config of the DNC reproduction in ``out_dir``, from its ``experiment.yaml``; None if that is the
    config of another reproduction."""
    import yaml

    from recombine.probes.dnc_stored_trace import dnc_reproduction_configs

    config_file = out_dir / CONFIG_FILE
    try:
        values = yaml.safe_load(config_file.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UserError(f"{config_file} cannot be read ({first_line(error)})") from error
    configs = dnc_reproduction_configs(values, CONFIG_FILE) if isinstance(values, dict) else []
    # experiment.yaml holds every field of its class, and a class whose fields are a subset of another's
    # (dnc-key-value's of dnc-repeat-copy's) accepts the other's file: the exact match is the one
    exact = [config for config in configs if {f.name for f in dataclasses.fields(config)} == set(values)]
    return (exact or configs or [None])[0]


def save_progress_figure(trials: list[DNCTrialProgress], path: Path, threshold: float, smooth: int) -> Path:
    """Two panels: the ``smooth``-step moving average of the training loss and the evaluation loss, per run
    (colour: variant; line style: seed), log scale, ``threshold`` dashed, the legend below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(trial.variant for trial in trials))
    seeds = sorted({trial.seed for trial in trials})
    styles = ["-", "--", ":", "-."]
    fig, (train_ax, eval_ax) = plt.subplots(1, 2, figsize=(10.0, 4.2), sharey=True)
    for trial in trials:
        colour = f"C{variants.index(trial.variant) % 10}"
        style = styles[seeds.index(trial.seed) % len(styles)]
        label = f"{trial.variant} seed {trial.seed}"
        if trial.train_loss is not None and len(trial.train_loss) >= smooth:
            # the average over steps t-smooth+1..t, drawn at step t (steps count from 1)
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
    handles, labels = eval_ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=len(variants), loc="lower center")
    legend_rows = -(-len(handles) // len(variants))
    fig.tight_layout(rect=(0.0, min(0.35, 0.01 + 0.035 * legend_rows), 1.0, 1.0))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _steps_to_threshold(trial: DNCTrialProgress, threshold: float, smooth: int) -> int | None:
    return None if trial.train_loss is None else steps_to_threshold(trial.train_loss, threshold, smooth)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
