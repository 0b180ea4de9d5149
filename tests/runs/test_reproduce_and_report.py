"""A real (tiny) reproduction grid end to end: subprocess training, skip-on-rerun, report numbers
equal to the per-run results, paper numbers beside them."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS, ndr_ctl
from recombine.experiments.reproduction import Reproduction, Variant, run_grid
from recombine.runs.archive import archive_grid
from recombine.runs.directory_lock import exclusive_use
from recombine.runs.report import collect, render
from recombine.runs.store import RunDir

TINY_TASK = {"n_train": 300, "n_valid_iid": 40, "n_valid_ood": 40, "n_test_ood": 40}
TINY_MODEL = {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 2}


@pytest.fixture
def tiny_reproduction(monkeypatch: pytest.MonkeyPatch) -> ndr_ctl.Reproduction:
    tiny = replace(
        ndr_ctl.NDR_CTL,
        columns={column: {**overrides, **TINY_TASK} for column, overrides in ndr_ctl.NDR_CTL.columns.items()},
        variants=(Variant("NDR", "ndr", TINY_MODEL), Variant("LSTM", "lstm", {"d_model": 8})),
        train={"steps": 20, "batch_size": 8, "eval_every": 10, "threads": 1},
        column_train={},  # the real recipe trains the backward column longer
        quick_train={},
    )
    monkeypatch.setitem(REPRODUCTIONS, "ndr-ctl", tiny)
    return tiny


def test_grid_report_and_rerun(tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path) -> None:
    events: list[str] = []
    entries = run_grid(tiny_reproduction, tmp_path, seeds=2, quick=False, jobs=2, on_event=events.append)
    assert len(entries) == 2 * 2 * 2  # variants x directions x seeds
    assert all((tmp_path / e["run"] / "result.json").exists() for e in entries), events

    markdown = render(tmp_path)
    assert "| NDR |" in markdown and "| LSTM |" in markdown
    assert "1.00 ± 0.00" in markdown  # the paper's NDR number is printed beside ours
    _, results = collect(tmp_path)
    cell = results["table"]["NDR"]["backward"]
    runs = [json.loads((tmp_path / run / "result.json").read_text()) for run in cell["runs"]]
    assert cell["ood"]["values"] == [r["selected"]["test_ood"] for r in runs]
    assert cell["ood"]["n"] == 2
    assert (tmp_path / "report.md").read_text() == markdown

    events.clear()
    run_grid(tiny_reproduction, tmp_path, seeds=2, quick=False, on_event=events.append)
    assert events == ["8 of 8 runs already complete; training 0"]


def test_columns_and_rows_pick_cells_and_later_cells_join_the_report(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    entries = run_grid(
        tiny_reproduction, tmp_path, seeds=1, quick=False, labels=["LSTM"], columns=["backward"]
    )
    assert [(e["variant"], e["column"], e["seed"]) for e in entries] == [("LSTM", "backward", 1)]
    _, results = collect(tmp_path)
    assert "ood" in results["table"]["LSTM"]["backward"] and "ood" not in results["table"]["LSTM"]["forward"]

    run_grid(tiny_reproduction, tmp_path, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    _, results = collect(tmp_path)
    assert results["table"]["LSTM"]["forward"]["ood"]["n"] == 1
    assert results["table"]["LSTM"]["backward"]["ood"]["n"] == 1  # the earlier column stays in the report
    assert results["missing_runs"] == []


def test_archive_keeps_the_report_and_counts_as_finished_work(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    grid, archived = tmp_path / "grid", tmp_path / "archive"
    run_grid(tiny_reproduction, grid, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    assert archive_grid(grid, archived) == 1
    assert not list(archived.rglob("*.pt")) and not list(archived.rglob("events"))
    assert collect(archived)[1]["table"] == collect(grid)[1]["table"]
    assert render(archived) == render(grid)

    restored = tmp_path / "restored"
    shutil.copytree(archived, restored)
    events: list[str] = []
    run_grid(tiny_reproduction, restored, seeds=1, quick=False, labels=["LSTM"], on_event=events.append)
    assert events[0] == "1 of 2 runs already complete; training 1"  # only the new column trains
    assert collect(restored)[1]["table"]["LSTM"]["forward"] == collect(grid)[1]["table"]["LSTM"]["forward"]

    longer = replace(tiny_reproduction, train={**tiny_reproduction.train, "steps": 40})
    with pytest.raises(UserError, match="has no last.pt"):  # an archived run is not silently retrained
        run_grid(longer, restored, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    assert collect(restored)[1]["table"]["LSTM"]["forward"]["ood"]["n"] == 1

    # archiving again over an older archive leaves no stale records behind
    (grid / "runs" / "LSTM--forward--seed1" / "result.json").unlink()
    archive_grid(grid, archived)
    assert collect(archived)[1]["missing_runs"] == ["runs/LSTM--forward--seed1"]

    with pytest.raises(UserError, match="must not contain one another"):
        archive_grid(grid, grid / "archive")
    with pytest.raises(UserError, match="must not contain one another"):
        archive_grid(grid, tmp_path)
    with pytest.raises(UserError, match="is a grid directory with checkpoints"):
        archive_grid(archived, grid)  # a live grid directory is never overwritten
    with pytest.raises(UserError, match="no manifest.json"):
        archive_grid(tmp_path, tmp_path / "elsewhere")


def _records(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_an_archive_with_checkpoints_goes_on_elsewhere_as_the_grid_would(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    """Copied back, an archive made ``--with-checkpoints`` extends its finished runs to more steps from where
    they ended, evaluating exactly as the grid trained longer from the start; it is never overwritten."""
    from recombine.cli import main

    grid, archived, restored, direct = (tmp_path / name for name in ("grid", "archive", "restored", "direct"))
    cell = {"seeds": 1, "quick": False, "labels": ["LSTM"], "columns": ["forward"]}
    run_grid(tiny_reproduction, grid, **cell)
    assert main(["archive", str(grid), str(archived), "--with-checkpoints"]) == 0
    run = Path("runs") / "LSTM--forward--seed1"
    assert sorted(p.name for p in (archived / run).glob("*.pt")) == ["best.pt", "last.pt"]
    assert not list(archived.rglob("events"))
    for name in ("last.pt", "best.pt"):
        assert (archived / run / name).read_bytes() == (grid / run / name).read_bytes()

    shutil.copytree(archived, restored)
    longer = replace(tiny_reproduction, train={**tiny_reproduction.train, "steps": 40})
    run_grid(longer, restored, **cell)  # a records-only archive refuses this (test above)
    run_grid(longer, direct, **cell)
    kept = _records(archived / run)
    assert _records(restored / run)[: len(kept)] == kept  # went on from step 20 (its timings too), not afresh
    evaluations = [[r for r in _records(d / run) if r["kind"] == "eval"] for d in (restored, direct)]
    assert [e["step"] for e in evaluations[0]] == [10, 20, 30, 40]
    assert evaluations[0] == evaluations[1]
    extended, trained_longer = (json.loads((d / run / "result.json").read_text()) for d in (restored, direct))
    assert extended["steps"] == 40 and extended["selected"] == trained_longer["selected"]
    best = [RunDir(d / run).load_checkpoint("best") for d in (restored, direct)]
    assert best[0]["best_step"] == best[1]["best_step"]
    assert all(torch.equal(best[0]["model"][k], v) for k, v in best[1]["model"].items())

    with pytest.raises(UserError, match="is an archive with checkpoints"):
        archive_grid(grid, archived, with_checkpoints=True)  # it may be a grid's only copy
    assert (archived / run / "last.pt").is_file()


def test_an_archive_with_checkpoints_refuses_a_grid_in_training(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    """Records and checkpoints copied while a run trains could come from different steps: refused."""
    grid = tmp_path / "grid"
    run_grid(tiny_reproduction, grid, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    holding, release = threading.Event(), threading.Event()

    def train_it() -> None:  # another thread is refused like another process (directory_lock)
        with exclusive_use(grid / "runs" / "LSTM--forward--seed1"):
            holding.set()
            release.wait(30)

    trainer = threading.Thread(target=train_it)
    trainer.start()
    try:
        assert holding.wait(30)
        with pytest.raises(UserError, match="is in use"):
            archive_grid(grid, tmp_path / "archive", with_checkpoints=True)
        assert not (tmp_path / "archive").exists()  # refused before anything was written
        assert archive_grid(grid, tmp_path / "records") == 1  # records alone are only read
    finally:
        release.set()
        trainer.join()
    assert archive_grid(grid, tmp_path / "archive", with_checkpoints=True) == 1


def test_an_archive_keeps_a_failed_runs_log_and_an_html_report(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recombine.cli import main

    broken = replace(
        tiny_reproduction,
        variants=(*tiny_reproduction.variants, Variant("Broken", "lstm", {"d_model": -4})),
    )
    grid, archived = tmp_path / "grid", tmp_path / "archive"
    run_grid(broken, grid, seeds=1, quick=False, labels=["LSTM", "Broken"], columns=["forward"])
    assert main(["archive", str(grid), str(archived)]) == 0
    assert "Failed runs (1" in capsys.readouterr().out
    failed, finished = (
        archived / "runs" / "Broken--forward--seed1",
        archived / "runs" / "LSTM--forward--seed1",
    )
    assert (failed / "failure.json").is_file()
    assert (failed / "train.log").read_bytes() == (
        grid / "runs" / "Broken--forward--seed1" / "train.log"
    ).read_bytes()
    assert not (finished / "train.log").exists()  # a finished run's log is not a record
    assert "Broken" in (archived / "report.html").read_text()


def test_runs_of_a_row_a_later_recipe_dropped_stay_named_in_the_report(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    run_grid(tiny_reproduction, tmp_path, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    assert collect(tmp_path)[1]["runs_outside_recipe"] == []
    ndr_only = replace(tiny_reproduction, variants=tiny_reproduction.variants[:1])
    run_grid(ndr_only, tmp_path, seeds=1, quick=False, columns=["forward"])
    markdown = render(tmp_path)
    assert "| LSTM |" not in markdown  # the table follows the latest recipe ...
    assert collect(tmp_path)[1]["runs_outside_recipe"] == ["runs/LSTM--forward--seed1"]
    assert "does not define (1;" in markdown and "runs/LSTM--forward--seed1" in markdown  # ... and says so

    backward_only = replace(ndr_only, columns={"backward": ndr_only.columns["backward"]})
    (tmp_path / "runs" / "NDR--forward--seed1" / "result.json").unlink()  # unfinished, in a dropped column
    run_grid(backward_only, tmp_path, seeds=1, quick=False)
    _, results = collect(tmp_path)
    assert results["runs_outside_recipe"] == ["runs/LSTM--forward--seed1", "runs/NDR--forward--seed1"]
    assert results["missing_runs"] == []  # not reported as unfinished: this recipe would never train it


def test_a_changed_row_config_is_not_mixed_into_finished_runs(
    tiny_reproduction: ndr_ctl.Reproduction, tmp_path: Path
) -> None:
    run_grid(tiny_reproduction, tmp_path, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    changed = replace(
        tiny_reproduction,
        variants=(Variant("NDR", "ndr", TINY_MODEL), Variant("LSTM", "lstm", {"d_model": 12})),
    )
    with pytest.raises(UserError, match="another config"):
        run_grid(changed, tmp_path, seeds=1, quick=False, labels=["LSTM"], columns=["forward"])
    lstm_row = next(line for line in render(tmp_path).splitlines() if line.startswith("| LSTM |"))
    assert "not run" in lstm_row  # LSTM on the backward column was never asked for


@pytest.mark.parametrize("name", sorted(n for n, r in REPRODUCTIONS.items() if isinstance(r, Reproduction)))
def test_every_cell_of_every_reproduction_is_a_valid_run_config(name: str) -> None:
    from recombine import run_config

    reproduction = REPRODUCTIONS[name]
    for quick in (False, True):
        for variant, column, seed in reproduction.cells(1, reproduction.select_variants(None, quick)):
            config = run_config.resolve(reproduction.run_config(variant, column, seed, quick))
            assert config.model_name == variant.model
