"""SIM with a diffusion model: concept-space dynamics of a small DDPM (SIM seed §5, Fig. 6; CATALOG §1.14).

The SIM seed checks its linear-model predictions on a text-conditioned diffusion model trained on synthetic
concept images: samples are mapped to concept space by a classifier, and the paper reports (author answers)
that "the model's output initially moves toward the training distribution before shifting toward the
generalization direction" (swing-by / transient memorization, Fig. 6a), a loss that decays exponentially at
the end (Fig. 6c), and a learning order set by the concept signal ("difference of class mean pixel values").

Pipeline per seed, all CPU-sized:

1. data: :mod:`recombine.tasks.concept_images`, a fixed sample of every training combination (the
   all-ones combination, the SIM test point, held out); concept signals ``mu_p`` measured as the distance
   between class-mean images;
2. instrument: :mod:`recombine.probes.concept_classifier`, trained on the full grid (a separate draw);
3. model: :mod:`recombine.models.concept_diffusion`, trained *full batch* (SIM seed: "we first sample a
   number of training samples and fix them, and then do full-batch training"; the ``t`` and noise draws
   stay random), Adam;
4. at log-spaced checkpoints: ``samples_per_combination`` samples of every combination with the same
   sampling noise at every checkpoint, mapped to concept space; the mean concept vector per combination is
   the "probe output" of the SIM analysis, its loss ``(1/2)||mean - target||^2`` the probe loss; the
   training loss is the denoising loss on a fixed draw of ``(t, noise)`` over the training set.

The trace is a :class:`~recombine.train.full_batch_dynamics.DynamicsTrace` (time = step x lr), so the
figures and numbers are those of the linear models (:mod:`recombine.probes.concept_trajectories`).
:func:`run_sim_diffusion` writes ``report.md``, ``results.json``, ``sim_diffusion_seed<k>.png`` per seed,
``sim_diffusion_seeds.png`` (all seeds) and ``sim_diffusion_samples.png`` (samples of the first seed).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from recombine.errors import UserError
from recombine.experiments.progress import training_bar, trial_done
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.models.concept_diffusion import (
    ConceptDenoiser,
    ConceptDiffusionConfig,
    denoising_loss,
    q_sample,
    sample,
)
from recombine.probes.concept_classifier import (
    ConceptClassifierConfig,
    concept_accuracy,
    concept_probabilities,
    train_concept_classifier,
)
from recombine.probes.concept_trajectories import (
    concept_learning_times,
    first_record_staying,
    largest_rebound,
    save_dynamics_figure,
)
from recombine.tasks.concept_images import ConceptImageConfig, build_concept_images, concept_signals
from recombine.train.full_batch_dynamics import DynamicsTrace

#: the classifier's training draw is seeded apart from the diffusion model's data
CLASSIFIER_SEED_OFFSET = 10_000
#: a probe-loss rebound below this is read as monotonic (sampling noise of the concept readout)
REBOUND_TOLERANCE = 0.005
#: the test-probe path is read from the checkpoint from which the samples of the training combinations read
#: right at least this often on average: before it they are noise or blobs, whose readout jumps around
FORMED_ACCURACY = 0.5
#: a swing smaller than this (in concept units) has no direction worth reporting
SWING_TOLERANCE = 0.1


@dataclass
class SIMDiffusionRunConfig:
    task: ConceptImageConfig = field(default_factory=lambda: ConceptImageConfig(n_per_combination=48))
    # classifier-free guidance (the usual way text-conditioned diffusion models are trained and sampled):
    # without it the held-out combination collapses onto a training combination (docs: sim-diffusion.md)
    model: ConceptDiffusionConfig = field(
        default_factory=lambda: ConceptDiffusionConfig(condition_dropout=0.1)
    )
    classifier: ConceptClassifierConfig = field(default_factory=ConceptClassifierConfig)
    classifier_images_per_combination: int = 128
    steps: int = 8000
    lr: float = 2e-3
    # log-spaced from step 1 (duplicates merged) plus step 0; at 8000 steps: 37 records, 8 from step 1500 on
    n_checkpoints: int = 40
    samples_per_combination: int = 32
    guidance: float = 2.0  # classifier-free guidance weight (needs model.condition_dropout > 0; 0 = none)
    loss_repeats: int = 4  # the recorded training loss averages this many fixed (t, noise) draws per image
    # a concept is "learnt" at a probe from when its readout reaches this share of the target for good
    fraction: float = 0.75
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    threads: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1 or self.lr <= 0 or self.n_checkpoints < 2 or self.samples_per_combination < 1:
            raise UserError("steps, samples_per_combination must be >= 1, n_checkpoints >= 2 and lr > 0")
        if self.loss_repeats < 1 or self.classifier_images_per_combination < 1:
            raise UserError("loss_repeats and classifier_images_per_combination must be >= 1")
        if not 0.5 < self.fraction <= 1.0:
            raise UserError(
                f"fraction must be in (0.5, 1] (the readout starts near 1/2), got {self.fraction}"
            )
        if not self.seeds:
            raise UserError("need at least one seed")
        if self.guidance > 0 and self.model.condition_dropout <= 0:
            raise UserError(
                f"guidance={self.guidance} needs a null condition: set model.condition_dropout > 0 "
                "(or guidance=0 to sample without guidance)"
            )


@dataclass
class SIMDiffusionSeedResult:
    seed: int
    trace: DynamicsTrace
    probe_accuracy: np.ndarray  # [R, P] share of samples whose every concept reads right
    classifier_accuracy: float  # on a fresh full-grid draw
    learning_times: np.ndarray  # [s] at the test probe
    in_distribution_times: np.ndarray  # [s] concept p at the single-concept probe e_p
    formed_step: int | None  # checkpoint from which training-combination samples read right (None: never)
    test_probe_loss_rebound: float  # from formed_step on (nan if never formed)
    train_loss_rebound: float
    swing: float  # from formed_step on: largest distance of the test-probe path from the centre-target line
    swing_toward: str  # the training combination nearest the test probe at its largest swing ("-": none)
    samples: np.ndarray  # [R, P, k, 3, H, W] a few samples per checkpoint and combination, in [0, 1]


@dataclass
class SIMDiffusionResult:
    config: SIMDiffusionRunConfig
    signals: np.ndarray  # [s] mu_p
    probe_names: list[str]
    test_probe: int
    seeds: list[SIMDiffusionSeedResult]


def checkpoint_steps(steps: int, n_checkpoints: int) -> np.ndarray:
    """0, then ``n_checkpoints - 1`` log-spaced steps up to and including ``steps`` (duplicates merged)."""
    spaced = np.geomspace(1, steps, n_checkpoints - 1).round().astype(np.int64)
    return np.unique(np.concatenate([[0], spaced, [steps]]))


def path_swing(
    outputs: np.ndarray, target: np.ndarray, origin: np.ndarray | None = None, from_record: int = 0
) -> tuple[float, int]:
    """The largest distance of ``outputs[r]``, ``r >= from_record``, from the segment ``origin -> target``
    (``origin`` defaults to ``outputs[0]``), and its record ``r`` (an index into ``outputs``)."""
    start = outputs[0] if origin is None else np.asarray(origin, dtype=np.float64)
    direction = target - start
    length = float(np.linalg.norm(direction))
    if length == 0:
        distances = np.linalg.norm(outputs - start, axis=1)
    else:
        along = np.clip((outputs - start) @ direction / length**2, 0.0, 1.0)
        distances = np.linalg.norm(outputs - (start + along[:, None] * direction), axis=1)
    record = from_record + int(np.argmax(distances[from_record:]))
    return float(distances[record]), record


def first_formed_record(
    accuracy: np.ndarray, training: list[int], threshold: float = FORMED_ACCURACY
) -> int | None:
    """The first record from which the mean sample accuracy over the ``training`` combinations (columns of
    ``accuracy`` ``[R, P]``) stays at or above ``threshold`` to the last record; ``None`` if it is below
    there. "Stays", like the settled learning times: one early good checkpoint of blobs does not count."""
    return first_record_staying(accuracy[:, training].mean(1) >= threshold)


def held_out_probe_swing(
    outputs: np.ndarray, targets: np.ndarray, test: int, training: list[int], formed: int
) -> tuple[float, int, int | None]:
    """The test probe's swing from record ``formed`` on: its largest distance from the straight route from
    the centre of concept space (1/2 per concept, where noise reads) to its target, the record of that
    distance, and the training combination nearest to the output there (``None`` for a swing below
    ``SWING_TOLERANCE``, which has no direction). ``outputs`` is ``[R, P, s]``, ``targets`` ``[P, s]``."""
    centre = np.full(targets.shape[1], 0.5)
    swing, record = path_swing(outputs[:, test], targets[test], origin=centre, from_record=formed)
    if swing < SWING_TOLERANCE:
        return swing, record, None
    nearest = min(training, key=lambda j: float(np.linalg.norm(outputs[record, test] - targets[j])))
    return swing, record, nearest


def run_sim_diffusion_seed(config: SIMDiffusionRunConfig, seed: int) -> SIMDiffusionSeedResult:
    data = build_concept_images(config.task, seed)
    grid = build_concept_images(
        _with_count(config.task, config.classifier_images_per_combination),
        seed + CLASSIFIER_SEED_OFFSET,
        include_held_out=True,
    )
    classifier = train_concept_classifier(grid, config.classifier, seed)
    check = build_concept_images(config.task, seed + 2 * CLASSIFIER_SEED_OFFSET, include_held_out=True)
    classifier_accuracy = concept_accuracy(concept_probabilities(classifier, check.images), check.concepts)

    torch.manual_seed(seed)
    x0 = torch.as_tensor(data.images) * 2 - 1  # the model works in [-1, 1]
    concepts = torch.as_tensor(data.concepts, dtype=torch.float32)
    model = ConceptDenoiser(config.model, tuple(x0.shape[1:]), data.probe_masks.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed)
    targets = data.probe_masks.astype(np.float64)
    probe_concepts = torch.as_tensor(np.repeat(data.probe_masks, config.samples_per_combination, 0)).float()
    fixed_loss = _fixed_loss_draw(model, x0, config.loss_repeats, seed)

    recorded = checkpoint_steps(config.steps, config.n_checkpoints)
    train_loss, outputs, accuracy, kept = [], [], [], []
    start = time.perf_counter()
    with training_bar(config.steps, f"diffusion seed {seed}") as bar:
        for step in range(config.steps + 1):
            if step in recorded:
                train_loss.append(_recorded_loss(model, x0, concepts, fixed_loss, config.loss_repeats))
                images = sample(
                    model, probe_concepts, torch.Generator().manual_seed(seed + 1), config.guidance
                )
                images = ((images + 1) / 2).clamp(0, 1).numpy()
                readout = concept_probabilities(classifier, images).reshape(
                    len(targets), -1, targets.shape[1]
                )
                outputs.append(readout.mean(1))
                accuracy.append(
                    [
                        concept_accuracy(readout[j], np.broadcast_to(data.probe_masks[j], readout[j].shape))
                        for j in range(len(targets))
                    ]
                )
                kept.append(
                    images.reshape(len(targets), config.samples_per_combination, *images.shape[1:])[:, :4]
                )
            if step == config.steps:
                break
            loss = denoising_loss(model, x0, concepts, generator)
            if not torch.isfinite(loss):
                raise UserError(f"diffusion training diverged at step {step}; lower lr={config.lr}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bar.update()
    probe_outputs = np.stack(outputs)
    trace = DynamicsTrace(
        steps=recorded,
        times=recorded * config.lr,
        train_loss=np.array(train_loss),
        probe_outputs=probe_outputs,
        probe_loss=0.5 * ((probe_outputs - targets[None]) ** 2).sum(-1),
        probe_names=list(data.probe_names),
        probe_points=targets,
        probe_targets=targets,
        jacobians=None,
        seconds=time.perf_counter() - start,
    )
    test = data.test_probe
    s = targets.shape[1]
    single = [data.probe("".join("1" if q == p else "0" for q in range(s))) for p in range(s)]
    in_distribution = np.array(
        [concept_learning_times(trace, single[p], s, config.fraction, settled=True)[p] for p in range(s)]
    )
    training = list(data.training_combinations)
    formed = first_formed_record(np.array(accuracy), training)
    if formed is None:
        swing, swing_toward, rebound = float("nan"), "-", float("nan")
    else:
        swing, _, nearest = held_out_probe_swing(probe_outputs, targets, test, training, formed)
        swing_toward = "-" if nearest is None else data.probe_names[nearest]
        rebound = largest_rebound(trace.probe_loss[formed:, test])
    return SIMDiffusionSeedResult(
        seed=seed,
        trace=trace,
        probe_accuracy=np.array(accuracy),
        classifier_accuracy=classifier_accuracy,
        learning_times=concept_learning_times(trace, test, s, config.fraction, settled=True),
        in_distribution_times=in_distribution,
        formed_step=None if formed is None else int(recorded[formed]),
        test_probe_loss_rebound=rebound,
        train_loss_rebound=largest_rebound(trace.train_loss),
        swing=swing,
        swing_toward=swing_toward,
        samples=np.stack(kept),
    )


def run_sim_diffusion(out_dir: str | Path, config: SIMDiffusionRunConfig | None = None) -> SIMDiffusionResult:
    """Train every seed; write ``report.md``, ``results.json`` and the figures into ``out_dir``."""
    config = config or SIMDiffusionRunConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        seeds: list[SIMDiffusionSeedResult] = []
        for seed in config.seeds:
            started = time.perf_counter()
            seeds.append(run_sim_diffusion_seed(config, seed))
            headline = f"final train loss {seeds[-1].trace.train_loss[-1]:.4f}"
            seconds = time.perf_counter() - started
            trial_done(len(seeds), len(config.seeds), f"seed {seed}", seconds, headline, config.steps)
    finally:
        torch.set_num_threads(previous_threads)
    names = seeds[0].trace.probe_names
    result = SIMDiffusionResult(config, concept_signals(config.task), names, len(names) - 1, seeds)
    for run in seeds:
        save_dynamics_figure(
            run.trace,
            list(result.signals),
            out / f"sim_diffusion_seed{run.seed}.png",
            result.test_probe,
            fraction=config.fraction,
            settled=True,
            title=f"SIM diffusion, seed {run.seed}: mu = {np.round(result.signals, 2).tolist()}",
        )
    _save_seed_figure(result, out / "sim_diffusion_seeds.png")
    _save_sample_figure(result, out / "sim_diffusion_samples.png")
    (out / "results.json").write_text(json.dumps(_results_json(result), indent=2, allow_nan=True))
    (out / "report.md").write_text(_report(result))
    return result


def _with_count(task: ConceptImageConfig, n: int) -> ConceptImageConfig:
    return ConceptImageConfig(**{**asdict(task), "n_per_combination": n})


def _fixed_loss_draw(
    model: ConceptDenoiser, x0: torch.Tensor, repeats: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 2)
    t = torch.randint(1, model.config.timesteps + 1, (repeats * len(x0),), generator=generator)
    noise = torch.randn((repeats * len(x0), *x0.shape[1:]), generator=generator)
    return t, noise


@torch.no_grad()
def _recorded_loss(
    model: ConceptDenoiser,
    x0: torch.Tensor,
    concepts: torch.Tensor,
    draw: tuple[torch.Tensor, torch.Tensor],
    repeats: int,
) -> float:
    t, noise = draw
    x = x0.repeat(repeats, 1, 1, 1)
    return float(
        (model(q_sample(x, t, noise, model.abar), t, concepts.repeat(repeats, 1)) - noise).pow(2).mean()
    )


def _summary(result: SIMDiffusionResult) -> dict[str, object]:
    runs = result.seeds
    order = np.argsort(-result.signals)  # strongest signal first
    strongest = _single_name(int(order[0]), len(result.signals))
    orders = [learning_order(r.learning_times, result.signals) for r in runs]
    final_accuracy = np.array([r.probe_accuracy[-1] for r in runs])  # [seeds, P]
    return {
        "signals_mu": result.signals.tolist(),
        "seeds_learning_order_follows_mu": orders.count("follows"),
        "seeds_learning_order_tied": orders.count("tied"),
        "seeds_learning_order_reversed": orders.count("reversed"),
        "seeds_non_monotonic_test_probe_loss": int(
            sum(r.test_probe_loss_rebound > REBOUND_TOLERANCE for r in runs)
        ),
        "seeds_swing_toward_strongest_single_concept": int(sum(r.swing_toward == strongest for r in runs)),
        "seeds_swing_toward_another_combination": int(
            sum(r.swing_toward not in (strongest, "-") for r in runs)
        ),
        "final_accuracy_mean": dict(zip(result.probe_names, final_accuracy.mean(0).tolist(), strict=True)),
        "final_accuracy_std": dict(zip(result.probe_names, final_accuracy.std(0).tolist(), strict=True)),
        "seeds_formed": int(sum(r.formed_step is not None for r in runs)),
        "test_probe_loss_rebound_mean": _formed_mean([r.test_probe_loss_rebound for r in runs]),
        "train_loss_rebound_mean": float(np.mean([r.train_loss_rebound for r in runs])),
        "swing_mean": _formed_mean([r.swing for r in runs]),
    }


def learning_order(times: np.ndarray, signals: np.ndarray) -> str:
    """How the settling times at a probe order the concepts against their signals ``mu_p``: ``"follows"``
    (strictly earlier for every stronger concept; a concept never learnt counts as last), ``"tied"`` (the
    same checkpoint for two of them, otherwise in order), ``"reversed"`` (a weaker concept first) or
    ``"none"`` (the strongest concept never learnt)."""
    ordered = np.where(np.isfinite(times), times, np.inf)[np.argsort(-np.asarray(signals))]
    if not np.isfinite(ordered[0]):
        return "none"
    steps = np.diff(ordered[np.isfinite(ordered)])
    if np.any(steps < 0):
        return "reversed"
    return "tied" if np.any(steps == 0) else "follows"


def _formed_mean(values: list[float]) -> float:
    """Mean over the seeds whose samples formed (the others are nan); nan if none did."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _single_name(p: int, s: int) -> str:
    return "".join("1" if q == p else "0" for q in range(s))


