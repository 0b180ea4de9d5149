"""``train.curriculum_depths`` / ``train.curriculum_steps``: the first steps draw only examples of the chosen
groups, then the whole training split; runs stay deterministic and resume identically across the switch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import TINY_RUN
from recombine import run_config
from recombine.cli import main
from recombine.errors import UserError
from recombine.tasks.base import ClassificationSplit, Seq2SeqSplit
from recombine.train import fit
from recombine.train.curriculum import curriculum_split

# log every step so that runs can be compared step by step
RUN = [*TINY_RUN, "train.steps=40", "train.eval_every=10", "train.log_every=1"]


def _train_records(run: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "examples_per_s"} for r in records if r["kind"] == "train"]


def _fit(run: Path, *extra: str, resume: bool = False) -> None:
    fit(run_config.resolve(run_config.parse_overrides([*RUN, *extra])), run, resume=resume, progress=False)


def test_the_split_keeps_exactly_the_chosen_groups_in_order() -> None:
    depth = np.array([3, 1, 2, 1, 5, 2])
    inputs = [np.array([i, i]) for i in range(6)]
    split = ClassificationSplit(inputs, np.arange(6), depth)
    kept = curriculum_split(split, [1, 2])
    assert [int(x[0]) for x in kept.inputs] == [1, 2, 3, 5]
    assert kept.depth.tolist() == [1, 2, 1, 2] and kept.targets.tolist() == [1, 2, 3, 5]
    seq2seq = Seq2SeqSplit(inputs, [np.array([i]) for i in range(6)], depth)
    assert [int(y[0]) for y in curriculum_split(seq2seq, [5]).outputs] == [4]
    with pytest.raises(
        UserError, match=r"\[4\] has no training example; the training split's groups are \[1, 2, 3, 5\]"
    ):
        curriculum_split(split, [1, 4])
    ungrouped = ClassificationSplit(inputs, np.arange(6), np.full(6, -1))
    with pytest.raises(UserError, match="none"):
        curriculum_split(ungrouped, [1])


def test_the_curriculum_changes_the_batches_until_its_last_step_and_not_after(tmp_path: Path) -> None:
    """CTL's group is the number of functions. A run whose curriculum covers every step and one that
    switches after 15 steps draw the same first 15 batches; from step 16 on, the second draws from the
    whole split (its log differs); a run without a curriculum differs from the first step."""
    _fit(tmp_path / "always", "train.curriculum_depths=[1]", "train.curriculum_steps=40")
    _fit(tmp_path / "switch", "train.curriculum_depths=[1]", "train.curriculum_steps=15")
    _fit(tmp_path / "none")
    always, switch, none = (_train_records(tmp_path / name) for name in ("always", "switch", "none"))
    assert always[:15] == switch[:15]
    assert always[15]["step"] == switch[15]["step"] == 16 and always[15] != switch[15]
    assert always[0] != none[0]


def test_a_run_extended_across_the_switch_equals_one_trained_in_one_go(tmp_path: Path) -> None:
    curriculum = ["train.curriculum_depths=[1, 2]", "train.curriculum_steps=25"]
    _fit(tmp_path / "whole", *curriculum)
    _fit(tmp_path / "parts", *curriculum, "train.steps=20")
    _fit(tmp_path / "parts", *curriculum, resume=True)  # 20 -> 40 steps, past the switch at 25
    assert _train_records(tmp_path / "parts") == _train_records(tmp_path / "whole")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.curriculum_steps=100"], "train.curriculum_depths and train.curriculum_steps go together"),
        (["train.curriculum_depths=[1]"], "train.curriculum_depths and train.curriculum_steps go together"),
        (["train.curriculum_depths=[1]", "train.curriculum_steps=-1"], "train.curriculum_steps must be >= 0"),
        (["train.curriculum_depths=[9]", "train.curriculum_steps=10"], "[9] has no training example"),
    ],
)
def test_bad_curricula_are_one_line_and_leave_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str
) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", "--run-dir", str(run), *RUN, *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not run.exists()
