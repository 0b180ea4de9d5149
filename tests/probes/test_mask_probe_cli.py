"""``recombine probe masks`` on a tiny CTL run made by ``recombine train``: outputs, numbers, user errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_RUN
from recombine.cli import main
from recombine.errors import UserError
from recombine.probes.attention_maps import load_run_model
from recombine.probes.mask_probe import MaskTarget
from recombine.probes.mask_sets import MaskSet
from recombine.train.objectives import ClassificationObjective
from zeroed_weights import zeroed_outside


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run") / "ctl"
    assert main(["train", *TINY_RUN, "train.steps=20", "--run-dir", str(path), "--no-progress"]) == 0
    return path


@pytest.fixture(scope="module")
def probed(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("probe")
    argv = ["probe", "masks", str(run_dir), "--target", "train", "--target", "train:depth=3"]
    assert main([*argv, "--steps", "15", "--lr", "0.3", "--batch-size", "32", "--out", str(out)]) == 0
    return out


def test_target_syntax_and_depth_subset(run_dir: Path) -> None:
    assert MaskTarget.parse("train") == MaskTarget("train")
    assert MaskTarget.parse(" valid_iid:depth=3 ") == MaskTarget("valid_iid", 3)
    assert MaskTarget("train", 3).label == "train:depth=3"
    for bad in ("train:depth=", "train:deep=3", "", "a b"):
        with pytest.raises(UserError, match="SPLIT:depth=N"):
            MaskTarget.parse(bad)
    _, task = load_run_model(run_dir)
    train = task.splits["train"]
    subset = MaskTarget("train", 3).select(task)
    expected = [i for i in range(len(train)) if train.depth[i] == 3]
    assert len(subset) == len(expected) > 0
    assert all(np.array_equal(subset.inputs[k], train.inputs[i]) for k, i in enumerate(expected))
    np.testing.assert_array_equal(subset.targets, train.targets[expected])


def test_probe_writes_masks_results_report_and_sharing_figure(probed: Path, run_dir: Path) -> None:
    assert {p.name for p in probed.iterdir()} == {"masks", "results.json", "report.md", "sharing.png"}
    assert {p.name for p in (probed / "masks").iterdir()} == {"train.pt", "train-depth3.pt"}
    results = json.loads((probed / "results.json").read_text())
    assert list(results["accuracy"]) == ["none", "train", "~train", "train:depth=3", "~train:depth=3"]
    model, task = load_run_model(run_dir)
    objective = ClassificationObjective()
    for split in task.splits:  # "none" is the unmasked model, evaluated independently here
        expected = objective.evaluate(model, objective.prepare(task.splits[split]), 64)["accuracy"]
        assert results["accuracy"]["none"][split] == pytest.approx(expected)
    first = MaskSet.load(probed / "masks" / "train.pt")
    second = MaskSet.load(probed / "masks" / "train-depth3.pt")
    assert 0 < first.kept_fraction() < 1  # 15 steps at lr 0.3 remove weights the target does not need
    assert results["kept_fraction"]["train"] == pytest.approx(first.kept_fraction())
    shared = (first & second).n_kept()
    assert results["iou"] == pytest.approx(shared / (first | second).n_kept())
    assert results["iomin"] == pytest.approx(shared / min(first.n_kept(), second.n_kept()))
    assert set(results["sharing"]) == set(first.names)
    assert "| ~train |" in (probed / "report.md").read_text()


def test_inverted_mask_accuracy_equals_the_model_with_those_weights_zeroed(
    probed: Path, run_dir: Path
) -> None:
    results = json.loads((probed / "results.json").read_text())
    model, task = load_run_model(run_dir)
    inverted = ~MaskSet.load(probed / "masks" / "train.pt")
    zeroed = zeroed_outside(model, inverted)
    objective = ClassificationObjective()
    accuracy = objective.evaluate(zeroed, objective.prepare(task.splits["valid_iid"]), 64)["accuracy"]
    assert results["accuracy"]["~train"]["valid_iid"] == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nope", "no split 'nope' in task ctl; valid choices:"),
        ("train:depth=x", "expected SPLIT or SPLIT:depth=N"),
        ("train:depth=99", "no examples of depth 99; valid depths:"),
    ],
)
def test_bad_targets_are_one_line_errors_with_exit_code_2(
    run_dir: Path, target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "masks", str(run_dir), "--target", target, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_not_a_run_dir_and_missing_target_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "masks", str(tmp_path), "--target", "train"]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "masks", str(tmp_path)])
    assert exit_info.value.code == 2
