"""``--device``: where a supervised run trains.

Without a GPU: bad device names and CUDA on a machine without one are one-line errors (exit 2), scripted
experiments refuse a GPU, trials pass the device on. With a GPU (skipped here, run on a GPU machine):
every supervised model computes the same loss, gradients and greedy outputs on the GPU as on the CPU
(float32 rounding apart), and a run trained on the GPU is resumed and read on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import TINY_RUN
from recombine import models, run_config, tasks
from recombine.cli import main
from recombine.errors import UserError
from recombine.experiments.executors import make_executor
from recombine.experiments.recipe import reproduction_from_recipe
from recombine.experiments.reproduction import run_trials
from recombine.experiments.trial import TrialSpec, train_command
from recombine.runs.store import RunDir
from recombine.train.batching import Seq2SeqBatch
from recombine.train.device import cuda_matmul_precision, resolve_device, to_device
from recombine.train.objectives import objective_for
from tiny_grid import tiny_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "mps"])
def test_unknown_device_names_are_refused(name: str) -> None:
    with pytest.raises(UserError, match="valid choices: cpu, cuda, cuda:N"):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert (
        main(["train", "--no-progress", "--device", "cuda", "--run-dir", str(tmp_path / "r"), *TINY_RUN]) == 2
    )
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "no CUDA GPU" in error
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@no_cuda
@pytest.mark.parametrize(
    "command",
    [
        ["reproduce", "ndr-ctl", "--quick", "--device", "cuda"],  # a grid
        ["reproduce", "selection", "--quick", "--device", "cuda"],  # a scripted one with a device field
        ["sweep", "recipes/ndr-ctl-gpu.yaml", "--quick", "--device", "cuda"],
    ],
)
def test_grids_without_a_gpu_are_refused_before_training(
    command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    command[1] = str(RECIPES.parent / command[1]) if command[1].endswith(".yaml") else command[1]
    assert main([*command, "--out", str(tmp_path / "grid")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "no CUDA GPU" in error
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["reproduce", "dnc-repeat-copy", "--quick", "--device", "cpu"], "has no `device` setting"),
        (["reproduce", "masks-scan", "--quick", "--device", "cpu", "device=cuda"], "disagree"),
        (["sweep", "recipes/ndr-ctl-gpu.yaml", "--device", "cpu", "--gpus-per-trial", "1"], "--executor ray"),
        (["sweep", "recipes/ndr-ctl-gpu.yaml", "--executor", "ray", "--device", "cuda:1"], "Ray assigns"),
    ],
)
def test_device_options_that_do_not_apply_are_one_line(
    command: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    command[1] = str(RECIPES.parent / command[1]) if command[1].endswith(".yaml") else command[1]
    assert main([*command, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error


@no_cuda
def test_a_trial_gets_the_grids_device(tmp_path: Path) -> None:
    """The device travels from the grid to each trial's ``recombine train``: without a GPU, a trial asked
    to train on one fails with train's own error line."""
    recipe = reproduction_from_recipe(tiny_recipe([{"label": "gpu", "train": {"steps": 20}}]))
    grid = run_trials(recipe, tmp_path, seeds=1, quick=False, device="cuda")
    (outcome,) = grid.outcomes
    assert not outcome.ok and "no CUDA GPU" in outcome.reason


@pytest.mark.slow
@no_cuda
def test_ray_refuses_gpu_trials_on_a_cluster_without_gpus(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    recipe = reproduction_from_recipe(tiny_recipe([{"label": "gpu", "train": {"steps": 20}}]))
    with pytest.raises(UserError, match="reserves 1 GPU"):
        run_trials(recipe, tmp_path, seeds=1, quick=False, executor=make_executor("ray", 1, None, 1.0))


def test_a_run_records_where_it_trained(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--run-dir", str(run), *TINY_RUN, "train.steps=20"]) == 0
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=40"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["device"] == "cpu" and result["devices"] == [{"from_step": 0, "device": "cpu"}]
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=40"]) == 0  # nothing to train
    assert json.loads((run / "result.json").read_text())["devices"] == [{"from_step": 0, "device": "cpu"}]


def test_cuda_matmul_precision_follows_pytorch_and_the_override_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    matmul = torch.backends.cuda.matmul  # a module object whose flags monkeypatch cannot undo
    before = matmul.fp32_precision
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", raising=False)
    try:
        matmul.fp32_precision = "ieee"
        assert cuda_matmul_precision() == "float32"
        monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "0")
        assert cuda_matmul_precision() == "float32"
        monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
        assert cuda_matmul_precision() == "tf32"
        monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
        matmul.fp32_precision = "tf32"  # the new API: reading the legacy allow_tf32 would now raise
        assert cuda_matmul_precision() == "tf32"
        matmul.fp32_precision = "none"
        matmul.allow_tf32 = True  # the legacy API
        assert cuda_matmul_precision() == "tf32"
    finally:
        matmul.fp32_precision = before


def test_a_checkpoint_from_before_device_records_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--run-dir", str(run), *TINY_RUN, "train.steps=20"]) == 0
    state = torch.load(run / "last.pt", weights_only=False)
    del state["devices"]  # as written before runs recorded their devices
    torch.save(state, run / "last.pt")
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=40"]) == 0
    devices = json.loads((run / "result.json").read_text())["devices"]
    assert devices == [{"from_step": 0, "device": "not recorded"}, {"from_step": 20, "device": "cpu"}]


def test_to_device_keeps_named_tuples_and_plain_tuples() -> None:
    batch = Seq2SeqBatch(*(torch.arange(3) for _ in range(5)))
    moved = to_device(batch, torch.device("cpu"))
    assert type(moved) is Seq2SeqBatch and torch.equal(moved.tgt, batch.tgt)
    pair = to_device((torch.ones(2), torch.zeros(1)), torch.device("cpu"))
    assert type(pair) is tuple and len(pair) == 2


def test_trials_pass_the_device_to_train(tmp_path: Path) -> None:
    config = run_config.resolve(run_config.parse_overrides(TINY_RUN)).to_dict()
    on_gpu = train_command(TrialSpec(str(tmp_path), "runs/a", config, device="cuda:1"))
    assert on_gpu[on_gpu.index("--device") + 1] == "cuda:1"
    assert "--device" not in train_command(TrialSpec(str(tmp_path), "runs/a", config))
    (tmp_path / "runs/a").mkdir(parents=True)
    (tmp_path / "runs/a/config.yaml").write_text("")  # a resumed trial keeps its device too
    resumed = train_command(TrialSpec(str(tmp_path), "runs/a", config, device="cuda"))
    assert "--resume" in resumed and resumed[resumed.index("--device") + 1] == "cuda"


# -- on a GPU ------------------------------------------------------------------------------------


def _small_model(name: str, spec: Any) -> torch.nn.Module:
    """The registry's default config, made small where it has the usual size fields, without dropout
    (so that training mode computes the same function on both devices)."""
    fields = models.MODELS.get(name).field_names()
    small = {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 3, "n_encoder_layers": 1}
    small |= {"n_decoder_layers": 1, "d_controller": 32, "n_cells": 8, "cell_width": 8}
    defaults = models.MODELS.get(name).default_config()
    small |= {f: 0.0 for f in fields if f.endswith("dropout") and isinstance(getattr(defaults, f), float)}
    return models.build(name, spec, **{k: v for k, v in small.items() if k in fields})


def _loss_and_gradients(
    model: torch.nn.Module, objective: Any, batch: Any
) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss, _, _ = objective.loss(model, batch)
    loss.backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]
    return loss.item(), [g.detach().cpu() for g in grads]


