"""Pieces shared by the add/mul and double-addition mask analyses (thesis 3.2.1, 3.2.2).

* :func:`random_batches`: an endless iterator of uniformly drawn ``((inputs,), targets)`` batches, the
  form :func:`~recombine.probes.weight_masks.train_weight_mask` and :func:`train_model` read;
* :func:`train_model`: the weight training before the freeze (Adam, gradient clipping; B.3.2);
* :func:`accuracy_table`: one Markdown row per evaluated function, one column per mask;
* :func:`mean_std_tree`: mean and sample std over seeds of every number in nested result dicts;
* :func:`analyse_every_architecture_and_seed`: the trial loop of the mask reproductions, resumable
  from ``trials.jsonl`` (:func:`trial_settings` names what a stored trial must match);
* :func:`sharing_summary`: per-layer sharing counts and ratios as JSON-ready dicts;
* :func:`plot_sharing_panels`: the per-layer sharing bars (thesis Figs. 3.1, 3.3), one panel per
  architecture, mean ± std over seeds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from recombine.errors import UserError, choices_hint
from recombine.models.arithmetic_lstm import ArithmeticLSTMConfig
from recombine.models.fnn import FNNConfig
from recombine.probes.mask_sets import LayerSharing
from recombine.probes.weight_masks import MaskTrainingConfig, ModelOutput
from recombine.tasks.addmul import AddMulConfig

Targets = torch.Tensor | tuple[torch.Tensor, ...]
MeanStd = tuple[float, float]


def check_choice(field_name: str, value: str, choices: Sequence[str]) -> None:
    """A UserError naming the valid choices unless ``value`` is one of them."""
    if value not in choices:
        raise UserError(f"unknown {field_name} {value!r}; {choices_hint(value, choices)}")


@dataclass
class ArithmeticMaskAnalysisConfig:
    """What the add/mul and double-addition mask analyses share (thesis B.3.2, B.3.4): the data, the
    network (``architecture``: one of the subclass's ``ARCHITECTURES``; ``model`` configures the FNN,
    ``lstm`` the LSTMs), its training and the mask training. Subclasses set ``ARCHITECTURES`` and their
    mask defaults."""

    ARCHITECTURES: ClassVar[tuple[str, ...]] = ("fnn",)

    task: AddMulConfig = field(default_factory=AddMulConfig)
    architecture: str = "fnn"
    model: FNNConfig = field(default_factory=lambda: FNNConfig(hidden_sizes=[400, 400, 200]))  # the FNN
    lstm: ArithmeticLSTMConfig = field(default_factory=ArithmeticLSTMConfig)
    train_steps: int = 20_000  # B.3.4
    batch_size: int = 128  # B.3.2
    learning_rate: float = 1e-3  # B.3.2
    grad_clip: float = 1.0  # B.3.2
    mask: MaskTrainingConfig = field(default_factory=MaskTrainingConfig)
    full_mask: bool = True  # also train the B.3.3 sanity-check mask on the whole task
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.train_steps < 0 or self.batch_size < 1:
            raise UserError("train_steps must be >= 0 and batch_size >= 1")
        check_choice("architecture", self.architecture, self.ARCHITECTURES)


def random_batches(
    inputs: np.ndarray,
    targets: np.ndarray | Sequence[np.ndarray],
    batch_size: int,
    seed: int,
    device: str = "cpu",
) -> Iterator[tuple[tuple[torch.Tensor], Targets]]:
    """Endless batches of ``batch_size`` rows drawn uniformly with replacement: ``((x,), y)``.

    ``targets`` is one array or a sequence of arrays (then ``y`` is a tuple), all indexed like
    ``inputs``. The draws depend only on ``seed``."""
    x = torch.as_tensor(inputs, device=device)
    several = not isinstance(targets, np.ndarray)
    ys = [torch.as_tensor(t, device=device) for t in (targets if several else [targets])]
    if any(len(y) != len(x) for y in ys):
        raise ValueError("inputs and targets must have the same number of rows")
    generator = torch.Generator().manual_seed(seed)
    while True:
        index = torch.randint(len(x), (batch_size,), generator=generator).to(device)
        picked = tuple(y[index] for y in ys)
        yield (x[index],), (picked if several else picked[0])


def train_model(
    model: torch.nn.Module,
    batches: Iterable[tuple[tuple[torch.Tensor, ...], Targets]],
    loss_fn: Callable[[ModelOutput, Any], torch.Tensor],
    steps: int,
    learning_rate: float,
    grad_clip: float,
    description: str,
) -> list[float]:
    """Train every parameter of ``model`` with Adam for ``steps`` batches; the loss per step.

    Leaves the model in eval mode, ready to be frozen and masked."""
    from recombine.experiments.progress import training_bar  # not at the top: the package imports us

    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    iterator = iter(batches)
    losses = []
    model.train()
    with training_bar(steps, description) as bar:
        for _ in range(steps):
            inputs, targets = next(iterator)
            loss = loss_fn(model(*inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            losses.append(float(loss.detach()))
            bar.update()
    model.eval()
    return losses


def accuracy_table(accuracy: Mapping[str, Mapping[str, float]], rows: Sequence[str], row_header: str) -> str:
    """Markdown: one row per evaluated function (``rows``), one column per mask, accuracy in %.

    ``accuracy[mask][row]`` is a fraction; the thesis's tables (3.1, B.1) have this layout."""
    columns = list(accuracy)
    lines = [f"| {row_header} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in rows:
        cells = " | ".join(f"{100 * accuracy[column][row]:.0f}" for column in columns)
        lines.append(f"| {row} | {cells} |")
    return "\n".join(lines)


def mean_std(values: Sequence[float]) -> MeanStd:
    """Mean and sample standard deviation (0 for a single value)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def mean_std_tree(trees: Sequence[Any]) -> Any:
    """Mean ± std over ``trees`` (one per seed) of every number in nested dicts of the same shape.

    Dicts are followed key by key (the first tree's keys); numbers become ``(mean, std)``; anything
    else (strings, lists) is left out."""
    first = trees[0]
    if isinstance(first, Mapping):
        out = {}
        for key in first:
            value = mean_std_tree([tree[key] for tree in trees])
            if value is not None:
                out[key] = value
        return out
    if isinstance(first, bool) or not isinstance(first, int | float):
        return None
    return mean_std([float(tree) for tree in trees])


#: the config fields that list what a mask reproduction runs rather than how one trial runs
RUN_LIST_FIELDS = ("seeds", "architectures", "modules")


def trial_settings(config: Any) -> dict[str, Any]:
    """Everything in a reproduction's config (a dataclass) that changes a trial's result: all fields but
    the lists of seeds and architectures / modules to run (:data:`RUN_LIST_FIELDS`)."""
    return {k: v for k, v in asdict(config).items() if k not in RUN_LIST_FIELDS}


def analyse_every_architecture_and_seed(
    architectures: Sequence[str],
    seeds: Sequence[int],
    analyse: Callable[[str, int], dict[str, Any]],
    headline: Callable[[dict[str, Any]], str],
    out_dir: Path | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``analyse(architecture, seed)`` (a trial's summary) for every pair, one progress line each.

    Returns the ``results.json`` fields the mask reproductions share: ``architectures[name]`` with
    ``per_seed`` (each summary plus its ``seconds``) and ``mean_std`` (:func:`mean_std_tree`),
    ``trials`` (architecture, seed, seconds per trial; the run list the result index counts) and
    ``wall_seconds``.

    ``out_dir``: every finished trial is appended to its ``trials.jsonl``
    (:class:`~recombine.experiments.block_architecture_grid.TrialLog`) under the key of ``settings``
    (:func:`trial_settings`), its
    architecture and its seed, and a trial already there is read back instead of run again. So an
    interrupted run resumes where it stopped, and runs of different seeds into one directory (one after
    the other, or side by side) add up when a last run lists all the seeds. ``wall_seconds`` then counts
    this call's time plus the stored time of the trials read back."""
    # not at the top: the experiments package imports this module
    from recombine.experiments.block_architecture_grid import TRIALS_FILE, TrialLog, trial_key
    from recombine.experiments.progress import trial_done

    log = TrialLog(out_dir / TRIALS_FILE) if out_dir is not None else None
    finished = log.finished() if log is not None else {}
    per_architecture: dict[str, dict[str, Any]] = {}
    trials: list[dict[str, Any]] = []
    wall_started = time.perf_counter()
    reused_seconds = 0.0
    total = len(architectures) * len(seeds)
    for architecture in architectures:
        per_seed: dict[str, dict[str, Any]] = {}
        for seed in seeds:
            key = trial_key({"settings": dict(settings or {}), "architecture": architecture, "seed": seed})
            name = f"{architecture} seed {seed}"
            if key in finished:
                summary = finished[key]
                seconds = float(summary["seconds"])
                reused_seconds += seconds
                trials.append({"architecture": architecture, "seed": seed, "seconds": seconds})
                trial_done(len(trials), total, name, seconds, f"from {log.path}")  # type: ignore[union-attr]
                per_seed[str(seed)] = summary
                continue
            started = time.perf_counter()
            # through JSON, so that fresh summaries and those read back have the same form (str keys)
            summary = json.loads(json.dumps(analyse(architecture, seed)))
            seconds = time.perf_counter() - started
            summary["seconds"] = seconds
            per_seed[str(seed)] = summary
            if log is not None:
                log.add(key, summary)
            trials.append({"architecture": architecture, "seed": seed, "seconds": seconds})
            trial_done(len(trials), total, name, seconds, headline(summary))
        per_architecture[architecture] = {
            "per_seed": per_seed,
            "mean_std": mean_std_tree(list(per_seed.values())),
        }
    return {
        "architectures": per_architecture,
        "trials": trials,
        "wall_seconds": time.perf_counter() - wall_started + reused_seconds,
    }


def format_mean_std(value: MeanStd, scale: float = 100.0) -> str:
    """``"94 ± 6.7"``: a (mean, std) pair as a table cell, times ``scale`` (fractions to %)."""
    mean, std = value
    if math.isnan(mean):
        return "nan"
    return f"{scale * mean:.0f} ± {scale * std:.1f}"


def wall_time_note(aggregated: Mapping[str, Mapping[str, Any]], wall_seconds: float | None) -> str:
    """``"Wall time 1234 s; per trial: fnn 100 ± 3 s, lstm 300 ± 9 s; torch 2.x."``.

    ``aggregated[architecture]["seconds"]`` is the (mean, std) time of one trial (one seed)."""
    per_trial = ", ".join(
        f"{name} {stats['seconds'][0]:.0f} ± {stats['seconds'][1]:.0f} s"
        for name, stats in aggregated.items()
        if "seconds" in stats
    )
    total = f"Wall time {wall_seconds:.0f} s; " if wall_seconds is not None else ""
    return f"{total}per trial: {per_trial or 'not measured'}; torch {torch.__version__}."


def sharing_summary(
    sharing: Mapping[str, LayerSharing], labels: tuple[str, str]
) -> dict[str, dict[str, Any]]:
    """Per layer: the counts, IoU, IoMin and ``shared_of_<label>`` (the Fig. 3.1 / 3.3 bars)."""
    return {
        layer: {
            **asdict(stats),
            "iou": stats.iou,
            "iomin": stats.iomin,
            f"shared_of_{labels[0]}": stats.shared_of_a,
            f"shared_of_{labels[1]}": stats.shared_of_b,
        }
        for layer, stats in sharing.items()
    }


def plot_sharing_panels(
    panels: Mapping[str, Mapping[str, Mapping[str, MeanStd]]],
    series: Sequence[tuple[str, str]],
    path: str | Path,
    title: str = "",
) -> Path:
    """Shared-weight percentage per layer, one panel per architecture (thesis Figs. 3.1, 3.3).

    ``panels[panel][layer][key]`` is a (mean, std) fraction; ``series`` lists the bars of a layer as
    ``(key, legend label)``, e.g. ``[("shared_of_add", "+"), ("shared_of_mul", "*")]``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = [max(3.0, 0.8 * len(layers) + 1.2) for layers in panels.values()]
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths), 2.9), squeeze=False, width_ratios=widths)
    width = 0.8 / len(series)
    for ax, (panel, sharing) in zip(axes[0], panels.items(), strict=True):
        layers = list(sharing)
        positions = np.arange(len(layers))
        for index, (key, label) in enumerate(series):
            offset = (index - (len(series) - 1) / 2) * width
            means = [100 * sharing[layer][key][0] for layer in layers]
            stds = [100 * sharing[layer][key][1] for layer in layers]
            ax.bar(positions + offset, means, width=width, yerr=stds, capsize=2, label=label)
        ax.set_xticks(list(positions), layers, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_title(panel, fontsize=9)
        ax.legend(ncol=len(series), loc="upper center", fontsize=8)
    axes[0][0].set_ylabel("shared weights [%]")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
