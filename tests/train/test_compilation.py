"""``--compile MODE``: a compiled training step computes what the eager one does (to float32 rounding), is
really compiled, leaves checkpoints and evaluation those of the plain module, and travels from a grid to
its trials like ``--device``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from recombine import run_config
from recombine.cli import main
from recombine.errors import UserError
from recombine.experiments.trial import TrialSpec, train_command
from recombine.runs.reevaluation import evaluate_run
from recombine.runs.store import RunDir
from recombine.train import fit
from recombine.train.compilation import for_training, resolve_compile_mode

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TINY_NDR = [
    "task=ctl",
    "task.direction=backward",
    "model=ndr",
    "model.d_model=16",
    "model.d_ff=32",
    "model.n_layers=2",
    "model.dropout=0.0",
    "model.attention_dropout=0.0",
    "train.steps=4",
    "train.batch_size=16",
    "train.log_every=1",
    "train.eval_every=4",
    "seed=1",
]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def train_losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines if line["kind"] == "train"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "device"),
    [
        ("default", "cpu"),
        pytest.param("default", "cuda", marks=needs_cuda),
        pytest.param("reduce-overhead", "cuda", marks=needs_cuda),  # CUDA graphs
    ],
)
def test_compiled_training_matches_eager(tmp_path: Path, mode: str, device: str) -> None:
    config = run_config.resolve(run_config.parse_overrides(TINY_NDR))
    on = torch.device(device)
    eager = fit(config, tmp_path / "eager", progress=False, device=on)
    torch._dynamo.reset()
    counters.clear()
    compiled = fit(config, tmp_path / "compiled", progress=False, device=on, compile_mode=mode)
    # the training step went through the compiler, in one graph (the NDR has no graph breaks) ...
    assert counters["stats"]["unique_graphs"] >= 1
    assert not counters["graph_break"]
    assert compiled["compile"] == mode and eager["compile"] == "off"
    # ... and computed the eager losses step by step
    tolerance = 1e-4 if device == "cpu" else 1e-3
    assert train_losses(tmp_path / "compiled") == pytest.approx(
        train_losses(tmp_path / "eager"), rel=tolerance
    )
    for split, accuracy in eager["selected"].items():
        assert compiled["selected"][split] == pytest.approx(accuracy, abs=1e-3)
    # the checkpoint is the plain module's state dict (no "_orig_mod." prefixes from the wrapper)
    eager_state = RunDir(tmp_path / "eager").load_checkpoint("last")["model"]
    compiled_state = RunDir(tmp_path / "compiled").load_checkpoint("last")["model"]
    assert compiled_state.keys() == eager_state.keys()
    # ... and holds the weights the compiled run trained: evaluated again, it gives the logged evaluation
    again = evaluate_run(tmp_path / "compiled", "last", device=on).evaluations[0].splits
    logged = next(r for r in reversed(RunDir(tmp_path / "compiled").read_metrics()) if r["kind"] == "eval")
    for split, values in logged["splits"].items():
        assert again[split]["loss"] == pytest.approx(values["loss"], rel=1e-5)
    # The weights are not compared with the eager run's element by element: Adam turns rounding differences
    # of near-zero gradients into whole lr-sized steps (measured on an H100, and on that machine's 16-core
    # CPU, up to 5.8e-3 after these 4 steps), so only the losses and accuracies above bound the difference.


@pytest.mark.slow
def test_a_compiled_run_resumes_eagerly(tmp_path: Path) -> None:
    """The mode belongs to the session, not the run: a compiled run continues without compilation."""
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--compile", "default", "--run-dir", str(run), *TINY_NDR]) == 0
    assert main(["train", "--no-progress", "--resume", str(run), "train.steps=8"]) == 0
    result = RunDir(run).read_result()
    assert result is not None and result["steps"] == 8 and result["compile"] == "off"
    assert "compile" not in RunDir(run).read_config()["train"]


def test_off_is_the_module_itself_and_unknown_modes_are_refused() -> None:
    model = torch.nn.Linear(3, 2)
    assert for_training(model, "off") is model
    with pytest.raises(UserError, match=r"unknown compile mode 'reduce_overhead'; .*reduce-overhead"):
        resolve_compile_mode("reduce_overhead")
    with pytest.raises(UserError, match="unknown compile mode 'fast'"):
        for_training(model, "fast")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["train", *TINY_NDR, "--compile", "fast"], "unknown compile mode 'fast'"),
        (["reproduce", "ndr-ctl", "--quick", "--compile", "fast"], "unknown compile mode 'fast'"),
        (["sweep", "recipes/ndr-ctl-gpu.yaml", "--compile", "fast"], "unknown compile mode 'fast'"),
        (["reproduce", "dnc-repeat-copy", "--quick", "--compile", "default"], "has no `compile` setting"),
    ],
)
def test_compile_options_that_do_not_apply_are_one_line(
    command: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    command[1] = str(RECIPES.parent / command[1]) if command[1].endswith(".yaml") else command[1]
    out = "--run-dir" if command[0] == "train" else "--out"
    assert main([*command, out, str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_trials_pass_the_compile_mode_to_train(tmp_path: Path) -> None:
    config = run_config.resolve(run_config.parse_overrides(TINY_NDR)).to_dict()
    fresh = train_command(TrialSpec(str(tmp_path), "runs/a", config, compile_mode="reduce-overhead"))
    assert fresh[fresh.index("--compile") + 1] == "reduce-overhead"
    assert "--compile" not in train_command(TrialSpec(str(tmp_path), "runs/a", config))
    (tmp_path / "runs/a").mkdir(parents=True)
    (tmp_path / "runs/a/config.yaml").write_text("")  # a resumed trial takes the grid's mode too
    resumed = train_command(TrialSpec(str(tmp_path), "runs/a", config, compile_mode="default"))
    assert "--resume" in resumed and resumed[resumed.index("--compile") + 1] == "default"
