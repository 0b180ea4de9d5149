"""The GDRC 2-D toy: decision boundaries per training step and across seeds (GDRC §6, Figs. 5-6, App. C).

Data: :mod:`recombine.tasks.gdrc_toy` (train on ``(Y1, Y2) in {(0,0), (0,1), (1,0)}``, test ``(1, 1)``, target
``Y1``). Model (App. C): a fully connected network with two inputs, three hidden layers of eight ReLU units
and two outputs (the scores of ``Y1 = 0`` and ``Y1 = 1``; softmax cross-entropy, our choice: App. C names no
loss and defers to the TensorFlow Playground). Plain SGD, mini-batches of 10, learning rate 0.1, 1024 steps
(App. C); the training sample is visited in a fresh random order every epoch. PyTorch's default
initialisation, seeded per run.

A compositional solution predicts ``Y1`` from ``X1`` alone: the boundary is the vertical line ``X1 = 0`` and
the whole test square ``[0, 1]^2`` is ``Y1 = 1``. GDRC's claim (Fig. 5): the first steps use ``X2`` (in
training ``X2 > 0`` implies ``Y1 = 0``), pushing the boundary into the upper-right square, and later steps do
not undo it, for most seeds (Fig. 6). We measure, at every snapshot step, the probability ``P(Y1 = 1)`` on a
grid, and per seed the final training accuracy, the test accuracy on ``(1, 1)`` samples and the fraction
of the test square classified ``Y1 = 1`` (1 for a compositional model).

:func:`run_gdrc_toy` writes ``report.md``, ``results.json``, ``gdrc_toy_steps.png`` (Fig. 5: one seed over
steps) and ``gdrc_toy_seeds.png`` (Fig. 6: the final boundary of every seed).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from recombine.errors import UserError
from recombine.experiments.progress import training_bar, trial_done
from recombine.tasks.gdrc_toy import GDRCToyConfig, GDRCToyData, build_gdrc_toy


@dataclass
class GDRCToyRunConfig:
    task: GDRCToyConfig = field(default_factory=GDRCToyConfig)
    hidden: int = 8  # App. C: eight units per hidden layer
    hidden_layers: int = 3  # App. C: three hidden ReLU layers
    steps: int = 1024
    batch_size: int = 10
    lr: float = 0.1
    snapshot_steps: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 8, 16, 64, 256, 1024])
    seeds: list[int] = field(default_factory=lambda: list(range(8)))
    grid_size: int = 81  # decision-boundary grid per axis
    grid_extent: float = 1.2  # grid on [-extent, extent]^2 (the data fill [-1, 1]^2)
    threads: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0 or self.hidden < 1 or self.hidden_layers < 1:
            raise UserError("steps, batch_size, hidden and hidden_layers must be >= 1 and lr > 0")
        if not self.seeds:
            raise UserError("need at least one seed")
        if any(s < 0 for s in self.snapshot_steps):
            raise UserError(f"snapshot_steps must be >= 0, got {self.snapshot_steps}")
        if self.grid_size < 2 or self.grid_extent < 1.0:
            raise UserError("grid_size must be >= 2 and grid_extent >= 1 (the data fill [-1, 1]^2)")

    @property
    def snapshots(self) -> list[int]:
        """The snapshot steps up to ``steps``, sorted, always ending with the last step."""
        return sorted({*(s for s in self.snapshot_steps if s <= self.steps), self.steps})


def toy_mlp(hidden: int, hidden_layers: int) -> nn.Sequential:
    """``2 -> hidden -> ... -> hidden -> 2`` with ReLU after every hidden layer (App. C)."""
    layers: list[nn.Module] = []
    width = 2
    for _ in range(hidden_layers):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, 2))
    return nn.Sequential(*layers)


def decision_grid(size: int, extent: float) -> tuple[np.ndarray, np.ndarray]:
    """Axis ticks ``[size]`` and the grid points ``[size * size, 2]`` = (X1, X2), X2 varying slowest."""
    ticks = np.linspace(-extent, extent, size)
    x1, x2 = np.meshgrid(ticks, ticks)
    return ticks, np.stack([x1.ravel(), x2.ravel()], axis=1)


@torch.no_grad()
def positive_probability(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """``P(Y1 = 1 | x)`` under the model's softmax."""
    return torch.softmax(model(torch.as_tensor(x, dtype=torch.float32)), -1)[:, 1].numpy()


