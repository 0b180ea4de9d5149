"""Attention/gate maps of a (tiny) trained run: shapes, the attention invariants, and the figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_RUN
from recombine import run_config
from recombine.cli import main
from recombine.probes.attention_maps import load_run_model, plot_step_maps, step_maps
from recombine.train import fit


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    runs = {}
    for model in ("ndr", "transformer"):
        path = tmp_path_factory.mktemp(model)
        overrides = [*TINY_RUN, f"model={model}", "train.steps=20", "model.test_layers=5"]
        fit(run_config.resolve(run_config.parse_overrides(overrides)), path, progress=False)
        runs[model] = path
    return runs


def test_ndr_maps_have_one_entry_per_step_and_geometric_rows_sum_to_at_most_one(
    trained_runs: dict[str, Path], tmp_path: Path
) -> None:
    model, task = load_run_model(trained_runs["ndr"])
    example = task.splits["test_ood"].inputs[2]
    maps = step_maps(model, task, "test_ood", 2)
    n = len(example) + 2  # begin and end tokens
    assert maps.attention.shape == (5, 2, n, n)  # test_layers steps, heads
    assert maps.gates is not None and maps.gates.shape == (5, n)
    assert np.all(maps.attention.sum(-1) <= 1 + 1e-5)
    assert np.all(np.diagonal(maps.attention, axis1=-2, axis2=-1) == 0)  # thesis eq. 5.7: A_ii = 0
    assert maps.tokens[0] == "B" and maps.tokens[-1] == "E"
    assert plot_step_maps(maps, tmp_path / "maps.png").stat().st_size > 0


def test_softmax_maps_are_distributions_and_have_no_gates(trained_runs: dict[str, Path]) -> None:
    model, task = load_run_model(trained_runs["transformer"])
    maps = step_maps(model, task, "valid_iid", 0)
    np.testing.assert_allclose(maps.attention.sum(-1), 1.0, rtol=1e-5)
    assert maps.gates is None


def test_inspect_cli_writes_figure_and_rejects_bad_index(
    trained_runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.png"
    assert main(["inspect", str(trained_runs["ndr"]), "--out", str(out)]) == 0
    assert out.exists()
    assert main(["inspect", str(trained_runs["ndr"]), "--index", "100000"]) == 2
    assert "--index must be in" in capsys.readouterr().err
    assert main(["inspect", str(trained_runs["ndr"]), "--split", "nope"]) == 2
