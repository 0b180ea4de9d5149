"""``recombine probe listops-operators``: ListOps accuracy by root operator and dependency depth, against a
plain loop that runs the model on one example at a time, and adding up to the accuracy the run's own
evaluation reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TINY_RUN
from recombine import run_config
from recombine.cli import main
from recombine.probes.listops_operators import operator_accuracy, root_operators
from recombine.runs.reevaluation import evaluate_run
from recombine.runs.store import RunDir
from recombine.tasks.base import ClassificationSplit
from recombine.tasks.listops import tokenize
from recombine.train import fit
from recombine.train.supervised import build_model, build_task

TINY_LISTOPS = [
    "task=listops",
    "task.n_train=400",
    "task.n_valid_iid=80",
    "task.n_valid_ood=40",
    "task.n_test_ood=40",
    "model=lstm",
    "model.d_model=16",
    "model.n_layers=1",
    "train.steps=40",
    "train.batch_size=16",
    "train.eval_every=20",
    "train.log_every=10",
    "train.threads=1",
    "seed=2",
]


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task cache of this module's own: the shared one must hold no ListOps file but
    tests/tasks/test_listops.py's (its cache round trip counts them)."""
    return tmp_path_factory.mktemp("listops-cache")


@pytest.fixture(autouse=True)
def own_cache(module_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECOMBINE_CACHE", str(module_cache))


@pytest.fixture(scope="module")
def listops_run(tmp_path_factory: pytest.TempPathFactory, module_cache: Path) -> Path:
    run = tmp_path_factory.mktemp("listops") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECOMBINE_CACHE", str(module_cache))
        fit(run_config.resolve(run_config.parse_overrides(TINY_LISTOPS)), run, progress=False)
    return run


def test_root_operators_of_hand_made_examples(listops_run: Path) -> None:
    task = build_task(run_config.resolve(RunDir(listops_run).read_config()))
    vocab = task.input_vocab
    texts = ["[SM 1 2 ]", "[MIN [MAX 3 4 ] 1 ]", "[MED 1 [SM 2 3 ] 4 ]", "[MAX 9 0 ]"]
    inputs = [np.array([vocab.tokens.index(t) for t in tokenize(text)]) for text in texts]
    split = ClassificationSplit(
        inputs, np.zeros(len(texts), dtype=np.int64), np.ones(len(texts), dtype=np.int64)
    )
    assert root_operators(split, vocab) == ["SM", "MIN", "MED", "MAX"]
    digit_first = ClassificationSplit([np.array([vocab.tokens.index("3")])], np.zeros(1), np.ones(1))
    with pytest.raises(ValueError, match="starts with an operator"):
        root_operators(digit_first, vocab)


@pytest.mark.parametrize("split", ["valid_iid", "valid_ood"])
def test_cells_against_one_example_at_a_time(listops_run: Path, split: str) -> None:
    result = operator_accuracy(listops_run, split, "last")

    config = run_config.resolve(RunDir(listops_run).read_config())
    task = build_task(config)
    model = build_model(config, task)
    model.load_state_dict(RunDir(listops_run).load_checkpoint("last")["model"])
    model.eval()
    data = task.splits[split]
    correct: dict[tuple[str, int], int] = {}
    total: dict[tuple[str, int], int] = {}
    for tokens, target, depth in zip(data.inputs, data.targets, data.depth, strict=True):
        key = (task.input_vocab.tokens[int(tokens[0])].lstrip("["), int(depth))
        with torch.no_grad():
            logits = model(torch.as_tensor(tokens)[None], torch.tensor([len(tokens)]))
        total[key] = total.get(key, 0) + 1
        correct[key] = correct.get(key, 0) + int(logits.argmax(-1).item() == int(target))

    assert result.operators == ["MIN", "MAX", "MED", "SM"]
    assert result.depths == sorted({depth for _, depth in total})
    for i, operator in enumerate(result.operators):
        for j, depth in enumerate(result.depths):
            assert result.total[i, j] == total.get((operator, depth), 0), (operator, depth)
            assert result.correct[i, j] == correct.get((operator, depth), 0), (operator, depth)
    assert result.total.sum() == len(data)
    assert (result.total > 0).sum(axis=0).min() >= 2  # more than one operator per depth: rows really differ

    reported = evaluate_run(listops_run, "last", splits=[split]).evaluations[0].splits[split]["accuracy"]
    assert result.correct.sum() / result.total.sum() == pytest.approx(reported)


def test_cli_prints_the_table_and_writes_json(listops_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "listops-operators", str(listops_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{listops_run} (best.pt, step ") and lines[0].endswith(
        "valid_iid: accuracy (examples)"
    )
    assert lines[1].split()[0] == "operator" and lines[1].split()[-1] == "all"
    assert [line.split()[0] for line in lines[2:6]] == ["MIN", "MAX", "MED", "SM"]
    written = listops_run / "probes" / "listops-operators-valid_iid.json"
    assert lines[6] == f"written: {written}"
    stored = json.loads(written.read_text())
    assert stored["split"] == "valid_iid" and stored["checkpoint"] == "best"
    assert sum(cell["total"] for cell in stored["cells"]) == 80


def test_user_errors_are_one_line(
    listops_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctl_run = tmp_path / "ctl"
    fit(
        run_config.resolve(run_config.parse_overrides([*TINY_RUN, "train.steps=1", "train.eval_every=1"])),
        ctl_run,
        progress=False,
    )
    for argv, expected in (
        ([str(ctl_run)], "is a ctl run; listops-operators reads ListOps runs"),
        ([str(listops_run), "--split", "valid_idd"], "has no split 'valid_idd'"),
        ([str(tmp_path / "nothing")], "is not a run directory"),
    ):
        assert main(["probe", "listops-operators", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
