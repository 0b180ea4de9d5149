"""``recombine probe dnc-trace DIR``: a stored DNC run's trace, drawn later from its weights and settings.

References: the models the reproduction trained in this process (before anything was read back), traced on
the K-th sequence of the evaluation set as the training loop draws it (``sample_batch`` of the seed's
evaluation generator); CLI errors exit 2 with one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from recombine.cli import main
from recombine.errors import UserError
from recombine.experiments.dnc_memory import (
    DNC_ASSOC_RECALL,
    DNCReproductionResult,
    evaluation_sequence,
    run_dnc_assoc_recall,
    trace_sequence,
)
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.probes.dnc_stored_trace import load_model, stored_runs, stored_trace
from recombine.tasks.memory_tasks import MemorySequence, sample_batch
from tiny_dnc import TINY_DNC_REPRODUCTION

TINY = {**TINY_DNC_REPRODUCTION, "n_cells": 6, "variants": ["dnc", "dnc_m"]}

Reproduced = tuple[Path, DNCReproductionResult]


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Reproduced:
    out = tmp_path_factory.mktemp("assoc-recall")
    return out, run_dnc_assoc_recall(out, DNC_ASSOC_RECALL.resolve_config(2, False, TINY))


def test_every_stored_run_is_found_with_its_settings(reproduction: Reproduced) -> None:
    directory, result = reproduction
    runs = stored_runs(directory)
    assert [(run.model.variant, run.train.seed, run.train.steps) for run in runs] == [
        ("dnc", 0, 3),
        ("dnc", 1, 3),
        ("dnc_m", 0, 3),
        ("dnc_m", 1, 3),
    ]
    assert all(run.task == result.config.task() for run in runs)  # tuples restored from the JSON key's lists
    assert {run.model.n_cells for run in runs} == {6}
    assert all((directory / "trials" / f"{run.name}.pt").is_file() for run in runs)


def test_the_trace_is_the_trained_models_trace_on_that_evaluation_sequence(reproduction: Reproduced) -> None:
    directory, result = reproduction
    trained = result.comparison.results["dnc_m"][1].model  # seed 1, as trained (not read back)
    example = 2
    task = result.config.task()
    batch = sample_batch(task, result.config.eval_size, np.random.default_rng([1, 1]))  # the evaluation set
    n = int(batch.lengths[example])
    sequence = MemorySequence(
        batch.inputs[example, :n], batch.targets[example, :n], batch.loss_mask[example, :n]
    )
    expected = trace_sequence(trained, sequence)
    run, arrays = stored_trace(directory, variant="dnc_m", seed=1, example=example)
    assert (run.model.variant, run.train.seed) == ("dnc_m", 1)
    assert arrays.read_masks is not None and expected.read_masks is not None  # the Fig. 2.2b panel
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


def test_cli_writes_the_figure_and_rejects_bad_choices_in_one_line(
    reproduction: Reproduced, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, _ = reproduction
    assert main(["probe", "dnc-trace", str(directory), "--variant", "dnc", "--seed", "0"]) == 0
    (png,) = (directory / "probes").glob("trace_dnc-seed0-*_ex0.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    one = ["--variant", "dnc", "--seed", "0"]
    cases = [
        ([], "4 stored runs match"),
        (["--variant", "dnc_md"], "no stored run of variant 'dnc_md'"),
        (["--variant", "dnc", "--seed", "7"], "no stored run matches; stored: dnc-seed0-"),
        ([*one, "--head", "1"], "read head must be in [0, 0]"),
        ([*one, "--example", "-1"], "--example must be in [0, 3]"),
        ([*one, "--example", "4"], "--example must be in [0, 3]"),  # eval_size 4: past the evaluation set
        ([*one, "--out", str(tmp_path / "t.foo")], "--out must end in one of .png, .pdf, .svg"),
    ]
    for extra, message in cases:
        assert main(["probe", "dnc-trace", str(directory), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (extra, err)
    assert main(["probe", "dnc-trace", str(tmp_path)]) == 2
    assert "not the output directory of a DNC reproduction" in capsys.readouterr().err


def test_runs_differing_only_in_other_settings_are_told_apart_by_name(
    reproduction: Reproduced, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "both"
    shutil.copytree(reproduction[0], directory)
    run_scripted(DNC_ASSOC_RECALL, directory, seeds=1, overrides={**TINY, "n_cells": 5, "variants": ["dnc"]})
    capsys.readouterr()
    assert main(["probe", "dnc-trace", str(directory), "--variant", "dnc", "--seed", "0"]) == 2
    err = capsys.readouterr().err
    assert "2 stored runs match" in err and "--run" in err
    names = [run.name for run in stored_runs(directory) if run.model.variant == "dnc" and run.train.seed == 0]
    assert len(set(names)) == 2
    picked = {name: stored_trace(directory, run_name=name)[0].model.n_cells for name in names}
    assert sorted(picked.values()) == [5, 6]
    # a weights file that cannot be read is one line too, not a traceback
    (directory / "trials" / f"{names[0]}.pt").write_bytes(b"not a checkpoint")
    assert main(["probe", "dnc-trace", str(directory), "--run", names[0]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the weights of {names[0]}: " in err and "cannot be read" in err


def test_a_run_still_training_is_listed_and_traced_from_its_checkpoint(tmp_path: Path) -> None:
    """A directory whose experiment.yaml names a 12-step run that has a checkpoint at step 10 (as a killed or
    still running reproduction leaves it): the probe lists it as in progress beside the kept run, and its
    trace is that of the model trained for 10 steps."""
    import dataclasses

    from omegaconf import OmegaConf

    from recombine.experiments.dnc_memory import StoredTrials, model_and_train_configs, train_memory_task
    from recombine.experiments.scripted_reproduction import CONFIG_FILE

    out = tmp_path / "assoc-recall"
    overrides = {**TINY, "variants": ["dnc_m"], "steps": 6, "eval_every": 2}
    run_scripted(DNC_ASSOC_RECALL, out, seeds=1, overrides=overrides)  # kept: the 6-step run
    longer = DNC_ASSOC_RECALL.resolve_config(1, False, {**overrides, "steps": 12})
    (out / CONFIG_FILE).write_text(OmegaConf.to_yaml(OmegaConf.structured(longer)))
    task, (model, train) = longer.task(), model_and_train_configs(longer)
    model, train = dataclasses.replace(model, variant="dnc_m"), dataclasses.replace(train, seed=0)
    checkpoint = StoredTrials(out).partial_path(task, model, train)
    train_memory_task(task, model, train, checkpoint=checkpoint)  # its last checkpoint: step 10
    ten_steps = train_memory_task(task, model, dataclasses.replace(train, steps=10)).model

    runs = stored_runs(out)
    assert [(run.train.steps, run.at_step) for run in runs] == [(6, None), (12, 10)]
    assert "in progress: step 10" in runs[1].label
    run, arrays = stored_trace(out, steps=12, example=1)
    expected = trace_sequence(ten_steps, evaluation_sequence(task, 0, 1))
    assert run.at_step == 10 and arrays.read_masks is not None
    np.testing.assert_array_equal(arrays.outputs, expected.outputs)
    np.testing.assert_array_equal(arrays.read_masks, expected.read_masks)
    # a checkpoint left over beside the kept run of the same settings is not listed a second time
    kept = StoredTrials(out).partial_path(task, model, dataclasses.replace(train, steps=6))
    shutil.copy(checkpoint, kept)
    assert [(run.train.steps, run.at_step) for run in stored_runs(out)] == [(6, None), (12, 10)]
    kept.unlink()
    # a run that finished (its checkpoint removed) after it was listed: one clear error
    shutil.rmtree(out / "trials" / "partial")
    with pytest.raises(UserError, match="no readable checkpoint any more"):
        load_model(out, runs[1])
    with pytest.raises(UserError, match="no stored run matches"):
        stored_trace(out, steps=12)


def test_an_unreadable_experiment_yaml_is_said_and_the_kept_runs_still_listed(
    reproduction: Reproduced, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from omegaconf import OmegaConf

    directory, result = reproduction
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    (copy / "trials" / "partial").mkdir(exist_ok=True)
    (copy / "trials" / "partial" / "dnc-seed0-0123456789.pt").write_bytes(b"not a checkpoint")
    (copy / "experiment.yaml").write_text("")
    capsys.readouterr()
    assert len(stored_runs(copy)) == 4  # the kept runs
    assert "experiment.yaml cannot be read (not a mapping of settings)" in capsys.readouterr().err
    (copy / "experiment.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(result.config)))
    assert len(stored_runs(copy)) == 4
    assert "matches no run of experiment.yaml" in capsys.readouterr().err