def _results_json(result: SIMDiffusionResult) -> dict[str, object]:
    return {
        "config": asdict(result.config),
        "probe_names": result.probe_names,
        "test_probe": result.probe_names[result.test_probe],
        "summary": _summary(result),
        "runs": [
            {
                "seed": r.seed,
                "classifier_accuracy": r.classifier_accuracy,
                "formed_step": r.formed_step,
                "learning_times": r.learning_times.tolist(),
                "in_distribution_times": r.in_distribution_times.tolist(),
                "test_probe_loss_rebound": r.test_probe_loss_rebound,
                "train_loss_rebound": r.train_loss_rebound,
                "swing": r.swing,
                "swing_toward": r.swing_toward,
                "seconds": r.trace.seconds,
                "steps": r.trace.steps.tolist(),
                "times": r.trace.times.tolist(),
                "train_loss": r.trace.train_loss.tolist(),
                "probe_outputs": r.trace.probe_outputs.tolist(),
                "probe_loss": r.trace.probe_loss.tolist(),
                "probe_accuracy": r.probe_accuracy.tolist(),
            }
            for r in result.seeds
        ],
    }


def _report(result: SIMDiffusionResult) -> str:
    config, summary, names = result.config, _summary(result), result.probe_names
    test = names[result.test_probe]
    concepts = config.task.concept_names
    n = len(result.seeds)
    lines = [
        "# sim-diffusion: concept-space dynamics of a small DDPM (SIM seed §5, Fig. 6)",
        "",
        f"Concept images {config.task.image_size}x{config.task.image_size}, concepts {', '.join(concepts)}; "
        f"held out: {', '.join(config.task.held_out)}; {config.task.n_per_combination} images per training "
        f"combination, full batch; DDPM T={config.model.timesteps}, {config.model.architecture} denoiser "
        f"({_size(config.model)}, {config.model.blocks} blocks), Adam lr={config.lr}, "
        f"{config.steps} steps; "
        f"{config.samples_per_combination} samples per combination at {len(result.seeds[0].trace.steps)} "
        f"checkpoints (same sampling noise at every checkpoint); guidance {config.guidance}. "
        f"Seeds: {config.seeds}.",
        "",
        "Concept signal mu_p (distance between class-mean images): "
        + ", ".join(f"{c} {m:.2f}" for c, m in zip(concepts, result.signals, strict=True)),
        "",
        f"A concept counts as learnt at a probe from the checkpoint on which its classifier readout reaches "
        f"{config.fraction:.0%} of the target and stays there to the end (early samples are blobs whose "
        f"readout jumps around, so a first crossing says little); times are step x lr. "
        f"Probe loss = (1/2)||mean readout - target||^2. The test-probe path (its rebound and swing) is read "
        f"from the checkpoint ('images from') after which the samples of the training combinations read "
        f"right at least {FORMED_ACCURACY:.0%} of the time on average; the swing is the largest distance "
        f"from the straight route from the centre of concept space (noise) to the target, and a swing below "
        f"{SWING_TOLERANCE} concept units has no direction.",
        "",
        "| seed | classifier acc | learning time at "
        + test
        + " per concept | in-distribution times | images from (step) | "
        + test
        + " loss rebound | train loss rebound | swing (toward) | final acc "
        + " / ".join(names)
        + " |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.seeds:
        lines.append(
            f"| {r.seed} | {r.classifier_accuracy:.3f} | {_times(r.learning_times)} | "
            f"{_times(r.in_distribution_times)} | {'never' if r.formed_step is None else r.formed_step} | "
            f"{r.test_probe_loss_rebound:.4f} | "
            f"{r.train_loss_rebound:.4f} | "
            f"{r.swing:.3f} ({r.swing_toward}) | {' / '.join(f'{a:.2f}' for a in r.probe_accuracy[-1])} |"
        )
    strongest = concepts[int(np.argmax(result.signals))]
    lines += [
        "",
        "## Summary",
        "",
        f"- learning order at the test probe {test} follows mu_p ({strongest} first): "
        f"{summary['seeds_learning_order_follows_mu']} of {n} seeds (a concept never learnt counts as last; "
        f"tied: {summary['seeds_learning_order_tied']}, "
        f"reversed: {summary['seeds_learning_order_reversed']})",
        f"- non-monotonic test-probe loss (rebound > {REBOUND_TOLERANCE}): "
        f"{summary['seeds_non_monotonic_test_probe_loss']} of {n} seeds ({summary['seeds_formed']} formed) "
        f"(mean rebound {summary['test_probe_loss_rebound_mean']:.4f}; training-loss rebound "
        f"{summary['train_loss_rebound_mean']:.4f})",
        f"- the test-probe path swings (by >= {SWING_TOLERANCE}) toward the strongest single-concept "
        f"combination: {summary['seeds_swing_toward_strongest_single_concept']} of {n} seeds; toward another "
        f"training combination: {summary['seeds_swing_toward_another_combination']} (mean swing "
        f"{summary['swing_mean']:.3f} in concept units; samples formed in {summary['seeds_formed']} of {n} "
        f"seeds)",
        "- final accuracy per combination (mean ± std over seeds): "
        + ", ".join(
            f"{name} {summary['final_accuracy_mean'][name]:.2f} ± {summary['final_accuracy_std'][name]:.2f}"
            for name in names
        ),
        "",
        "Figures: `sim_diffusion_seeds.png` (all seeds), `sim_diffusion_seed<k>.png` (the four panels of the "
        "linear-model analysis), `sim_diffusion_samples.png` (samples over training, first seed).",
        "",
    ]
    return "\n".join(lines)


def _size(model: ConceptDiffusionConfig) -> str:
    return f"{model.channels} channels" if model.architecture == "conv" else f"hidden {model.hidden}"


def _times(times: np.ndarray) -> str:
    return ", ".join("never" if not np.isfinite(t) else f"{t:.3g}" for t in times)


def _save_seed_figure(result: SIMDiffusionResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test, names = result.test_probe, result.probe_names
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for r in result.seeds:
        t = np.maximum(r.trace.times, r.trace.times[1] / 2)
        # the held-out path: bold from the checkpoint on which samples are images, faint before (noise, blobs)
        formed = (
            len(r.trace.steps)
            if r.formed_step is None
            else int(np.searchsorted(r.trace.steps, r.formed_step))
        )
        outputs = r.trace.probe_outputs[:, test, :2]
        path_line = axes[0].plot(*outputs[formed:].T, "-o", ms=3, lw=2, label=f"seed {r.seed}")[0]
        axes[0].plot(*outputs[: formed + 1].T, "-", color=path_line.get_color(), lw=0.5, alpha=0.3)
        axes[0].plot(*outputs[0], "s", color=path_line.get_color())
        if formed < len(outputs):
            axes[0].plot(*outputs[formed], "D", color=path_line.get_color())
        axes[1].plot(
            t, r.trace.probe_loss[:, test], color=path_line.get_color(), label=f"{names[test]}, seed {r.seed}"
        )
        axes[1].plot(t, r.trace.train_loss, "--", color=path_line.get_color(), lw=0.8)
        axes[2].plot(
            t, r.probe_accuracy[:, test], color=path_line.get_color(), label=f"{names[test]}, seed {r.seed}"
        )
        for j in range(len(names)):
            if j != test:
                axes[2].plot(t, r.probe_accuracy[:, j], color=path_line.get_color(), lw=0.6, alpha=0.5)
    for j, name in enumerate(names):
        target = result.seeds[0].trace.probe_targets[j][:2]
        axes[0].scatter(*target, marker="*", s=150, color="tab:red" if j == test else "0.4", zorder=3)
        axes[0].annotate(name, target, textcoords="offset points", xytext=(5, 5))
    concepts = result.config.task.concept_names
    axes[0].set(
        xlabel=f"P({concepts[0]} = 1)",
        ylabel=f"P({concepts[1]} = 1)",
        title=f"mean readout of {names[test]} (square: step 0, diamond: images from)",
    )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="time (steps x lr)",
        ylabel="loss",
        title=f"{names[test]} probe loss (solid), denoising loss (dashed)",
    )
    axes[2].set(
        xscale="log",
        xlabel="time (steps x lr)",
        ylabel="accuracy",
        title="all concepts right (thick: test probe)",
    )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _save_sample_figure(result: SIMDiffusionResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = result.seeds[0]
    records = np.unique(np.linspace(0, len(run.trace.steps) - 1, 8).round().astype(int))
    names = result.probe_names
    fig, axes = plt.subplots(
        len(names), len(records), figsize=(1.3 * len(records), 1.4 * len(names)), squeeze=False
    )
    for i, _ in enumerate(names):
        for k, record in enumerate(records):
            ax = axes[i, k]
            tiles = run.samples[record, i]  # [k, 3, H, W]
            ax.imshow(np.concatenate(list(tiles.transpose(0, 2, 3, 1)), axis=1), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"step {run.trace.steps[record]}", fontsize=7)
            if k == 0:
                ax.set_ylabel(names[i] + (" (held out)" if i == result.test_probe else ""), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


SIM_DIFFUSION = ScriptedReproduction(
    "sim-diffusion",
    "a small concept DDPM: swing-by toward the training combinations and a non-monotonic test-probe loss "
    "(SIM Fig. 6)",
    "SIM seed §5, Fig. 6; CATALOG §1.14",
    SIMDiffusionRunConfig,
    run_sim_diffusion,
    quick={
        "steps": 30,
        "n_checkpoints": 3,
        "samples_per_combination": 4,
        "classifier_images_per_combination": 8,
        "classifier": {"steps": 10},
        "model": {"timesteps": 8, "hidden": 32, "channels": 4, "blocks": 1},
        "task": {"n_per_combination": 8},
    },
)
