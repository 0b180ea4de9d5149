"""The supervised training loop, one for every task kind with an objective (classification, seq2seq).

What differs between kinds (batches, loss, evaluation metric) lives in :mod:`recombine.train.objectives`.

Model selection follows thesis 4.2.2 / D.3.3: evaluate every ``eval_every`` steps on every
validation and test split, select the checkpoint with the best *accuracy* on the OOD validation
split (``valid_ood``), and report the test accuracies of that checkpoint.

Determinism: parameters are initialised after ``torch.manual_seed(seed)``, batches come from a
dedicated ``torch.Generator``, and the checkpoint stores both RNG states (and the GPU's, on a CUDA
device), so a run resumed from ``last.pt`` continues exactly as the uninterrupted run would (on a CPU;
CUDA kernels are not bit-for-bit repeatable, see :mod:`recombine.train.device`). ``last.pt`` is written
at every evaluation and, on Ctrl-C or SIGTERM, after the step in progress
(:mod:`recombine.stop_signals`), so an interrupted run loses no finished step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from recombine import models, tasks
from recombine.errors import UserError
from recombine.run_config import RunConfig
from recombine.runs.directory_lock import exclusive_use
from recombine.runs.store import RunDir
from recombine.stop_signals import StopRequests
from recombine.tasks.base import TaskData
from recombine.train.compilation import for_training
from recombine.train.curriculum import curriculum_split
from recombine.train.device import CPU, cuda_matmul_precision, describe_device
from recombine.train.objectives import objective_for
from recombine.train.schedules import lr_multiplier
from recombine.train.warm_start import load_initial_weights


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def build_task(config: RunConfig) -> TaskData:
    return tasks.TASKS.get(config.task_name).factory(config.task, config.seed)


def build_model(config: RunConfig, task: TaskData) -> nn.Module:
    return models.MODELS.get(config.model_name).factory(task.spec, config.model)


def fit(
    config: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    on_start: Callable[[], None] = lambda: None,
    device: torch.device = CPU,
    compile_mode: str = "off",
) -> dict[str, Any]:
    """Train one run into ``run_dir`` (resuming from its ``last.pt`` when ``resume``) on ``device``
    (see :func:`recombine.train.device.resolve_device`), its training steps compiled by ``compile_mode``
    (:mod:`recombine.train.compilation`; like the device, not part of the config).

    ``on_start`` is called once task and model are built and the run directory is written. The run
    directory is locked while it trains (:mod:`recombine.runs.directory_lock`): a second process
    training it gets a UserError instead of interleaving its metrics and checkpoints."""
    with exclusive_use(run_dir):
        return _fit_holding_lock(config, run_dir, resume, progress, on_start, device, compile_mode)


def _fit_holding_lock(
    config: RunConfig,
    run_dir: str | Path,
    resume: bool,
    progress: bool,
    on_start: Callable[[], None],
    device: torch.device,
    compile_mode: str,
) -> dict[str, Any]:
    """:func:`fit`, once the run directory is locked."""
    run = RunDir(run_dir)
    train_cfg = config.train
    if train_cfg.threads:
        torch.set_num_threads(train_cfg.threads)
    task = build_task(config)
    torch.manual_seed(config.seed)
    model = build_model(config, task)  # raises a UserError when model and task kind do not fit
    initialised_from = None  # a warm start's source (train/warm_start.py); a resume keeps its record
    if train_cfg.init_from and not (resume and run.has_checkpoint("last")):
        initialised_from = load_initial_weights(model, config, task, build_task)
        # config.yaml names the source absolutely: a resume before the first checkpoint, from any working
        # directory, warm-starts from the same run again
        train_cfg = dataclasses.replace(train_cfg, init_from=initialised_from["run"])
        config = dataclasses.replace(config, train=train_cfg)
    model.to(device)  # initialised on the CPU first: the same initial weights on every device
    try:
        objective = objective_for(task.spec, train_cfg.label_smoothing, device)
    except UserError as e:
        raise UserError(f"{e} (task {config.task_name!r})") from None
    early_train = None  # the curriculum's training examples (train/curriculum.py)
    if train_cfg.curriculum_steps:
        early_train = objective.prepare(curriculum_split(task.splits["train"], train_cfg.curriculum_depths))
    run.write_config(config.to_dict())
    on_start()
    splits = {name: objective.prepare(split) for name, split in task.splits.items()}
    selection = task.selection_split
    optimizer = torch.optim.AdamW(model.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_multiplier(train_cfg.schedule, train_cfg.warmup_steps, train_cfg.steps)
    )
    batch_generator = torch.Generator().manual_seed(config.seed)
    step, best_accuracy, best_step, elapsed = 0, -1.0, -1, 0.0
    # running sums of the current logging window; checkpointed so a resumed run logs identical means
    window = {"loss": 0.0, "correct": 0, "count": 0}
    devices: list[dict[str, Any]] = []  # where the run trained: [{"from_step", "device"}], one per change

    if resume and run.has_checkpoint("last"):
        state = run.load_checkpoint("last")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        batch_generator.set_state(state["batch_rng"])
        torch.set_rng_state(state["torch_rng"])
        if device.type == "cuda" and "cuda_rng" in state:  # dropout masks drawn on the GPU
            torch.cuda.set_rng_state(state["cuda_rng"], device)
        step, best_accuracy, best_step, elapsed = (
            state["step"],
            state["best_accuracy"],
            state["best_step"],
            state["elapsed_s"],
        )
        window = state["log_window"]
        devices = state.get("devices") or _unrecorded_devices(state)
        initialised_from = state.get("initialised_from")
        run.truncate_metrics(step)
    elif run.metrics_path.exists():
        run.metrics_path.unlink()  # a fresh start (or a resume before the first checkpoint)

    this_device = describe_device(device)
    if step < train_cfg.steps and (not devices or devices[-1]["device"] != this_device):
        devices.append({"from_step": step, "device": this_device})  # only a device that trains steps

    from torch.utils.tensorboard import SummaryWriter  # slow import: only when training

    writer = SummaryWriter(str(run.path / "events"), purge_step=step if step else None)

    def checkpoint_state() -> dict[str, Any]:
        gpu_rng = {"cuda_rng": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}
        return {
            **gpu_rng,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "batch_rng": batch_generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "step": step,
            "best_accuracy": best_accuracy,
            "best_step": best_step,
            "elapsed_s": elapsed,
            "log_window": dict(window),
            "config": config.to_dict(),
            "devices": devices,
            "initialised_from": initialised_from,
        }

    step_model = for_training(model, compile_mode)  # the model itself unless compile_mode is set
    model.train()
    window_start = time.perf_counter()
    session_start = time.perf_counter() - elapsed
    bar = tqdm(total=train_cfg.steps, initial=step, disable=not progress, desc=run.path.name, leave=False)
    saved_step = step  # the step last.pt holds
    try:
        with StopRequests() as stop:  # Ctrl-C / SIGTERM: end the step in progress, checkpoint, stop
            while step < train_cfg.steps:
                if stop.requested:  # between two steps: weights, optimizer, RNGs and step agree
                    if step != saved_step:
                        elapsed = time.perf_counter() - session_start
                        run.save_checkpoint("last", checkpoint_state())
                    raise KeyboardInterrupt
                in_curriculum = early_train is not None and step < train_cfg.curriculum_steps
                batch = objective.batch(
                    early_train if in_curriculum else splits["train"],
                    train_cfg.batch_size,
                    batch_generator,
                    train_cfg.sampling == "depth_balanced",
                )
                loss, n_correct, n_examples = objective.loss(step_model, batch)
                if not math.isfinite(loss.item()):
                    run.write_result({"status": "diverged", "step": step + 1, "last_good_step": saved_step})
                    raise TrainingDiverged(
                        f"loss became {loss.item()} at step {step + 1}; the last good checkpoint "
                        f"(step {saved_step}) is kept in {run.checkpoint_path('last')}"
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if train_cfg.grad_clip > 0:
                    nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                optimizer.step()
                scheduler.step()
                step += 1
                bar.update(1)

                window["loss"] += loss.item() * n_examples
                window["correct"] += n_correct
                window["count"] += n_examples
                if step % train_cfg.log_every == 0 or step == train_cfg.steps:
                    seconds = time.perf_counter() - window_start
                    record = {
                        "step": step,
                        "kind": "train",
                        "loss": window["loss"] / window["count"],
                        "accuracy": window["correct"] / window["count"],
                        "lr": scheduler.get_last_lr()[0],
                        "examples_per_s": window["count"] / max(seconds, 1e-9),
                    }
                    run.append_metrics(record)
                    for key in ("loss", "accuracy", "lr", "examples_per_s"):
                        writer.add_scalar(f"train/{key}", record[key], step)
                    bar.set_postfix(
                        loss=f"{record['loss']:.3f}",
                        acc=f"{record['accuracy']:.3f}",
                        ex_s=f"{record['examples_per_s']:.0f}",
                    )
                    window = {"loss": 0.0, "correct": 0, "count": 0}
                    window_start = time.perf_counter()

                if step % train_cfg.eval_every == 0 or step == train_cfg.steps:
                    results = {
                        name: objective.evaluate(model, splits[name], train_cfg.eval_batch_size)
                        for name in task.evaluation_splits
                    }
                    run.append_metrics({"step": step, "kind": "eval", "splits": results})
                    for name, values in results.items():
                        writer.add_scalar(f"{name}/accuracy", values["accuracy"], step)
                        writer.add_scalar(f"{name}/loss", values["loss"], step)
                    elapsed = time.perf_counter() - session_start
                    improved = results[selection]["accuracy"] > best_accuracy
                    if improved:
                        best_accuracy, best_step = results[selection]["accuracy"], step
                    state = checkpoint_state()  # best.pt and last.pt of one evaluation hold one step
                    if improved:
                        run.save_checkpoint("best", selected_model_state(state))
                    run.save_checkpoint("last", state)
                    saved_step = step
                    writer.flush()
    finally:
        bar.close()
        writer.close()

    result = summarise(run, selection)
    result["wall_time_s"] = time.perf_counter() - session_start
    result["device"] = this_device  # of the session that finished the run
    result["devices"] = devices
    result["compile"] = compile_mode  # of the session that finished the run
    if device.type == "cuda":
        result["cuda_matmul"] = cuda_matmul_precision()  # of the session that finished the run
    if initialised_from is not None:
        result["initialised_from"] = initialised_from
    run.write_result(result)
    return result


#: what ``best.pt`` keeps of a checkpoint: the selected weights and where they came from. Only resuming
#: needs the optimizer, schedule and RNG states, and it resumes from ``last.pt``; without them ``best.pt``
#: is a third of the size under AdamW (two moment tensors per weight).
SELECTED_MODEL_KEYS = (
    "model",
    "step",
    "best_accuracy",
    "best_step",
    "elapsed_s",
    "config",
    "devices",
    "initialised_from",
)


def selected_model_state(state: dict[str, Any]) -> dict[str, Any]:
    """The part of a training checkpoint that ``best.pt`` stores (:data:`SELECTED_MODEL_KEYS`)."""
    return {key: state.get(key) for key in SELECTED_MODEL_KEYS}


def _unrecorded_devices(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The device record of a checkpoint written before runs recorded their devices (none at step 0)."""
    if state["step"] == 0:
        return []
    return [{"from_step": 0, "device": "cuda (not recorded)" if "cuda_rng" in state else "not recorded"}]


def summarise(run: RunDir, selection: str) -> dict[str, Any]:
    """The selected checkpoint's accuracies (first best on ``selection``) and the last ones."""
    evals = [r for r in run.read_metrics() if r.get("kind") == "eval"]
    if not evals:
        raise ValueError(f"{run.path} has no evaluation records")
    best = max(evals, key=lambda r: (r["splits"][selection]["accuracy"], -r["step"]))
    return {
        "status": "completed",
        "steps": evals[-1]["step"],
        "selection_split": selection,
        "best_step": best["step"],
        "selected": {name: values["accuracy"] for name, values in best["splits"].items()},
        "selected_per_depth": {name: values["per_depth"] for name, values in best["splits"].items()},
        "last": {name: values["accuracy"] for name, values in evals[-1]["splits"].items()},
    }
