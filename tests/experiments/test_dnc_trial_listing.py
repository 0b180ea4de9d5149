"""``recombine runs`` on a DNC reproduction: its kept runs and its runs in progress, each with its last
evaluation as the store and the checkpoint hold it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from recombine.cli import main
from recombine.experiments.dnc_memory import (
    DNC_REPEAT_COPY,
    DNCRepeatCopyConfig,
    StoredTrials,
    model_and_train_configs,
    train_memory_task,
)
from recombine.experiments.dnc_trial_checkpoint import load_training_state
from recombine.experiments.dnc_trial_listing import dnc_trials, find_dnc_reproductions
from recombine.experiments.scripted_reproduction import run_scripted
from tiny_dnc import TINY_DNC_REPRODUCTION

SETTINGS = {**TINY_DNC_REPRODUCTION, "steps": 6, "eval_every": 3, "variants": ["dnc_ds"], "seeds": [0]}


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed 0 kept; seed 1 of the same settings killed after its step-3 checkpoint (its checkpoint left where
    the reproduction would resume it); a stray unreadable checkpoint; a kept run's leftover checkpoint."""
    out = tmp_path_factory.mktemp("dnc") / "repro"
    run_scripted(DNC_REPEAT_COPY, out, overrides=SETTINGS)
    # the reproduction started again with seeds 0 and 1 and killed while training seed 1
    stored_config = out / "experiment.yaml"
    stored_config.write_text(stored_config.read_text().replace("seeds:\n- 0\n", "seeds:\n- 0\n- 1\n"))
    assert yaml.safe_load(stored_config.read_text())["seeds"] == [0, 1]
    config = DNCRepeatCopyConfig(**SETTINGS)
    model, train = model_and_train_configs(config)
    model = dataclasses.replace(model, variant="dnc_ds")
    second = dataclasses.replace(train, seed=1)
    checkpoint = StoredTrials(out).partial_path(config.task(), model, second)
    train_memory_task(config.task(), model, second, checkpoint=checkpoint)  # leaves its step-3 checkpoint
    (checkpoint.parent / "dnc-seed7-0000000000.pt").write_bytes(b"cut short")  # matches no run: not listed
    # the kept run's checkpoint, left over by a kill between keeping the run and removing it: not listed twice
    kept_name = StoredTrials(out).run_name(config.task(), model, dataclasses.replace(train, seed=0))
    (checkpoint.parent / f"{kept_name}.pt").write_bytes(checkpoint.read_bytes())
    return out


def test_kept_and_in_progress_runs_with_their_last_evaluation(reproduction: Path) -> None:
    kept, running = dnc_trials(reproduction)
    store = StoredTrials(reproduction)
    task, model, train = store.finished()[0]
    stored = store.read(task, model, train)
    assert (kept.variant, kept.seed, kept.status, kept.step, kept.steps) == ("dnc_ds", 0, "kept", 6, 6)
    assert kept.eval_loss == pytest.approx(stored.eval_loss[-1])
    assert kept.sequence_accuracy == pytest.approx(stored.eval_sequence_accuracy[-1])
    assert kept.seconds == pytest.approx(stored.seconds)
    assert kept.ensemble == 1
    assert kept.bit_error == pytest.approx(stored.eval_bit_error[-1])
    state = load_training_state(reproduction / "trials" / "partial" / f"{running.name}.pt")
    assert (running.variant, running.seed, running.status, running.step, running.steps) == (
        "dnc_ds",
        1,
        "checkpoint",
        3,
        6,
    )
    assert (running.eval_loss, running.bit_error, running.sequence_accuracy) == state.evaluations[-1][1:]
    assert running.seconds == pytest.approx(state.seconds)


def test_recombine_runs_lists_them_unless_filtered(
    reproduction: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = reproduction.parent
    assert find_dnc_reproductions(root) == [reproduction]
    assert main(["runs", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"DNC runs in {reproduction}:" in out
    lines = out.splitlines()
    assert any(line.split()[:4] == ["dnc_ds", "0", "kept", "6/6"] for line in lines)
    assert any(line.split()[:4] == ["dnc_ds", "1", "checkpoint", "3/6"] for line in lines)
    assert sum(line.startswith("dnc_ds") for line in lines) == 2
    assert main(["runs", str(root), "--status", "finished"]) == 0  # filters select run directories only
    captured = capsys.readouterr()
    assert "DNC runs" not in captured.out
    assert "no runs under" in captured.err
