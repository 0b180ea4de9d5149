"""``train.compile``: a compiled training step computes what the eager one does (to float32 rounding),
and checkpoints and evaluation stay those of the plain module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recombine import run_config
from recombine.errors import UserError
from recombine.runs.store import RunDir
from recombine.train import fit
from recombine.train.compilation import for_training


def tiny_ndr(compile_mode: str) -> run_config.RunConfig:
    return run_config.resolve(
        {
            "task": {"name": "ctl", "direction": "backward"},
            "model": {
                "name": "ndr",
                "d_model": 16,
                "d_ff": 32,
                "n_layers": 2,
                "dropout": 0.0,
                "attention_dropout": 0.0,
            },
            "train": {"steps": 4, "batch_size": 16, "log_every": 1, "eval_every": 4, "compile": compile_mode},
            "seed": 1,
        }
    )


def train_losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines if line["kind"] == "train"]


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path: Path) -> None:
    eager = fit(tiny_ndr("off"), tmp_path / "eager", progress=False)
    compiled = fit(tiny_ndr("default"), tmp_path / "compiled", progress=False)
    # the same losses step by step: the compiled forward and backward compute the eager ones
    assert train_losses(tmp_path / "compiled") == pytest.approx(train_losses(tmp_path / "eager"), rel=1e-4)
    for split, accuracy in eager["selected"].items():
        assert compiled["selected"][split] == pytest.approx(accuracy, abs=1e-6)
    # the checkpoint is the plain module's state dict (no "_orig_mod." prefixes from the wrapper)
    eager_state = RunDir(tmp_path / "eager").load_checkpoint("last")["model"]
    compiled_state = RunDir(tmp_path / "compiled").load_checkpoint("last")["model"]
    assert compiled_state.keys() == eager_state.keys()
    for name, tensor in eager_state.items():
        torch.testing.assert_close(compiled_state[name], tensor, rtol=1e-4, atol=1e-6)


def test_off_is_the_module_itself_and_other_modes_wrap_it() -> None:
    model = torch.nn.Linear(3, 2)
    assert for_training(model, "off") is model
    wrapped = for_training(model, "default")
    assert wrapped is not model
    assert list(wrapped.parameters()) == list(model.parameters())  # shares, not copies, the weights
    with pytest.raises(ValueError, match="valid choices: off, default"):
        for_training(model, "fast")


def test_unknown_compile_mode_is_one_line_with_the_choices() -> None:
    with pytest.raises(UserError, match=r"unknown train.compile 'reduce_overhead'; .*reduce-overhead"):
        tiny_ndr("reduce_overhead")
