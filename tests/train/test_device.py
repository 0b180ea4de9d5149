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
from recombine.experiments.trial import TrialSpec, train_command
from recombine.runs.store import RunDir
from recombine.train.batching import Seq2SeqBatch
from recombine.train.device import resolve_device, to_device
from recombine.train.objectives import objective_for

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


def test_scripted_reproductions_refuse_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "dnc-repeat-copy", "--quick", "--device", "cuda"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "on the CPU" in error


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
    assert "cuda_rng" in RunDir(run).load_checkpoint("last")
    # continued on the CPU from the GPU's checkpoint
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=80"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["device"] == "cpu" and result["steps"] == 80
    # and inspected on the CPU
    assert main(["inspect", str(run), "--out", str(tmp_path / "maps.png")]) == 0
    assert (tmp_path / "maps.png").stat().st_size > 0
