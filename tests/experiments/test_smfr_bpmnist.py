"""The ``smfr-bpmnist`` reproduction (BLOCK 5.4, Tab. 3, A.2.4) end to end at quick scale, and its pieces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.experiments.block_digit_training import BlockArchitecture
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.experiments.smfr_bpmnist import (
    PAPER_TABLE_3,
    SMFR_BPMNIST,
    SMFRBPMNISTConfig,
    evaluate,
    evaluation_sets,
    paper_row,
    train_bpmnist,
)
from recombine.models.smfr import BlockShape, build_block_model
from recombine.tasks.block_permuted_images import BlockPermutedImagesConfig, build_block_permuted_images


def test_quick_run_writes_report_results_and_the_linked_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_scripted(SMFR_BPMNIST, tmp_path, seeds=2, quick=True)
    text = report.read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"bpmnist_accuracy.png", "bpmnist_indicators.png", "bpmnist_routing_smfr_d1_w4.png"} <= set(linked)
    for name in linked:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["reproduction"] == "smfr-bpmnist"
    config = SMFR_BPMNIST.resolve_config(2, True, {})
    trials = results["trials"]
    assert [(t["label"], t["seed"]) for t in trials] == [
        (a.label, s) for a in config.architectures for s in config.seeds
    ]
    for trial in trials:
        assert [r["step"] for r in trial["history"]] == config.evaluation_steps() == [4, 20, 40]
        assert trial["final"] == {k: trial["history"][-1][k] for k in trial["final"]}
        assert trial["early"]["test"] == trial["history"][0]["test"]
        is_smfr = trial["model"] == "smfr"
        assert (trial["routing"] is not None) == is_smfr
        assert all(("routing" in r) == is_smfr for r in trial["history"])
        if is_smfr:
            assert 0.0 <= trial["routing"]["permutation_difference"] <= 1.0
            assert len(trial["example_routing"]["predictions"]) == 8
    assert set(results["paper_table_3"]) == set(PAPER_TABLE_3)
    # the paper's numbers and its scale are printed beside ours
    assert "0.985 ± 0.0009" in text and "4 million parameters" in text
    assert "| SMFR d1 w4 |" in text and "| FNN 3x200 |" in text and "| Transformer 2x64 |" in text
    lines = [line for line in capsys.readouterr().err.splitlines() if re.match(r"^\[\d+/6\] ", line)]
    assert len(lines) == 6  # one progress line per trial


def test_test_accuracy_is_the_mix_of_its_iid_and_ood_parts() -> None:
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=1)
    config = SMFRBPMNISTConfig(seeds=[1], steps=2, eval_every=2, n_eval_train=50)
    sets = evaluation_sets(data, config, 1)
    model = build_block_model("fnn", BlockShape(5, 1, 16), width=16, depth=1)
    accuracy = evaluate(model, sets)
    parts = sets["test"].parts
    n_iid, n_ood = int(parts["test_iid"].sum()), int(parts["test_ood"].sum())
    assert n_iid + n_ood == len(sets["test"].labels) == len(data.splits["test"])
    mixed = (accuracy["test_iid"] * n_iid + accuracy["test_ood"] * n_ood) / (n_iid + n_ood)
    assert accuracy["test"] == pytest.approx(mixed)
    # the OOD part is exactly the removed combinations
    ood_blocks = sets["test"].blocks[parts["test_ood"]].numpy()
    combos = {
        (int(y), int(np.argmax(b[4])))
        for y, b in zip(sets["test"].labels[parts["test_ood"]], ood_blocks, strict=True)
    }
    assert combos == data.removed_combinations


def test_same_seed_same_trial() -> None:
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    config = SMFRBPMNISTConfig(
        seeds=[0], steps=6, eval_every=3, n_eval_train=50, eval_limit=100, probe_images=2
    )
    architecture = BlockArchitecture("SMFR", "smfr", {"depth": 1, "width": 4, "fnn_width": 16})
    first = train_bpmnist(architecture, 0, config, data)
    again = train_bpmnist(architecture, 0, config, data)
    assert first.history == again.history


def test_paper_rows_and_config_errors() -> None:
    assert paper_row(BlockArchitecture("a", "fnn")) == "FNN"
    assert paper_row(BlockArchitecture("b", "transformer")) == "Transformer"
    assert paper_row(BlockArchitecture("c", "smfr")) == "SMFR"
    assert paper_row(BlockArchitecture("d", "smfr", {"input_context": False})) == "SMFR_no_context"
    with pytest.raises(UserError, match="batches='random' is not valid; valid choices"):
        SMFRBPMNISTConfig(batches="random")
    with pytest.raises(UserError, match="unique"):
        SMFRBPMNISTConfig(architectures=[BlockArchitecture("a", "fnn"), BlockArchitecture("a", "smfr")])
    with pytest.raises(UserError, match="unknown field smfr-bpmnist.stepz"):
        SMFR_BPMNIST.resolve_config(1, True, {"stepz": 3})
    with pytest.raises(UserError, match="task.source"):
        SMFR_BPMNIST.resolve_config(1, True, {"task": {"source": "cifar"}})
