"""The ``trafo-datasets`` grid (thesis Tab. 4.4): a row set over three tasks, one column per dataset split.

Its columns override the task name (PCFG SET, COGS, Mathematics in one grid), so every column's run config
is built into its own task here, on tiny data (COGS from hand-written files in the official format found
through ``$RECOMBINE_DATA``, as a user would provide ``gen.tsv``), with the splits the report reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recombine.experiments import REPRODUCTIONS
from recombine.experiments.trafo_datasets import TRAFO_DATASETS
from recombine.run_config import resolve
from recombine.train.supervised import build_model, build_task

#: the task each column trains on, and its split / module
EXPECTED_TASKS = {
    "pcfg-prod": ("pcfg", {"split": "productivity"}),
    "pcfg-sys": ("pcfg", {"split": "systematicity"}),
    "cogs": ("cogs", {}),
    "add_or_sub": ("math", {"module": "add_or_sub"}),
    "place_value": ("math", {"module": "place_value"}),
}

#: tiny data for each task: the columns' own settings are kept, only sizes shrink
TINY = {
    "pcfg": {"n_examples": 400},
    "math": {"n_train": 30, "n_valid_iid": 6, "n_test_iid": 3, "n_valid_ood": 4, "n_test_ood": 5},
    "cogs": {},
}

COGS_LINES = {
    "train": ["The puppy slept .\t* puppy ( x _ 1 ) ; sleep . agent ( x _ 2 , x _ 1 )\tin_distribution"] * 3,
    "dev": ["Emma slept .\tsleep . agent ( x _ 1 , Emma )\tin_distribution"] * 2,
    "test": ["Emma slept .\tsleep . agent ( x _ 1 , Emma )\tin_distribution"] * 2,
    "gen": [
        "The cat slept .\t* cat ( x _ 1 ) ; sleep . agent ( x _ 2 , x _ 1 )\tprim_to_subj_common",
        "Emma ate .\teat . agent ( x _ 1 , Emma )\tunacc_to_transitive",
    ],
}


def test_registered_with_tab_4_4s_numbers() -> None:
    assert REPRODUCTIONS["trafo-datasets"] is TRAFO_DATASETS
    labels = [v.label for v in TRAFO_DATASETS.variants]
    assert labels == ["Trafo", "Uni.Trafo", "Rel.Trafo", "Rel.Uni.Trafo"]
    assert all(" " not in label for label in labels)  # labels name run directories
    paper = {key: (n.mean, n.std) for key, n in TRAFO_DATASETS.paper.items()}
    assert [paper[("Rel.Uni.Trafo", c)] for c in EXPECTED_TASKS] == [
        (0.85, 0.01),
        (0.96, 0.01),
        (0.77, 0.01),
        (0.97, 0.01),
        (0.75, 0.10),
    ]
    assert [paper[("Trafo", c)][0] for c in EXPECTED_TASKS] == [0.65, 0.87, 0.80, 0.89, 0.12]
    # relative standard Transformer: no productivity or place_value numbers (collapsed runs, 4.2.1, 4.3.3)
    assert {c for label, c in paper if label == "Rel.Trafo"} == {"pcfg-sys", "cogs", "add_or_sub"}
    assert TRAFO_DATASETS.scale_note.startswith("CPU scale:") and "CFQ" in TRAFO_DATASETS.scale_note


@pytest.mark.parametrize("column", list(EXPECTED_TASKS))
def test_every_column_builds_its_own_task_with_a_generalization_test_split(
    column: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for stem, lines in COGS_LINES.items():
        (tmp_path / "cogs").mkdir(exist_ok=True)
        (tmp_path / "cogs" / f"{stem}.tsv").write_text("".join(line + "\n" for line in lines))
    monkeypatch.setenv("RECOMBINE_DATA", str(tmp_path))
    variant = TRAFO_DATASETS.variants[-1]
    config = TRAFO_DATASETS.run_config(variant, column, seed=2, quick=False)
    name, settings = EXPECTED_TASKS[column]
    assert config["task"]["name"] == name and settings.items() <= config["task"].items()
    config["task"].update(TINY[name])
    run_config = resolve(config)
    task = build_task(run_config)
    assert task.name == name
    assert {"valid_iid", "test_ood"} <= set(task.splits) and len(task.splits["test_ood"]) > 0
    train = run_config.train
    if name == "cogs":  # no generalization validation set: one evaluation, of the final model (4.3.4)
        assert task.selection_split == "valid_iid" and train.eval_every >= train.steps
        assert len(task.splits["test_ood"]) == len(COGS_LINES["gen"])
    else:  # a held-out part of the generalization data selects the checkpoint
        assert task.selection_split == "valid_ood" and train.steps // train.eval_every >= 4
    build_model(run_config, task)  # the one CPU model size fits every task's vocabulary