def _compare_devices(name: str, task: Any, batch_size: int, other: str = "cuda") -> None:
    cuda = torch.device(other)
    torch.manual_seed(0)
    model = _small_model(name, task.spec)  # training mode: cuDNN's RNN backward exists only there
    gpu_model = _small_model(name, task.spec)
    gpu_model.load_state_dict(model.state_dict())
    gpu_model.to(cuda)
    cpu_objective, gpu_objective = objective_for(task.spec), objective_for(task.spec, device=cuda)
    prepared = cpu_objective.prepare(task.splits["valid_ood"])
    batch = cpu_objective.batch(prepared, batch_size, torch.Generator().manual_seed(0), balanced=False)
    cpu_loss, cpu_grads = _loss_and_gradients(model, cpu_objective, batch)
    gpu_loss, gpu_grads = _loss_and_gradients(gpu_model, gpu_objective, batch)
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-4, abs=1e-5)
    # atol 1e-4: cuDNN's LSTM backward sums in another order; on an H100 the seq2seq LSTM's gradients
    # differed from the CPU's by up to 1.3e-5 (3 of 768 entries above 1e-5), every other model's by less
    for cpu_grad, gpu_grad in zip(cpu_grads, gpu_grads, strict=True):
        torch.testing.assert_close(gpu_grad, cpu_grad, rtol=1e-3, atol=1e-4)
    cpu_eval = cpu_objective.evaluate(model, prepared, batch_size=256)
    gpu_eval = gpu_objective.evaluate(gpu_model, prepared, batch_size=256)
    assert gpu_eval["accuracy"] == pytest.approx(cpu_eval["accuracy"], abs=2 / len(prepared))
    assert gpu_eval["loss"] == pytest.approx(cpu_eval["loss"], rel=1e-4)


@needs_cuda
@pytest.mark.parametrize("name", models.names("classify"))
def test_classifiers_compute_the_same_on_gpu_and_cpu(name: str) -> None:
    task = tasks.get("ctl", seed=0, n_train=200, n_valid_iid=50, n_valid_ood=200, n_test_ood=50)
    _compare_devices(name, task, batch_size=64)


@needs_cuda
@pytest.mark.parametrize("name", models.names("seq2seq"))
def test_seq2seq_models_compute_and_decode_the_same_on_gpu_and_cpu(name: str) -> None:
    task = tasks.get("scan", split="length_cutoff_26", seed=0)
    _compare_devices(name, task, batch_size=32)


@needs_cuda
def test_a_gpu_run_resumes_and_is_read_on_the_cpu(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--device", "cuda", "--run-dir", str(run), *TINY_RUN]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["device"].startswith("cuda:0 (") and result["steps"] == 60
    assert result["cuda_matmul"] == cuda_matmul_precision()
    assert "cuda_rng" in RunDir(run).load_checkpoint("last")
    # continued on the CPU from the GPU's checkpoint
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=80"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["device"] == "cpu" and result["steps"] == 80 and "cuda_matmul" not in result
    gpu = result["devices"][0]["device"]
    assert result["devices"] == [{"from_step": 0, "device": gpu}, {"from_step": 60, "device": "cpu"}]
    # and inspected on the CPU
    assert main(["inspect", str(run), "--out", str(tmp_path / "maps.png")]) == 0
    assert (tmp_path / "maps.png").stat().st_size > 0
