"""``train.init_from``: a fresh run whose model starts from another run's weights (train/warm_start.py).

The reference for "starts from the source's weights" is the source's own evaluation: a warm run that takes
one step with a learning rate of 1e-12 evaluates as the source did at its last step; a cold run does not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import TINY_RUN
from recombine import run_config
from recombine.cli import main
from recombine.experiments.trial import config_overrides
from recombine.train import fit


def _fit(run: Path, *extra: str, resume: bool = False) -> dict[str, Any]:
    config = run_config.resolve(run_config.parse_overrides([*TINY_RUN, *extra]))
    return fit(config, run, resume=resume, progress=False)


def _evals(run: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "eval"]


def _weights(run: Path, which: str = "last") -> dict[str, torch.Tensor]:
    return torch.load(run / f"{which}.pt", map_location="cpu", weights_only=False)["model"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CTL run of 60 steps whose best checkpoint (step 20 or 40 or 60) is kept apart from last."""
    run = tmp_path_factory.mktemp("warm") / "source"
    _fit(run)
    return run


NO_LEARNING = ["train.lr=1e-12", "train.weight_decay=0", "train.steps=1", "train.eval_every=1"]


def test_a_warm_run_begins_with_the_source_weights(source: Path, tmp_path: Path) -> None:
    """Every split's accuracy and loss after one step at lr 1e-12 are the source's at step 60; a cold run
    with the same settings (the source's initial weights, one step) differs. Same seed: CTL's lookup table,
    and so the splits, depend on it."""
    result = _fit(tmp_path / "warm", *NO_LEARNING, f"train.init_from={source}")
    _fit(tmp_path / "cold", *NO_LEARNING)
    last_of_source = _evals(source)[-1]["splits"]
    warm, cold = _evals(tmp_path / "warm")[-1]["splits"], _evals(tmp_path / "cold")[-1]["splits"]
    for split, values in last_of_source.items():
        assert warm[split]["accuracy"] == values["accuracy"], split
        assert warm[split]["loss"] == pytest.approx(values["loss"], rel=1e-5), split
    assert any(cold[s]["loss"] != pytest.approx(v["loss"], rel=1e-3) for s, v in last_of_source.items())
    for name, weight in _weights(source).items():
        torch.testing.assert_close(_weights(tmp_path / "warm")[name], weight, rtol=0, atol=1e-9)
    assert result["initialised_from"] == {
        "run": str(source.resolve()),
        "checkpoint": "last",
        "step": 60,
        "differing_model_fields": [],
    }


def test_best_takes_the_selected_checkpoint_and_lists_other_settings(source: Path, tmp_path: Path) -> None:
    best_step = json.loads((source / "result.json").read_text())["best_step"]
    assert best_step != 60  # else best.pt and last.pt would hold the same weights
    result = _fit(
        tmp_path / "warm",
        *NO_LEARNING,
        "model.dropout=0.3",
        f"train.init_from={source}",
        "train.init_checkpoint=best",
    )
    assert result["initialised_from"]["step"] == best_step
    assert result["initialised_from"]["differing_model_fields"] == ["dropout"]
    for name, weight in _weights(source, "best").items():
        torch.testing.assert_close(_weights(tmp_path / "warm")[name], weight, rtol=0, atol=1e-9)


def test_a_resumed_warm_run_needs_no_source_and_equals_one_run_in_one_go(
    source: Path, tmp_path: Path
) -> None:
    """The warm start happens once: resuming loads the run's own checkpoint (the source may be gone), keeps
    the record of where the weights came from, and continues as the run trained in one go."""
    copy = tmp_path / "source-copy"
    shutil.copytree(source, copy)
    warm = ["train.eval_every=10", f"train.init_from={copy}"]
    whole = _fit(tmp_path / "whole", *warm, "train.steps=30")
    _fit(tmp_path / "parts", *warm, "train.steps=20")
    shutil.rmtree(copy)
    parts = _fit(tmp_path / "parts", *warm, "train.steps=30", resume=True)
    assert _evals(tmp_path / "parts") == _evals(tmp_path / "whole")
    assert parts["initialised_from"] == whole["initialised_from"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.init_from=MISSING"], "is not a run directory"),
        (["train.init_from=EMPTY"], "has no last.pt"),
        (
            ["train.init_from=SOURCE_FILE"],
            "name the run directory; train.init_checkpoint=best|last picks the file",
        ),
        (["train.init_from=FOREIGN"], "is not a recombine train checkpoint"),
        (["train.init_checkpoint=first"], "unknown train.init_checkpoint 'first'"),
        (["train.init_checkpoint=best"], "train.init_checkpoint goes with train.init_from=RUN"),
        (["train.init_from=LAST_ONLY", "train.init_checkpoint=best"], "has no best.pt"),
        (["model=transformer", "train.init_from=SOURCE"], "model 'ndr', this run builds 'transformer'"),
        (["task.n_functions=6", "train.init_from=SOURCE"], "the input vocab of"),
        (["model.d_model=24", "train.init_from=SOURCE"], "do not fit this model: shape"),
    ],
)
def test_bad_warm_starts_are_one_line_and_leave_no_run(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "last-only").mkdir()
    shutil.copy(source / "last.pt", tmp_path / "last-only")
    (tmp_path / "foreign").mkdir()
    torch.save(torch.zeros(3), tmp_path / "foreign" / "last.pt")  # a .pt file, but not a run's checkpoint
    paths = {
        "SOURCE_FILE": source / "last.pt",
        "FOREIGN": tmp_path / "foreign",
        "MISSING": tmp_path / "missing",
        "EMPTY": tmp_path / "empty",
        "LAST_ONLY": tmp_path / "last-only",
        "SOURCE": source,
    }
    overrides = [o.split("=")[0] + "=" + str(paths.get(o.split("=")[1], o.split("=")[1])) for o in overrides]
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--run-dir", str(run), *TINY_RUN, *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not run.exists()


def test_a_full_config_with_no_warm_start_passes_through_train_overrides() -> None:
    """A sweep trial hands a whole resolved config to ``recombine train`` as overrides; the empty
    ``init_from`` must come back empty, not as null (which a ``str`` field refuses)."""
    config = run_config.resolve(run_config.parse_overrides(TINY_RUN))
    again = run_config.resolve(run_config.parse_overrides(config_overrides(config.to_dict())))
    assert again == config and again.train.init_from == ""
