"""The ``smfr-bpmnist`` reproduction (BLOCK 5.4, Tab. 3, A.2.4) end to end at quick scale, and its pieces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from recombine.errors import UserError
from recombine.experiments.block_digit_training import BlockArchitecture
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.experiments.smfr_bpmnist import (
    IDEAL_ROUTING_BIAS,
    PAPER_BIAS_STEPS,
    PAPER_TABLE_3,
    SMFR_BPMNIST,
    BPMNISTArchitecture,
    SMFRBPMNISTConfig,
    evaluate,
    evaluation_sets,
    ideal_routing_bias,
    ideal_routing_targets,
    paper_row,
    routing_bias_at_step,
    train_bpmnist,
)
from recombine.models.layers.multiplexer import Multiplexer
from recombine.models.smfr import BlockShape, build_block_model
from recombine.tasks.block_permuted_images import (
    PERMUTATIONS,
    BlockPermutedImagesConfig,
    PermutedImageSplit,
    build_block_permuted_images,
)


def test_quick_run_writes_report_results_and_the_linked_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_scripted(SMFR_BPMNIST, tmp_path, seeds=2, quick=True)
    text = report.read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {
        "bpmnist_accuracy.png",
        "bpmnist_indicators.png",
        "bpmnist_routing_smfr_d1_w4.png",
        "bpmnist_routing_smfr_bias_d1_w4.png",
        "bpmnist_routing_smfr_no_context_d1_w4.png",
    } <= set(linked)
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
    # every row of Tab. 3 is run, the variants with the paper's numbers beside them
    assert "Paper rows not run" not in text
    assert {t["paper_row"] for t in trials} == set(PAPER_TABLE_3)
    assert re.search(r"\| SMFR_bias d1 w4 \|.*\| 0\.984 ± 0\.0004 \| 0\.986 ± 0\.0011 \|", text)
    assert re.search(r"\| SMFR_no_context d1 w4 \|.*\| 0\.982 ± 0\.0006 \| 0\.984 ± 0\.0027 \|", text)
    assert f"SMFR_bias d1 w4: {PAPER_BIAS_STEPS} steps, +{IDEAL_ROUTING_BIAS:g}." in text
    # the routing-indicator table has a row for each SMFR variant
    routing_table = text.split("| share on the indicator |")[1].split("Per trial")[0]
    for label in ("SMFR d1 w4", "SMFR_bias d1 w4", "SMFR_no_context d1 w4"):
        assert f"| {label} |" in routing_table
    assert "| FNN 3x200 |" not in routing_table
    lines = [line for line in capsys.readouterr().err.splitlines() if re.match(r"^\[\d+/10\] ", line)]
    assert len(lines) == 10  # one progress line per trial


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


def test_ideal_routing_targets_point_at_the_original_strips() -> None:
    permutation = np.arange(8)
    targets = ideal_routing_targets(permutation)
    # independently: output n reads the position j with PERMUTATIONS[p][j] == n
    assert targets.tolist() == [[list(PERMUTATIONS[p]).index(n) for n in range(4)] for p in range(8)]
    # and on data: the block at that position is the image's original strip n
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    split = PermutedImageSplit(np.full(8, 3), permutation, np.zeros(8, dtype=np.int64))
    blocks = data.blocks(split)
    for p in range(8):
        for n in range(4):
            assert np.array_equal(blocks[p, targets[p, n]], data.image_blocks[3, n])
    bias = ideal_routing_bias(permutation, n_outputs=6, n_inputs=5, bias=5.0).numpy()
    assert bias.shape == (8, 6, 5) and bias.sum() == 8 * 4 * 5.0
    for p in range(8):
        for n in range(4):
            assert bias[p, n, targets[p, n]] == 5.0
    assert not bias[:, 4:].any() and not bias[..., 4].any()  # extra outputs and the indicator: no bias
    with pytest.raises(UserError, match="at least 4 output blocks"):
        ideal_routing_bias(permutation, n_outputs=3, n_inputs=5, bias=5.0)


def _bias_setup() -> tuple[torch.nn.Module, BPMNISTArchitecture, torch.Tensor, np.ndarray]:
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    train = data.splits["train"]
    index = np.random.default_rng(0).choice(len(train), 64, replace=False)
    torch.manual_seed(0)
    model = build_block_model("smfr", BlockShape(5, 1, 16), depth=1, width=4, fnn_depth=2)
    architecture = BPMNISTArchitecture(
        "bias", "smfr", {"depth": 1, "width": 4, "fnn_depth": 2}, bias_steps=PAPER_BIAS_STEPS
    )
    return model, architecture, torch.from_numpy(data.blocks(train, index)), train.permutation[index]


def test_bias_routes_a_fresh_smfr_to_the_ideal_permutation_during_the_bias_steps() -> None:
    model, architecture, blocks, permutation = _bias_setup()
    model.train()
    targets = torch.from_numpy(
        np.array([[list(PERMUTATIONS[p]).index(n) for n in range(4)] for p in permutation])
    )
    unbiased = model(blocks).layers[0].multiplexer.weights
    on_target = unbiased.gather(2, targets.unsqueeze(-1))
    assert on_target.max() < 0.5  # a fresh model routes about uniformly (1/5)
    for step in (1, PAPER_BIAS_STEPS):
        with routing_bias_at_step(model, architecture, step, permutation):
            weights = model(blocks).layers[0].multiplexer.weights  # [64, 4, 5]
        assert torch.equal(weights.argmax(-1), targets)
        assert weights.gather(2, targets.unsqueeze(-1)).min() > 0.9  # most mass on the ideal input
    assert model.layers[0].multiplexer.logit_bias is None


def test_no_bias_after_the_bias_steps_nor_in_eval_mode() -> None:
    model, architecture, blocks, permutation = _bias_setup()
    model.train()
    plain = [layer.multiplexer.logits for layer in model(blocks).layers]
    with routing_bias_at_step(model, architecture, PAPER_BIAS_STEPS + 1, permutation):
        after = [layer.multiplexer.logits for layer in model(blocks).layers]
    assert all(torch.equal(a, b) for a, b in zip(after, plain, strict=True))
    model.eval()
    with routing_bias_at_step(model, architecture, 1, permutation):
        evaluated = [layer.multiplexer.logits for layer in model(blocks).layers]
    assert all(torch.equal(a, b) for a, b in zip(evaluated, plain, strict=True))
    # architectures without bias_steps never touch the model
    with routing_bias_at_step(model, BlockArchitecture("plain", "smfr"), 1, permutation):
        assert model.layers[0].multiplexer.logit_bias is None


def test_training_applies_the_bias_for_the_first_bias_steps_only() -> None:
    data = build_block_permuted_images(BlockPermutedImagesConfig(), seed=0)
    config = SMFRBPMNISTConfig(
        seeds=[0], steps=6, eval_every=3, n_eval_train=50, eval_limit=100, probe_images=2
    )
    architecture = BPMNISTArchitecture(
        "bias", "smfr", {"depth": 1, "width": 4, "fnn_width": 16}, bias_steps=4
    )
    seen: list[tuple[bool, bool]] = []  # (training mode, bias set) per forward of the first Multiplexer

    def spy(module: torch.nn.Module, inputs: object) -> None:
        if isinstance(module, Multiplexer) and module.n_inputs == 5:
            seen.append((module.training, module.logit_bias is not None))

    handle = register_module_forward_pre_hook(spy)
    try:
        train_bpmnist(architecture, 0, config, data)
    finally:
        handle.remove()
    training = [biased for is_training, biased in seen if is_training]
    assert training == [True] * 4 + [False] * 2
    assert any(not is_training for is_training, _ in seen)  # the evaluations ran, in eval mode
    assert not any(biased for is_training, biased in seen if not is_training)


def test_paper_rows_and_config_errors() -> None:
    assert paper_row(BlockArchitecture("a", "fnn")) == "FNN"
    assert paper_row(BPMNISTArchitecture("e", "smfr", bias_steps=300)) == "SMFR_bias"
    assert paper_row(BPMNISTArchitecture("f", "smfr")) == "SMFR"
    with pytest.raises(UserError, match="at least 4 output blocks"):
        BPMNISTArchitecture("g", "smfr", {"depth": 1, "width": 3}, bias_steps=300)
    with pytest.raises(UserError, match="at least 4 output blocks"):
        BPMNISTArchitecture("h", "smfr", {"depth": 0}, bias_steps=300)
    with pytest.raises(UserError, match="needs an SMFR"):
        BPMNISTArchitecture("i", "fnn", bias_steps=300)
    with pytest.raises(UserError, match="bias_steps must be >= 0"):
        BPMNISTArchitecture("j", "smfr", bias_steps=-1)
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
