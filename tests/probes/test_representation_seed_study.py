"""The representation probe over a directory of runs (thesis 6.3.1, E.2.2): each CTL++ run is probed and set
beside the accuracy its trainer recorded for the checkpoint the probe loads."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine import run_config
from recombine.cli import main
from recombine.errors import UserError
from recombine.probes.representation_compatibility import representation_compatibility
from recombine.probes.representation_seed_study import (
    SUMMARY_COLUMNS,
    SeedStudy,
    StudiedRun,
    checkpoint_accuracies,
    read_study,
    seed_study,
    short_condition_names,
    write_study,
)
from recombine.runs.selection import read_evaluations
from recombine.train import fit
from tiny_ctlpp import TINY_CTLPP


def _train(overrides: list[str], path: Path) -> None:
    fit(run_config.resolve(run_config.parse_overrides(overrides)), path, progress=False)


#: hand-made test_ood accuracies of the evaluations of runs/NDR--R--seed3 by step (its best.pt: step 10)
HAND_MADE_TEST_OOD = {5: 0.2, 10: 0.97, 15: 0.5, 20: 0.4}


@pytest.fixture(scope="module")
def study_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Laid out as a reproduction's output: two seeds of one CTL++ row; a copy of seed 1 as seed 3 whose
    evaluations are rewritten with distinct accuracies and whose best.pt is moved to step 10 (the tiny runs
    score the same at every evaluation, which would hide reading the wrong one); a copy without best.pt;
    and a run of another task (only its config is read)."""
    root = tmp_path_factory.mktemp("study")
    runs = root / "runs"
    for seed in (1, 2):
        _train([*TINY_CTLPP, f"seed={seed}", "train.eval_every=5"], runs / f"NDR--R--seed{seed}")
    shutil.copytree(runs / "NDR--R--seed1", runs / "NDR--R--seed3")
    metrics = runs / "NDR--R--seed3" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for record in records:
        if record["kind"] == "eval":
            record["splits"]["test_ood"]["accuracy"] = HAND_MADE_TEST_OOD[record["step"]]
    metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    best = torch.load(runs / "NDR--R--seed3" / "best.pt", weights_only=False)
    torch.save(best | {"step": 10}, runs / "NDR--R--seed3" / "best.pt")
    shutil.copytree(runs / "NDR--R--seed1", runs / "NDR--R--seed9")
    (runs / "NDR--R--seed9" / "best.pt").unlink()
    (runs / "NDR--ctl--seed1").mkdir()
    (runs / "NDR--ctl--seed1" / "config.yaml").write_text(
        "seed: 1\ntask:\n  name: ctl\nmodel:\n  name: ndr\n"
    )
    return root


def test_each_run_is_probed_beside_the_accuracy_its_trainer_recorded(study_root: Path) -> None:
    study = seed_study(study_root, progress=False)
    names = ["runs/NDR--R--seed1", "runs/NDR--R--seed2", "runs/NDR--R--seed3"]
    assert [r.name for r in study.runs] == names
    assert [(r.condition, r.seed, r.variant) for r in study.runs] == [
        ("runs/NDR--R", 1, "R"),
        ("runs/NDR--R", 2, "R"),
        ("runs/NDR--R", 1, "R"),  # a copy of seed 1: its config says seed 1
    ]
    assert study.skipped == [  # find_runs sorts by path
        ("runs/NDR--R--seed9", "no best checkpoint"),
        ("runs/NDR--ctl--seed1", "task ctl, not ctlpp"),
    ]
    for run in study.runs[:2]:
        path = study_root / run.name
        result = json.loads((path / "result.json").read_text())
        # the best checkpoint is the one the trainer selected: its step and its accuracies are in result.json
        assert run.step == result["best_step"] == torch.load(path / "best.pt", weights_only=False)["step"]
        assert run.accuracy == pytest.approx(result["selected"])
        probe = representation_compatibility(path).summary()
        assert run.summary == probe | {
            "similarity_gap": probe["similarity_within_groups"] - probe["similarity_across_groups"]
        }
    hand_made = study.runs[2]
    assert (hand_made.step, hand_made.accuracy["test_ood"]) == (10, pytest.approx(0.97))
    assert hand_made.outcome("test_ood", 0.95) == "succeeded"
    last = seed_study(study_root, checkpoint="last", progress=False).runs[2]
    assert (last.step, last.accuracy["test_ood"]) == (20, pytest.approx(0.4))  # train.steps of TINY_CTLPP
    assert last.outcome("test_ood", 0.95) == "failed"


