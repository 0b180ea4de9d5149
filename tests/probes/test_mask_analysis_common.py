"""The helpers the add/mul and double-addition mask analyses share."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.probes.mask_analysis_common import (
    accuracy_table,
    analyse_every_architecture_and_seed,
    check_choice,
    format_mean_std,
    mean_std_tree,
    plot_sharing_panels,
    random_batches,
    sharing_summary,
    train_model,
    wall_time_note,
)
from recombine.probes.mask_sets import LayerSharing


def test_random_batches_keep_rows_together_and_depend_only_on_the_seed() -> None:
    inputs = np.arange(20, dtype=np.float32).reshape(10, 2)
    labels, other = np.arange(10) * 10, np.arange(10) * 100
    (x,), (a, b) = next(random_batches(inputs, (labels, other), 6, seed=3))
    assert x.shape == (6, 2) and a.shape == b.shape == (6,)
    assert torch.equal(a, (x[:, 0] / 2).long() * 10) and torch.equal(b, a * 10)  # row i stays row i
    (x_again,), y = next(random_batches(inputs, labels, 6, seed=3))
    assert torch.equal(x_again, x) and torch.equal(y, a)  # one target array: a tensor, not a tuple
    with pytest.raises(ValueError, match="same number of rows"):
        next(random_batches(inputs, labels[:5], 2, seed=0))


def test_train_model_fits_a_line_and_leaves_eval_mode() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    x = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
    batches = random_batches(x, 3 * x - 1, 32, seed=0)
    losses = train_model(model, batches, torch.nn.functional.mse_loss, 300, 5e-2, 1.0, "line")
    assert len(losses) == 300 and losses[-1] < 1e-3 and not model.training
    assert model.weight.item() == pytest.approx(3, abs=0.05) and model.bias.item() == pytest.approx(
        -1, abs=0.05
    )


def test_accuracy_table_mean_std_tree_and_cells() -> None:
    table = accuracy_table({"none": {"a": 1.0, "b": 0.5}, "~a": {"a": 0.013, "b": 0.996}}, ["a", "b"], "op")
    assert table.splitlines() == [
        "| op | none | ~a |",
        "|---|---|---|",
        "| a | 100 | 1 |",
        "| b | 50 | 100 |",
    ]
    trees = [{"x": {"y": 0.2, "name": "s"}, "n": 1}, {"x": {"y": 0.4, "name": "t"}, "n": 3}]
    aggregated = mean_std_tree(trees)
    assert aggregated["n"] == (2.0, pytest.approx(math.sqrt(2)))
    assert aggregated["x"]["y"] == (pytest.approx(0.3), pytest.approx(np.std([0.2, 0.4], ddof=1)))
    assert "name" not in aggregated["x"]
    assert mean_std_tree([{"v": 0.5}])["v"] == (0.5, 0.0)
    assert format_mean_std((0.9412, 0.0671)) == "94 ± 6.7" and format_mean_std((94.0, 6.7), 1.0) == "94 ± 6.7"
    assert format_mean_std((math.nan, 0.0)) == "nan"
    note = wall_time_note({"fnn": {"seconds": (100.4, 3.0)}, "lstm": {}}, 412.0)
    assert note == f"Wall time 412 s; per trial: fnn 100 ± 3 s; torch {torch.__version__}."
    with pytest.raises(UserError, match="unknown architecture 'lstn'.*lstm"):
        check_choice("architecture", "lstn", ("fnn", "lstm"))


def test_sharing_summary_and_panels_figure(tmp_path: Path) -> None:
    summary = sharing_summary({"w": LayerSharing(n_total=10, n_a=4, n_b=2, n_shared=1)}, ("add", "mul"))
    assert summary["w"] == {
        "n_total": 10,
        "n_a": 4,
        "n_b": 2,
        "n_shared": 1,
        "iou": 0.2,
        "iomin": 0.5,
        "shared_of_add": 0.25,
        "shared_of_mul": 0.5,
    }
    panels = {
        name: {"w": {"shared_of_add": (0.25, 0.1), "shared_of_mul": (0.5, 0.0)}} for name in ("fnn", "lstm")
    }
    path = plot_sharing_panels(panels, [("shared_of_add", "+"), ("shared_of_mul", "*")], tmp_path / "s.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_trial_loop_resumes_from_its_log_and_seeds_of_separate_runs_add_up(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def analyse(architecture: str, seed: int) -> dict:
        calls.append((architecture, seed))
        return {"accuracy": 0.1 * seed + (architecture == "b"), "by_digit": {3: float(seed)}}

    def loop(seeds: list[int], settings: dict, out_dir: Path | None = tmp_path) -> dict:
        return analyse_every_architecture_and_seed(
            ["a", "b"], seeds, analyse, lambda summary: "", out_dir=out_dir, settings=settings
        )

    loop([0], {"steps": 5})
    loop([1], {"steps": 5})
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    with (tmp_path / "trials.jsonl").open("a") as log:
        log.write('{"key": "cut short by a cr')  # a crash mid-line: skipped when read
    calls.clear()
    resumed = loop([0, 1], {"steps": 5})
    assert calls == []
    fresh = loop([0, 1], {"steps": 5}, out_dir=None)
    assert calls == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    for name in ("a", "b"):
        stats, reference = (r["architectures"][name]["mean_std"] for r in (resumed, fresh))
        assert stats.pop("seconds") and reference.pop("seconds")  # timings differ; everything else not
        assert stats == reference
        assert resumed["architectures"][name]["mean_std"]["by_digit"]["3"] == pytest.approx(
            (0.5, math.sqrt(0.5))
        )
    calls.clear()
    loop([0], {"steps": 6})  # other settings: not the stored trials
    assert calls == [("a", 0), ("b", 0)]
