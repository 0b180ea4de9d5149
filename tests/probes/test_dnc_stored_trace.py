"""``recombine probe dnc-trace DIR``: a stored DNC run's trace, drawn later from its weights and settings.

References: the model the reproduction trained (kept in memory by the experiment), traced on the K-th
sequence of the evaluation set that the training loop itself draws (``sample_batch`` of the seed's
evaluation generator); CLI errors exit 2 with one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recombine.cli import main
from recombine.experiments.dnc_memory import (
    DNC_ASSOC_RECALL,
    _model_and_train,
    trace_sequence,
    train_variants,
)
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.probes.dnc_stored_trace import stored_runs, stored_trace
from recombine.tasks.memory_tasks import MemorySequence, sample_batch
from tiny_dnc import TINY_DNC_REPRODUCTION

TINY = {**TINY_DNC_REPRODUCTION, "n_cells": 6, "variants": ["dnc", "dnc_m"]}


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("assoc-recall")
    run_scripted(DNC_ASSOC_RECALL, out, seeds=2, overrides=TINY)
    return out


def test_every_stored_run_is_found_with_its_settings(reproduction: Path) -> None:
    runs = stored_runs(reproduction)
    assert [(run.variant, run.seed, run.steps) for run in runs] == [
        ("dnc", 0, 3),
        ("dnc", 1, 3),
        ("dnc_m", 0, 3),
        ("dnc_m", 1, 3),
    ]
    config = DNC_ASSOC_RECALL.resolve_config(2, False, TINY)
    assert all(run.task == config.task() for run in runs)  # tuples restored from the JSON key's lists
    assert {run.model.n_cells for run in runs} == {6}


def test_the_trace_is_the_trained_models_trace_on_that_evaluation_sequence(reproduction: Path) -> None:
    config = DNC_ASSOC_RECALL.resolve_config(2, False, TINY)
    model_config, train = _model_and_train(config)
    # the models the reproduction trained, read back by its own store (nothing is trained here)
    trained = train_variants(config.task(), model_config, train, ["dnc_m"], [1], reproduction)["dnc_m"][
        0
    ].model
    example = 2
    batch = sample_batch(config.task(), config.eval_size, np.random.default_rng([1, 1]))  # the evaluation set
    n = int(batch.lengths[example])
    sequence = MemorySequence(
        batch.inputs[example, :n], batch.targets[example, :n], batch.loss_mask[example, :n]
    )
    with torch.no_grad():
        expected = trace_sequence(trained, sequence)
    run, arrays = stored_trace(reproduction, variant="dnc_m", seed=1, example=example)
    assert (run.variant, run.seed) == ("dnc_m", 1)
    assert arrays.read_masks is not None  # a masked model: the Fig. 2.2b panel is drawn
    for name in (
        "inputs",
        "targets",
        "outputs",
        "write_weighting",
        "read_weightings",
        "forward",
        "read_modes",
    ):
        np.testing.assert_array_equal(getattr(arrays, name), getattr(expected, name), err_msg=name)
    np.testing.assert_array_equal(arrays.read_masks, expected.read_masks)


def test_cli_writes_the_default_path_and_rejects_ambiguous_or_unknown_choices(
    reproduction: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "dnc-trace", str(reproduction), "--variant", "dnc", "--seed", "0"]) == 0
    png = reproduction / "probes" / "trace_dnc_seed0_3steps_ex0.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    cases = [
        ([], "4 stored runs match"),
        (["--variant", "dnc_md"], "no stored run of variant 'dnc_md'"),
        (["--variant", "dnc", "--seed", "7"], "no stored run matches; stored: dnc seed 0, 3 steps"),
        (["--variant", "dnc", "--seed", "0", "--head", "1"], "read head must be in [0, 0]"),
        (["--variant", "dnc", "--seed", "0", "--example", "-1"], "index must be >= 0"),
    ]
    for extra, message in cases:
        assert main(["probe", "dnc-trace", str(reproduction), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (extra, err)
    assert main(["probe", "dnc-trace", str(tmp_path)]) == 2
    assert "not the output directory of a DNC reproduction" in capsys.readouterr().err