def test_a_run_the_probe_cannot_load_is_listed_not_fatal(study_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(study_root / "runs" / "NDR--R--seed2", root / "good")
    shutil.copytree(study_root / "runs" / "NDR--R--seed2", root / "corrupt")
    (root / "corrupt" / "best.pt").write_bytes(b"not a checkpoint")
    study = seed_study(root, progress=False)
    assert [r.name for r in study.runs] == ["good"]
    assert [name for name, _ in study.skipped] == ["corrupt"] and "corrupt" in study.skipped[0][1]
    with pytest.raises(UserError, match="threshold must be an accuracy in"):
        seed_study(root, threshold=95, progress=False)


def test_accuracies_are_read_at_the_checkpoint_step_only(study_root: Path) -> None:
    evaluations = read_evaluations(study_root / "runs" / "NDR--R--seed3")
    assert [e.step for e in evaluations] == [5, 10, 15, 20]
    for step, accuracy in HAND_MADE_TEST_OOD.items():
        assert checkpoint_accuracies(evaluations, step)["test_ood"] == pytest.approx(accuracy)
    assert checkpoint_accuracies(evaluations, 7) == {}  # e.g. a last.pt written when a run was stopped


def _run(seed: int, accuracy: float | None, across: float, clusters: float) -> StudiedRun:
    summary = dict.fromkeys(SUMMARY_COLUMNS, 0.5) | {
        "similarity_across_groups": across,
        "mean_clusters": clusters,
    }
    return StudiedRun(
        name=f"runs/X--seed{seed}",
        condition="X",
        seed=seed,
        variant="R",
        step=100,
        accuracy={} if accuracy is None else {"test_ood": accuracy},
        summary=summary,
    )


def test_outcomes_and_means_on_hand_made_runs(tmp_path: Path) -> None:
    runs = [
        _run(1, 0.99, 0.95, 1.0),
        _run(2, 0.95, 0.85, 1.5),
        _run(3, 0.40, 0.60, 2.0),
        _run(4, None, 0.1, 2.0),
    ]
    study = SeedStudy(tmp_path, runs, split="test_ood", threshold=0.95)
    assert [r.outcome("test_ood", 0.95) for r in runs] == ["succeeded", "succeeded", "failed", None]
    means = study.means()
    assert means["succeeded"] is not None and means["failed"] is not None
    assert means["succeeded"]["similarity_across_groups"] == pytest.approx((0.95 + 0.85) / 2)
    assert means["succeeded"]["mean_clusters"] == pytest.approx(1.25)
    assert means["failed"]["similarity_across_groups"] == pytest.approx(0.60)  # run 4 was never evaluated
    assert (study.count("succeeded"), study.count("failed")) == (2, 1)
    assert SeedStudy(tmp_path, runs, threshold=1.0).means()["succeeded"] is None
    table = study.table().splitlines()
    assert sum(line.startswith("| X |") for line in table) == 4
    assert any("not evaluated" in line for line in table)
    written = write_study(study, tmp_path / "out")
    assert [p.name for p in written] == ["seed_study.md", "seed_study.json", "seed_study.png"]
    data = json.loads(written[1].read_text())
    assert read_study(written[1]).to_json() == data  # the figure can be drawn again from the file
    assert [r["outcome"] for r in data["runs"]] == ["succeeded", "succeeded", "failed", None]
    assert data["means"]["failed"]["mean_clusters"] == pytest.approx(2.0)
    assert np.isclose(data["threshold"], 0.95)


def test_rank_correlations_match_a_naive_pearson_of_ranks(tmp_path: Path) -> None:
    accuracies = [0.1, 0.5, 0.3, 0.9, 0.7]
    across = [0.2, 0.6, 0.5, 0.4, 0.9]
    runs = [_run(i, a, x, 2.0) for i, (a, x) in enumerate(zip(accuracies, across, strict=True))]
    runs.append(_run(9, None, 5.0, 2.0))  # not evaluated: left out
    study = SeedStudy(tmp_path, runs)

    def ranks(values: list[float]) -> np.ndarray:  # no ties in these values
        return np.argsort(np.argsort(values)).astype(float)

    expected = np.corrcoef(ranks(across), ranks(accuracies))[0, 1]
    correlations = study.correlations()
    assert correlations["similarity_across_groups"] == pytest.approx(expected)
    assert expected == pytest.approx(1 - 6 * 12 / (5 * 24))  # by hand: squared rank differences sum to 12
    assert correlations["mean_clusters"] is None  # constant
    assert SeedStudy(tmp_path, runs[:2]).correlations()["similarity_across_groups"] is None  # under 3 runs
    assert "+0.40" in study.table()


def test_short_condition_names_never_split_a_name(tmp_path: Path) -> None:
    assert short_condition_names(["runs/BiLSTM--fn12-sym5", "runs/BiLSTM--fn16-sym5"]) == {
        "runs/BiLSTM--fn12-sym5": "fn12-sym5",  # the common "runs/BiLSTM--fn1" is cut back to "--"
        "runs/BiLSTM--fn16-sym5": "fn16-sym5",
    }
    assert short_condition_names(["a/NDR--R", "b/NDR--R"]) == {"a/NDR--R": "a/NDR--R", "b/NDR--R": "b/NDR--R"}
    assert short_condition_names(["runs/X"]) == {"runs/X": "runs/X"}
    many = [_run(i, 0.1 * i, 0.1 * i, 2.0) for i in range(1, 9)]
    many = [
        dataclasses.replace(r, condition=f"runs/L--c{i}") for i, r in enumerate(many * 2)
    ]  # 16 conditions
    assert write_study(SeedStudy(tmp_path, many), tmp_path / "many")[2].stat().st_size > 0  # labelled points


def test_cli_probes_a_run_or_a_directory_of_runs(
    study_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    assert main(["probe", "representations", str(study_root), "--out", str(out), "--threshold", "0"]) == 0
    printed = capsys.readouterr().out
    assert "| runs/NDR--R | 1 |" in printed and "| runs/NDR--R | 2 |" in printed and "Not probed:" in printed
    data = json.loads((out / "seed_study.json").read_text())
    assert [r["outcome"] for r in data["runs"]] == ["succeeded"] * 3  # threshold 0
    for name in ("runs/NDR--R--seed1", "runs/NDR--R--seed3"):  # every run's own probe outputs
        assert (out / name / "compatibility.json").is_file() and (out / name / "similarity.png").is_file()
    single = tmp_path / "single"
    run = study_root / "runs" / "NDR--R--seed2"
    assert main(["probe", "representations", str(run), "--out", str(single)]) == 0
    assert (single / "compatibility.json").is_file() and not (single / "seed_study.md").exists()


@pytest.mark.parametrize(
    ("which", "extra", "expected"),
    [
        ("empty", [], "no CTL++ run with a best checkpoint"),
        ("root", ["--split", "test_odd"], "valid choices: test_ood"),
        ("missing", [], "does not exist"),
    ],
)
def test_cli_errors_are_one_line(
    which: str,
    extra: list[str],
    expected: str,
    study_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = {"empty": tmp_path, "root": study_root, "missing": tmp_path / "nowhere"}[which]
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(
            main(["probe", "representations", str(target), "--out", str(tmp_path / "o"), *extra])
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