@dataclass
class ToyRun:
    seed: int
    snapshot_steps: list[int]
    grid_probability: np.ndarray  # [S, G, G]: P(Y1 = 1) on the grid (row = X2, column = X1)
    test_square_positive: list[float]  # [S] fraction of grid points in [0, 1]^2 classified Y1 = 1
    train_accuracy: float  # final
    test_accuracy: float  # final, on (1, 1) samples
    seconds: float


def train_toy(config: GDRCToyRunConfig, seed: int, data: GDRCToyData | None = None) -> ToyRun:
    """Train the App. C network with ``seed`` and snapshot its decision function."""
    start = time.perf_counter()
    torch.set_num_threads(config.threads)
    data = data or build_gdrc_toy(config.task, seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = toy_mlp(config.hidden, config.hidden_layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    x = torch.as_tensor(data.train_x, dtype=torch.float32)
    y = torch.as_tensor(data.train_targets)
    ticks, grid = decision_grid(config.grid_size, config.grid_extent)
    in_test_square = np.all((grid >= 0.0) & (grid <= 1.0), axis=1)
    order_rng = np.random.default_rng([seed, 1])
    snapshots = config.snapshots
    probabilities: list[np.ndarray] = []
    order = np.empty(0, dtype=np.int64)
    with training_bar(config.steps, f"seed {seed}") as bar:
        for step in range(config.steps + 1):
            if step in snapshots:
                probabilities.append(positive_probability(model, grid).reshape(len(ticks), len(ticks)))
            if step == config.steps:
                break
            if len(order) < config.batch_size:
                order = np.concatenate([order, order_rng.permutation(len(x))])
            batch, order = torch.as_tensor(order[: config.batch_size]), order[config.batch_size :]
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bar.update()
    grid_probability = np.stack(probabilities)
    return ToyRun(
        seed=seed,
        snapshot_steps=snapshots,
        grid_probability=grid_probability,
        test_square_positive=[float((p.ravel()[in_test_square] > 0.5).mean()) for p in grid_probability],
        train_accuracy=float(
            ((positive_probability(model, data.train_x) > 0.5) == data.train_targets).mean()
        ),
        test_accuracy=float(((positive_probability(model, data.test_x) > 0.5) == data.test_targets).mean()),
        seconds=time.perf_counter() - start,
    )


@dataclass
class GDRCToyResult:
    config: GDRCToyRunConfig
    runs: list[ToyRun]
    summary: dict[str, list[float]]  # metric -> [mean, std, n] over seeds
    report: Path
    results: Path
    figures: list[Path]


def _mean_std(values: list[float]) -> list[float]:
    array = np.asarray(values, dtype=np.float64)
    return [float(array.mean()), float(array.std()), float(len(array))]


def run_gdrc_toy(out_dir: str | Path, config: GDRCToyRunConfig | None = None) -> GDRCToyResult:
    """Train every seed; write ``report.md``, ``results.json`` and the two figures."""
    config = config or GDRCToyRunConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[ToyRun] = []
    for seed in config.seeds:
        started = time.perf_counter()
        runs.append(train_toy(config, seed))
        headline = f"test accuracy on (1, 1) {runs[-1].test_accuracy:.3f}"
        seconds = time.perf_counter() - started
        trial_done(len(runs), len(config.seeds), f"seed {seed}", seconds, headline, config.steps)
    summary = {
        "train_accuracy": _mean_std([r.train_accuracy for r in runs]),
        "test_accuracy": _mean_std([r.test_accuracy for r in runs]),
        "test_square_positive": _mean_std([r.test_square_positive[-1] for r in runs]),
        "compositional_seeds": _mean_std([float(r.test_accuracy == 1.0) for r in runs]),
    }
    first = build_gdrc_toy(config.task, config.seeds[0])
    figures = [
        save_steps_figure(runs[0], first, config, out / "gdrc_toy_steps.png"),
        save_seeds_figure(runs, config, out / "gdrc_toy_seeds.png"),
    ]
    results_path = out / "results.json"
    serialisable = [{k: v for k, v in asdict(r).items() if k != "grid_probability"} for r in runs]
    results_path.write_text(
        json.dumps({"config": asdict(config), "summary": summary, "runs": serialisable}, indent=2)
    )
    report = out / "report.md"
    report.write_text(render_report(config, runs, summary, [f.name for f in figures]))
    return GDRCToyResult(config, runs, summary, report, results_path, figures)


def render_report(
    config: GDRCToyRunConfig, runs: list[ToyRun], summary: dict[str, list[float]], figures: list[str]
) -> str:
    def fmt(stat: list[float]) -> str:
        return f"{stat[0]:.3f} ± {stat[1]:.3f}"

    architecture = "-".join(["2", *[str(config.hidden)] * config.hidden_layers, "2"])
    lines = [
        "# GDRC 2-D toy (GDRC §6, Figs. 5-6)",
        "",
        f"Train on (Y1, Y2) in {{(0,0), (0,1), (1,0)}} ({config.task.n_per_combination} each), "
        f"test on (1, 1) ({config.task.n_test}); target Y1; X_i = Y_i - U[0, 1]. MLP {architecture} "
        f"ReLU, SGD lr {config.lr}, batch {config.batch_size}, {config.steps} steps; {len(runs)} seeds, "
        "mean ± std.",
        "",
        "A compositional model has test accuracy 1 and classifies the whole test square [0, 1]^2 as Y1 = 1.",
        "",
        "| seed | final train acc | test acc on (1, 1) | test square classified Y1 = 1 |",
        "|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.seed} | {run.train_accuracy:.3f} | {run.test_accuracy:.3f} | "
            f"{run.test_square_positive[-1]:.3f} |"
        )
    lines.append(
        f"| **mean ± std** | {fmt(summary['train_accuracy'])} | {fmt(summary['test_accuracy'])} | "
        f"{fmt(summary['test_square_positive'])} |"
    )
    fully = round(summary["compositional_seeds"][0] * len(runs))
    lines += [
        "",
        f"Seeds with test accuracy exactly 1 (compositional on the test samples): {fully}/{len(runs)}.",
        "",
        f"Seed {runs[0].seed}, fraction of the test square classified Y1 = 1 at each snapshot step:",
        "",
        "| step | " + " | ".join(str(s) for s in runs[0].snapshot_steps) + " |",
        "|---" * (len(runs[0].snapshot_steps) + 1) + "|",
        "| positive | " + " | ".join(f"{v:.2f}" for v in runs[0].test_square_positive) + " |",
        "",
        *[f"![{name}]({name})" for name in figures],
        "",
    ]
    return "\n".join(lines)


def _draw_boundary(
    ax: object, probability: np.ndarray, config: GDRCToyRunConfig, data: GDRCToyData | None
) -> None:
    e = config.grid_extent
    ax.imshow(probability, origin="lower", extent=(-e, e, -e, e), cmap="RdBu", vmin=0, vmax=1, alpha=0.7)
    ticks = np.linspace(-e, e, config.grid_size)
    ax.contour(ticks, ticks, probability, levels=[0.5], colors="k", linewidths=1.2)
    ax.plot([0, 1, 1, 0, 0], [0, 0, 1, 1, 0], "k--", lw=1)  # the held-out (1, 1) square
    if data is not None:
        positive = data.train_targets == 1
        ax.scatter(*data.train_x[positive].T, s=5, marker="o", color="tab:blue", edgecolor="none")
        ax.scatter(*data.train_x[~positive].T, s=5, marker="^", color="tab:orange", edgecolor="none")
    ax.set_xticks([-1, 0, 1])
    ax.set_yticks([-1, 0, 1])


def _figure(n_panels: int) -> tuple[object, np.ndarray]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(n_panels, 5)
    rows = -(-n_panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.7 * rows), squeeze=False)
    for ax in axes.ravel()[n_panels:]:
        ax.axis("off")
    return fig, axes.ravel()


def save_steps_figure(run: ToyRun, data: GDRCToyData, config: GDRCToyRunConfig, path: Path) -> Path:
    """Fig. 5: the decision function of one seed at every snapshot step (blue = Y1 = 1)."""
    import matplotlib.pyplot as plt

    fig, axes = _figure(len(run.snapshot_steps))
    for ax, step, probability in zip(axes, run.snapshot_steps, run.grid_probability, strict=False):
        _draw_boundary(ax, probability, config, data)
        ax.set_title(f"step {step}", fontsize=9)
    fig.suptitle(f"GDRC toy, seed {run.seed}: P(Y1 = 1) over training (x: X1, y: X2; dashed: test square)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def save_seeds_figure(runs: list[ToyRun], config: GDRCToyRunConfig, path: Path) -> Path:
    """Fig. 6: the final decision function of every seed."""
    import matplotlib.pyplot as plt

    fig, axes = _figure(len(runs))
    for ax, run in zip(axes, runs, strict=False):
        _draw_boundary(ax, run.grid_probability[-1], config, None)
        ax.set_title(f"seed {run.seed}: test acc {run.test_accuracy:.2f}", fontsize=9)
    fig.suptitle(f"GDRC toy: decision boundaries after {config.steps} steps (dashed: test square)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
