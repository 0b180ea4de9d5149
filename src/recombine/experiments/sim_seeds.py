"""SIM learning dynamics over seeds: reproductions ``sim-linear`` and ``sim-mlp`` (CATALOG §1.14, R-SIM).

SIM seed (reviews and author answers; the paper body is not in the seeds). The settings are those of
:func:`recombine.experiments.sim_linear.default_settings` (the catalog's examples: d=64, mu=(1, 2),
sigma=0.05 for the linear models; d=16, mu=(1, 2, 3, 4), sigma=0.5 for the ReLU MLP). Every seed draws a
fresh fixed sample (:func:`recombine.tasks.sim.build_sim`) and a fresh small initialisation, and trains by
full-batch gradient descent (:mod:`recombine.train.full_batch_dynamics`). Per (setting, seed) we measure,
at the OOD test probe ``sum_p mu_p e_p``:

- **learning order** ("concept signal determines the order of concept learning"): the time
  ``t_p`` at which the output's concept-``p`` coordinate first reaches ``fraction`` of its target
  (:func:`recombine.probes.concept_trajectories.concept_learning_times`); the order *follows mu_p* when
  ``t_p`` is strictly decreasing in ``mu_p``. For the one-layer model gradient flow predicts
  ``t_p = -ln(1 - fraction) / a_p`` with ``a_p = mu_p^2 / K + sigma_p^2`` (from ``W0 ~ 0``; CATALOG §1.14);
- **transient memorization**: the largest rebound of the probe loss above its running minimum
  (:func:`recombine.probes.concept_trajectories.largest_rebound`), relative to the probe loss at ``t = 0``.
  The curve is called *non-monotonic* when this exceeds ``rebound_tolerance``; the same test on the
  training loss says whether full-batch GD kept it monotonic;
- **swing-by**: the largest distance of the test-probe output from the straight segment between its
  start and its target, relative to the target's norm (0 for a straight path), and the closest approach
  to the centre of the strongest concept's training cluster (``mu_max e_max``);
- for the one-layer linear model, the gap between the trained test-probe output and the closed-form
  gradient-flow output ``W(t) p`` (:func:`recombine.train.gradient_flow.linear_gradient_flow`).

:func:`run_sim_seeds` writes ``report.md``, ``results.json`` and per setting ``sim_<setting>_seed<k>.png``
(the four panels of :func:`recombine.probes.concept_trajectories.save_dynamics_figure` for the first seed),
``sim_<setting>_seeds.png`` (trajectories, losses and learning times of every seed) and, for ``linear``,
``sim_linear_closed_form.png`` (trained and closed-form curves side by side).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from recombine.errors import UserError, choices_hint
from recombine.experiments.progress import trial_done
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.experiments.sim_linear import SIMSetting, default_settings
from recombine.models.dynamics_models import build_dynamics_model
from recombine.probes.concept_trajectories import (
    concept_learning_times,
    largest_rebound,
    save_dynamics_figure,
)
from recombine.tasks.sim import SIMData, build_sim
from recombine.train.full_batch_dynamics import DynamicsTrace, train_full_batch
from recombine.train.gradient_flow import linear_gradient_flow

SIM_SETTING_NAMES = tuple(s.name for s in default_settings())


@dataclass
class SIMSeedsConfig:
    settings: list[str] = field(default_factory=lambda: ["linear", "symmetric_linear"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    steps: int = 0  # gradient steps; 0 = each setting's own (linear models 4000, ReLU MLP 12000)
    n_records: int = 400  # log-spaced records of the trace (the resolution of the learning times)
    fraction: float = 0.5  # a concept is learnt when the test-probe output reaches this share of its target
    rebound_tolerance: float = 1e-3  # a rebound above this share of the initial loss = non-monotonic
    threads: int = 1

    def __post_init__(self) -> None:
        for name in self.settings:
            if name not in SIM_SETTING_NAMES:
                raise UserError(f"unknown SIM setting {name!r}; {choices_hint(name, SIM_SETTING_NAMES)}")
        if not self.settings or not self.seeds:
            raise UserError("need at least one SIM setting and one seed")
        if self.steps < 0:
            raise UserError(f"steps must be >= 0 (0 = the setting's own), got {self.steps}")
        if not 0.0 < self.fraction < 1.0:
            raise UserError(f"fraction must be in (0, 1), got {self.fraction}")
        if self.rebound_tolerance < 0:
            raise UserError(f"rebound_tolerance must be >= 0, got {self.rebound_tolerance}")

    def setting(self, name: str) -> SIMSetting:
        setting = {s.name: s for s in default_settings()}[name]
        steps = self.steps or setting.train.steps
        setting.train = dataclasses.replace(
            setting.train, steps=steps, n_records=self.n_records, jacobians=False
        )
        return setting


@dataclass
class SIMSeedRun:
    """One seed of one setting: the numbers of the module docstring."""

    setting: str
    seed: int
    mu: list[float]
    learning_times: list[float]  # per concept; nan when never reached
    predicted_times: list[float]  # one-layer gradient flow from W0 = 0: -ln(1 - fraction) / a_p
    order_follows_mu: bool
    train_loss_rebound: float  # relative to the training loss at t = 0
    probe_loss_rebound: float  # test probe, relative to its loss at t = 0
    train_loss_monotonic: bool
    probe_loss_non_monotonic: bool
    probe_loss_min_time: float  # when the test-probe loss is lowest before its largest rebound
    swing_by_detour: float  # max distance from the straight start-target segment / |target|
    closest_to_strong_cluster: float  # min distance of the test-probe output to mu_max e_max
    final_train_loss: float
    final_probe_loss: float
    closed_form_gap: float | None  # linear only: max over records of |f_GD(p) - W_flow(t) p|
    seconds: float


def learning_order_follows(times: np.ndarray, mu: list[float]) -> bool:
    """Whether the learning times strictly decrease as ``mu_p`` increases (nan = never learnt = False)."""
    order = np.argsort(mu, kind="stable")
    ordered = np.asarray(times, dtype=np.float64)[order]
    return bool(np.all(np.isfinite(ordered)) and np.all(np.diff(ordered) < 0))


def path_detour(path: np.ndarray, target: np.ndarray) -> float:
    """``max_t dist(path_t, segment[path_0, target]) / |target|``: 0 for a path along the straight line."""
    start = path[0]
    direction = target - start
    length2 = float(direction @ direction)
    share = np.clip((path - start) @ direction / max(length2, 1e-300), 0.0, 1.0)
    nearest = start + share[:, None] * direction
    return float(np.linalg.norm(path - nearest, axis=1).max() / np.linalg.norm(target))


def rebound_minimum_time(values: np.ndarray, times: np.ndarray) -> float:
    """The time of the running minimum from which the largest rebound climbs (``times[0]`` if none)."""
    values = np.asarray(values, dtype=np.float64)
    rise = values - np.minimum.accumulate(values)
    peak = int(np.argmax(rise))
    return float(times[int(np.argmin(values[: peak + 1]))])


def train_setting(setting: SIMSetting, seed: int) -> tuple[SIMData, DynamicsTrace, np.ndarray | None]:
    """Train one seed; returns the data, the trace and (linear only) the closed-form ``W(t)`` per record."""
    data = build_sim(setting.task, seed)
    model = build_dynamics_model(setting.model, setting.task.dim, seed)
    initial = model.end_to_end().detach().double().numpy().copy() if setting.model.kind == "linear" else None
    trace = train_full_batch(
        model,
        data.inputs,
        data.targets,
        data.probe_points,
        data.probe_points,
        setting.train,
        data.probe_names,
    )
    flow = None
    if initial is not None:
        flow = linear_gradient_flow(data.inputs, data.targets, initial, trace.times)
    return data, trace, flow


def measure(
    config: SIMSeedsConfig,
    setting: SIMSetting,
    seed: int,
    data: SIMData,
    trace: DynamicsTrace,
    flow: np.ndarray | None,
) -> SIMSeedRun:
    test = data.test_probe
    mu = list(setting.task.mu)
    times = concept_learning_times(trace, test, len(mu), config.fraction)
    predicted = -math.log(1.0 - config.fraction) / data.gradient_flow_rates()
    probe_loss = trace.probe_loss[:, test]
    train_rebound = largest_rebound(trace.train_loss) / trace.train_loss[0]
    probe_rebound = largest_rebound(probe_loss) / probe_loss[0]
    strongest = int(np.argmax(mu))
    strong_centre = np.zeros(trace.probe_targets.shape[1])
    strong_centre[strongest] = mu[strongest]
    outputs = trace.probe_outputs[:, test]
    gap = None
    if flow is not None:
        flow_outputs = flow @ trace.probe_points[test]
        gap = float(np.abs(outputs - flow_outputs).max())
    return SIMSeedRun(
        setting=setting.name,
        seed=seed,
        mu=mu,
        learning_times=[float(t) for t in times],
        predicted_times=[float(t) for t in predicted],
        order_follows_mu=learning_order_follows(times, mu),
        train_loss_rebound=float(train_rebound),
        probe_loss_rebound=float(probe_rebound),
        train_loss_monotonic=bool(train_rebound <= config.rebound_tolerance),
        probe_loss_non_monotonic=bool(probe_rebound > config.rebound_tolerance),
        probe_loss_min_time=rebound_minimum_time(probe_loss, trace.times),
        swing_by_detour=path_detour(outputs, trace.probe_targets[test]),
        closest_to_strong_cluster=float(np.linalg.norm(outputs - strong_centre, axis=1).min()),
        final_train_loss=float(trace.train_loss[-1]),
        final_probe_loss=float(probe_loss[-1]),
        closed_form_gap=gap,
        seconds=trace.seconds,
    )


@dataclass
class SIMSeedsResult:
    config: SIMSeedsConfig
    runs: list[SIMSeedRun]
    report: Path
    results: Path
    figures: list[Path]


def run_sim_seeds(out_dir: str | Path, config: SIMSeedsConfig | None = None) -> SIMSeedsResult:
    """Train every (setting, seed); write ``report.md``, ``results.json`` and the figures into ``out_dir``."""
    config = config or SIMSeedsConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.threads)
    runs: list[SIMSeedRun] = []
    figures: list[Path] = []
    total = len(config.settings) * len(config.seeds)
    for name in config.settings:
        setting = config.setting(name)
        traces: list[tuple[SIMData, DynamicsTrace]] = []
        for seed in config.seeds:
            started = time.perf_counter()
            data, trace, flow = train_setting(setting, seed)
            runs.append(measure(config, setting, seed, data, trace, flow))
            traces.append((data, trace))
            headline = f"final test-probe loss {runs[-1].final_probe_loss:.3g}"
            seconds = time.perf_counter() - started
            trial_done(len(runs), total, f"{name} seed {seed}", seconds, headline, setting.train.steps)
            if seed == config.seeds[0]:
                figures.append(_first_seed_figure(setting, seed, data, trace, out, config.fraction))
                if flow is not None:
                    figures.append(
                        save_closed_form_figure(
                            trace, flow, data.test_probe, out / "sim_linear_closed_form.png"
                        )
                    )
        figures.append(save_seeds_figure(setting, traces, [r for r in runs if r.setting == name], out))
    results_path = out / "results.json"
    results_path.write_text(
        json.dumps(
            {
                "config": dataclasses.asdict(config),
                "summary": summarize(runs),
                "runs": [dataclasses.asdict(run) for run in runs],
            },
            indent=2,
        )
    )
    report = out / "report.md"
    report.write_text(render_report(config, runs, figures))
    return SIMSeedsResult(config, runs, report, results_path, figures)


def _concept_plane(n_concepts: int) -> tuple[int, int]:
    """The weakest and the strongest concept (the plane of the swing-by)."""
    return (0, n_concepts - 1) if n_concepts > 1 else (0, 0)


def _first_seed_figure(
    setting: SIMSetting, seed: int, data: SIMData, trace: DynamicsTrace, out: Path, fraction: float
) -> Path:
    mu = list(setting.task.mu)
    return save_dynamics_figure(
        trace,
        mu,
        out / f"sim_{setting.name}_seed{seed}.png",
        data.test_probe,
        concept_axes=_concept_plane(len(mu)),
        fraction=fraction,
        title=f"SIM {setting.name}, seed {seed}: mu={mu}, sigma={list(setting.task.sigma)}, "
        f"d={setting.task.dim}",
    )


def mean_std(values: list[float]) -> list[float]:
    """``[mean, std (ddof 0), n]`` over the finite values."""
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if len(array) == 0:
        return [float("nan"), float("nan"), 0.0]
    return [float(array.mean()), float(array.std()), float(len(array))]


def summarize(runs: list[SIMSeedRun]) -> dict[str, dict[str, object]]:
    """Per setting: learning times per concept (mean, std, n), counts of seeds with each property."""
    summary: dict[str, dict[str, object]] = {}
    for name in dict.fromkeys(run.setting for run in runs):
        mine = [run for run in runs if run.setting == name]
        n_concepts = len(mine[0].mu)
        summary[name] = {
            "n_seeds": len(mine),
            "learning_times": [mean_std([r.learning_times[p] for r in mine]) for p in range(n_concepts)],
            "seeds_order_follows_mu": sum(r.order_follows_mu for r in mine),
            "seeds_train_loss_monotonic": sum(r.train_loss_monotonic for r in mine),
            "seeds_probe_loss_non_monotonic": sum(r.probe_loss_non_monotonic for r in mine),
            "probe_loss_rebound": mean_std([r.probe_loss_rebound for r in mine]),
            "swing_by_detour": mean_std([r.swing_by_detour for r in mine]),
            "closest_to_strong_cluster": mean_std([r.closest_to_strong_cluster for r in mine]),
            "final_train_loss": mean_std([r.final_train_loss for r in mine]),
            "final_probe_loss": mean_std([r.final_probe_loss for r in mine]),
            "closed_form_gap_max": max(
                (r.closed_form_gap for r in mine if r.closed_form_gap is not None), default=None
            ),
        }
    return summary


def _fmt(stat: list[float], digits: int = 3) -> str:
    """``mean ± std``; a std below 1e-9 of the mean (round-off between equal values) is shown as 0."""
    std = 0.0 if stat[1] <= 1e-9 * abs(stat[0]) else stat[1]
    return f"{stat[0]:.{digits}g} ± {std:.2g}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def render_report(config: SIMSeedsConfig, runs: list[SIMSeedRun], figures: list[Path]) -> str:
    summary = summarize(runs)
    lines = [
        "# SIM learning dynamics over seeds (SIM seed; CATALOG §1.14, R-SIM)",
        "",
        f"Seeds {', '.join(map(str, config.seeds))} (each: a fresh fixed sample and a fresh small init); "
        f"full-batch GD, float32, {config.threads} thread(s). A concept is learnt when the test-probe output "
        f"reaches {config.fraction:.0%} of its target (times on the log-spaced record grid); a loss curve "
        f"is non-monotonic when it climbs back more than {config.rebound_tolerance:g} x its initial value "
        "above its running minimum.",
        "",
    ]
    for name in config.settings:
        setting = config.setting(name)
        stats = summary[name]
        mine = [run for run in runs if run.setting == name]
        n = len(mine)
        task, model, train = setting.task, setting.model, setting.train
        lines += [
            f"## {name}",
            "",
            f"Data: d={task.dim}, mu={list(task.mu)}, sigma={list(task.sigma)} (rest {task.sigma_rest}), "
            f"{task.n_per_cluster} per cluster. Model: {model.kind}, init {model.init_scale}"
            + (f", width {model.width or task.dim}, depth {model.depth}" if model.kind == "relu_mlp" else "")
            + f". GD: {train.steps} steps, lr {train.lr} (gradient-flow time t = steps x lr).",
            "",
            "| concept | mu_p | time to learn (mean ± std) | closed-form gradient flow -ln(1-f)/a_p |",
            "|---|---|---|---|",
        ]
        times = stats["learning_times"]
        assert isinstance(times, list)
        for p, mu in enumerate(mine[0].mu):
            predicted = f"{mine[0].predicted_times[p]:.3g}" if model.kind == "linear" else "(one-layer only)"
            lines.append(f"| {p} | {mu:g} | {_fmt(times[p])} | {predicted} |")
        lines += [
            "",
            "- Learning order follows mu_p (larger signal learnt first): "
            f"**{stats['seeds_order_follows_mu']}/{n} seeds**.",
            f"- Training loss monotonic: **{stats['seeds_train_loss_monotonic']}/{n}**; test-probe loss "
            f"non-monotonic (transient memorization): **{stats['seeds_probe_loss_non_monotonic']}/{n}**.",
            "- Swing-by detour (max distance from the straight path / |target|): "
            f"{_fmt(stats['swing_by_detour'])}; "
            f"closest approach to the strongest cluster centre: {_fmt(stats['closest_to_strong_cluster'])}.",
            f"- Final training loss {_fmt(stats['final_train_loss'])}; final test-probe loss "
            f"{_fmt(stats['final_probe_loss'])}.",
        ]
        if stats["closed_form_gap_max"] is not None:
            lines.append(
                f"- Largest gap between the trained and the closed-form gradient-flow test-probe output: "
                f"{stats['closed_form_gap_max']:.3g} (float32 GD against the exact flow)."
            )
        lines += [
            "",
            "| seed | times to learn | order follows mu | train-loss rebound | probe-loss rebound "
            "| probe loss non-monotonic | rebound starts at t | detour | seconds |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in mine:
            lines.append(
                f"| {r.seed} | {', '.join(f'{t:.3g}' for t in r.learning_times)} "
                f"| {_yes(r.order_follows_mu)} | {r.train_loss_rebound:.2g} | {r.probe_loss_rebound:.3g} "
                f"| {_yes(r.probe_loss_non_monotonic)} | "
                f"{r.probe_loss_min_time:.3g} | {r.swing_by_detour:.3g} | {r.seconds:.1f} |"
            )
        lines.append("")
        lines += [f"![{path.stem}]({path.name})" for path in figures if path.name.startswith(f"sim_{name}_")]
        lines.append("")
    return "\n".join(lines)


def save_seeds_figure(
    setting: SIMSetting, traces: list[tuple[SIMData, DynamicsTrace]], runs: list[SIMSeedRun], out: Path
) -> Path:
    """Every seed: test-probe trajectory in the (weakest, strongest) concept plane, train and test-probe
    losses against time (log-log), learning time against mu_p."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mu = list(setting.task.mu)
    a, b = _concept_plane(len(mu))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    colours = plt.get_cmap("tab10")
    for k, ((data, trace), run) in enumerate(zip(traces, runs, strict=True)):
        test = data.test_probe
        path = trace.probe_outputs[:, test][:, [a, b]]
        axes[0].plot(path[:, 0], path[:, 1], color=colours(k % 10), lw=1.2, label=f"seed {run.seed}")
        t = np.maximum(trace.times, trace.times[1] / 2)
        axes[1].plot(
            t, trace.probe_loss[:, test], color=colours(k % 10), lw=1.5, label=f"test probe, seed {run.seed}"
        )
        axes[1].plot(t, trace.train_loss, color=colours(k % 10), lw=0.8, ls="--")
        axes[2].plot(mu, run.learning_times, "o-", color=colours(k % 10), alpha=0.7)
    target = np.array([mu[a], mu[b]])
    axes[0].scatter(*target, marker="*", s=160, color="tab:red", edgecolor="k", zorder=3, label="target")
    axes[0].scatter(0, mu[b], marker="s", s=60, color="0.4", zorder=3, label=f"cluster {b} centre")
    axes[0].scatter(mu[a], 0, marker="s", s=60, color="0.7", zorder=3, label=f"cluster {a} centre")
    axes[0].set_xlabel(f"output, concept {a} (mu={mu[a]:g})")
    axes[0].set_ylabel(f"output, concept {b} (mu={mu[b]:g})")
    axes[0].set_title("test-probe output over training (swing-by)")
    axes[0].set_aspect("equal", adjustable="datalim")
    axes[0].legend(fontsize=7)
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("time (steps x lr)")
    axes[1].set_ylabel("loss")
    axes[1].set_title("test-probe loss (solid) and training loss (dashed)")
    axes[1].legend(fontsize=7)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("signal mu_p")
    axes[2].set_ylabel("time to learn concept p")
    axes[2].set_title("learning order, every seed")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"SIM {setting.name}: {len(runs)} seeds")
    fig.tight_layout()
    path = out / f"sim_{setting.name}_seeds.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def save_closed_form_figure(trace: DynamicsTrace, flow: np.ndarray, test: int, path: Path) -> Path:
    """One-layer linear model: the trained test-probe output (per concept) and probe loss beside the
    closed-form gradient-flow ones ``W(t) p``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    point, target = trace.probe_points[test], trace.probe_targets[test]
    flow_outputs = flow @ point
    concepts = np.flatnonzero(target)
    t = np.maximum(trace.times, trace.times[1] / 2)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for p in concepts:
        line = axes[0].plot(t, trace.probe_outputs[:, test, p], lw=2, label=f"GD, concept {p}")[0]
        axes[0].plot(
            t, flow_outputs[:, p], color=line.get_color(), ls="--", lw=1.5, label=f"closed form, concept {p}"
        )
        axes[0].axhline(target[p], color=line.get_color(), lw=0.5)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("time (steps x lr)")
    axes[0].set_ylabel("test-probe output")
    axes[0].set_title("test-probe output per concept")
    axes[1].plot(t, trace.probe_loss[:, test], lw=2, label="GD")
    axes[1].plot(t, 0.5 * ((flow_outputs - target) ** 2).sum(-1), ls="--", label="closed form")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("time (steps x lr)")
    axes[1].set_ylabel("test-probe loss")
    axes[1].set_title("test-probe loss")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("one-layer linear model: trained (solid) vs closed-form gradient flow (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


SIM_LINEAR = ScriptedReproduction(
    "sim-linear",
    "SIM with the one-layer and symmetric two-layer linear models: learning order by mu_p, swing-by, "
    "closed-form gradient flow",
    "SIM seed (reviews and answers), CATALOG §1.14",
    SIMSeedsConfig,
    run_sim_seeds,
    defaults={"settings": ["linear", "symmetric_linear"]},
    quick={"seeds": [0, 1], "steps": 400, "n_records": 60},
)
SIM_MLP = ScriptedReproduction(
    "sim-mlp",
    "SIM with a deep ReLU MLP: learning order by mu_p, swing-by, non-monotonic probe loss (full-batch GD)",
    "SIM seed (reviews and answers), CATALOG §1.14",
    SIMSeedsConfig,
    run_sim_seeds,
    defaults={"settings": ["relu_mlp"]},
    quick={"seeds": [0, 1], "steps": 600, "n_records": 60},
)
