"""``recombine runs`` on a DNC reproduction: its kept runs and its runs in progress, each with its last
evaluation as the store and the checkpoint hold it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dnc_in_progress import SETTINGS, stopped_reproduction
from recombine.cli import main
from recombine.experiments.dnc_memory import DNCRepeatCopyConfig, StoredTrials, model_and_train_configs
from recombine.experiments.dnc_trial_checkpoint import load_training_state
from recombine.experiments.dnc_trial_listing import dnc_trials, find_dnc_reproductions


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed 0 kept; seed 1 killed after its step-3 checkpoint (:func:`stopped_reproduction`); a stray
    unreadable checkpoint; a kept run's leftover checkpoint."""
    out = tmp_path_factory.mktemp("dnc") / "repro"
    checkpoint = stopped_reproduction(out)
    (checkpoint.parent / "dnc-seed7-0000000000.pt").write_bytes(b"cut short")  # matches no run: not listed
    # the kept run's checkpoint, left over by a kill between keeping the run and removing it: not listed twice
    config = DNCRepeatCopyConfig(**SETTINGS)
    model, train = model_and_train_configs(config)
    model = dataclasses.replace(model, variant="dnc_ds")
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
    # the curves so far, for `recombine report`'s progress figure
    assert [e[0] for e in kept.evaluations] == [0, 3, 6]
    assert [e[1] for e in kept.evaluations] == pytest.approx(stored.eval_loss.tolist())
    assert list(kept.train_loss) == pytest.approx(stored.train_loss.tolist())
    assert running.evaluations == tuple(state.evaluations)
    assert len(running.train_loss) == 3


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
