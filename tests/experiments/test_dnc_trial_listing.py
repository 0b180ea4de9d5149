"""``recombine runs`` on a DNC reproduction: its kept runs and its runs in progress, each with its last
evaluation as the store and the checkpoint hold it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

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
    the reproduction would resume it); a stray unreadable checkpoint."""
    out = tmp_path_factory.mktemp("dnc") / "repro"
    run_scripted(DNC_REPEAT_COPY, out, overrides=SETTINGS)
    config = DNCRepeatCopyConfig(**SETTINGS)
    model, train = model_and_train_configs(config)
    model = dataclasses.replace(model, variant="dnc_ds")
    second = dataclasses.replace(train, seed=1)
    checkpoint = StoredTrials(out).partial_path(config.task(), model, second)
    train_memory_task(config.task(), model, second, checkpoint=checkpoint)  # leaves its step-3 checkpoint
    (checkpoint.parent / "dnc-seed7-0000000000.pt").write_bytes(b"cut short")
    return out


def test_kept_and_in_progress_runs_with_their_last_evaluation(reproduction: Path) -> None:
    kept, *in_progress = dnc_trials(reproduction)
    store = StoredTrials(reproduction)
    task, model, train = store.finished()[0]
    stored = store.read(task, model, train)
    assert (kept.variant, kept.seed, kept.status, kept.step, kept.steps) == ("dnc_ds", 0, "kept", 6, 6)
    assert kept.eval_loss == pytest.approx(stored.eval_loss[-1])
    assert kept.sequence_accuracy == pytest.approx(stored.eval_sequence_accuracy[-1])
    assert kept.seconds == pytest.approx(stored.seconds)
    assert kept.ensemble == 1
    unreadable, running = in_progress  # sorted by variant: dnc, then dnc_ds
    assert (unreadable.variant, unreadable.seed, unreadable.status) == ("dnc", 7, "unreadable")
    state = load_training_state(running.file)
    assert (running.variant, running.seed, running.status, running.step, running.steps) == (
        "dnc_ds",
        1,
        "in progress",
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
    assert any(line.split()[:5] == ["dnc_ds", "1", "in", "progress", "3/6"] for line in lines)
    assert main(["runs", str(root), "--status", "finished"]) == 0  # filters select run directories only
    captured = capsys.readouterr()
    assert "DNC runs" not in captured.out
    assert "no runs under" in captured.err
