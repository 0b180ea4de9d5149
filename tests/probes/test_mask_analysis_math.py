"""The Mathematics mask analysis (thesis 3.3, Fig. 3.6, B.3.7).

The difficulty subsets are checked against the task's own splits and for disjointness; the evaluation
against an independent per-example greedy decoding and comparison; a tiny end-to-end run against a
re-trained network evaluated that way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS
from recombine.models.transformer_seq2seq import TransformerSeq2SeqConfig
from recombine.probes.mask_analysis_math import (
    BETA_SCALE,
    DIFFICULTIES,
    DROP_THRESHOLD,
    MIN_HARD_ACCURACY,
    NETWORKS,
    THESIS_SETTINGS,
    MasksMathConfig,
    MathModuleData,
    claim_status,
    drop_verdict,
    load_module,
    pretrain,
    run_masks_math,
    run_math_mask_trial,
)
from recombine.probes.mask_sets import MaskSet
from recombine.probes.seq2seq_masks import MaskedSeq2Seq, exact_match_accuracy
from recombine.probes.weight_masks import maskable_parameter_names
from recombine.train.batching import PaddedSeq2SeqSplit

TINY_TRANSFORMER = TransformerSeq2SeqConfig(
    d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, tied_embedding=False
)
TINY = MasksMathConfig(
    modules=["linear_1d"],
    seeds=[0],
    transformer=TINY_TRANSFORMER,
    train_steps=100,
    batch_size=16,
    learning_rate=3e-3,
    mask_steps=3,
    n_train=90,
    n_eval=30,
    eval_batch_size=8,
)


@pytest.fixture(scope="module")
def module_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MathModuleData]:
    with pytest.MonkeyPatch.context() as patch:  # a private task cache (the autouse one is per test)
        patch.setenv("RECOMBINE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield load_module(TINY, "linear_1d")


def _questions(split: PaddedSeq2SeqSplit) -> list[tuple[int, ...]]:
    return [tuple(split.inputs[i, : split.input_lengths[i]].tolist()) for i in range(len(split))]


def _reference_exact_match(model: nn.Module, split: PaddedSeq2SeqSplit) -> float:
    """Exact match computed one example at a time: decode ``len(y) + 1`` steps, compare the tokens."""
    correct = 0
    for i in range(len(split)):
        src = split.inputs[i : i + 1, : split.input_lengths[i]]
        target = split.outputs[i, : split.output_lengths[i]]
        tokens, length = model.greedy_decode(src, split.input_lengths[i : i + 1], len(target) + 1)  # type: ignore[operator]
        correct += int(length[0]) == len(target) and torch.equal(tokens[0, : len(target)], target)
    return correct / len(split)


def test_difficulty_subsets_have_their_groups_and_are_disjoint(module_data: MathModuleData) -> None:
    raw_train = module_data.data.splits["train"]
    raw_held_out = module_data.data.splits["valid_iid"]
    assert len(module_data.train) == len(raw_train) == TINY.n_train
    assert np.bincount(raw_train.group).tolist() == [30, 30, 30]  # a third per difficulty
    assert module_data.train_easy.group.eq(0).all() and len(module_data.train_easy) == 30
    # the easy train set is exactly the raw train set's group-0 questions
    easy_raw = {tuple(raw_train.inputs[i].tolist()) for i in np.flatnonzero(raw_train.group == 0)}
    assert set(_questions(module_data.train_easy)) == easy_raw
    assert list(module_data.evaluation) == list(DIFFICULTIES)
    held_out: list[set[tuple[int, ...]]] = []
    for group, name in enumerate(DIFFICULTIES):
        split = module_data.evaluation[name]
        assert len(split) == TINY.n_eval and split.group.eq(group).all()
        held_out.append(set(_questions(split)))
        assert len(held_out[-1]) == TINY.n_eval  # no repeats within a set
    assert sum(map(len, held_out)) == len(raw_held_out)
    train = set(_questions(module_data.train))
    assert len(train) == TINY.n_train
    for i, a in enumerate(held_out):
        assert not a & train  # no held-out question is trained on (network or either mask)
        for b in held_out[i + 1 :]:
            assert not a & b
    # the hard questions are the valid_iid ones of the hard train difficulty
    hard_raw = {tuple(raw_held_out.inputs[i].tolist()) for i in np.flatnonzero(raw_held_out.group == 2)}
    assert held_out[2] == hard_raw
    assert module_data.mask_train_set("iid") is module_data.train
    assert module_data.mask_train_set("easy") is module_data.train_easy


def _answering_model(module_data: MathModuleData) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A briefly trained model whose greedy answers to the hard questions are non-empty and end within 8
    steps (its EOS bias lowered step by step until they do): ``(model, tokens, lengths)``. A tiny network
    trained this little answers with EOS at once; a non-empty answer lets the checks below see tokens."""
    model, _ = pretrain(TINY, module_data, seed=0)
    hard = module_data.evaluation["hard"]
    eos = module_data.data.spec.n_classes  # the EOS row of the output layer (seq2seq_interface)
    bias = model.output.bias  # type: ignore[union-attr]
    original = float(bias[eos].detach())
    for shift in np.arange(0.0, 10.0, 0.25):
        with torch.no_grad():
            bias[eos] = original - shift
        tokens, lengths = model.greedy_decode(hard.inputs, hard.input_lengths, 8)  # type: ignore[operator]
        if int(((lengths > 0) & (lengths < 8)).sum()) >= 4:
            return model, tokens, lengths
    raise AssertionError("no EOS bias gives answers that end within 8 steps")


def test_an_all_ones_mask_leaves_the_accuracy_unchanged(module_data: MathModuleData) -> None:
    model, tokens, lengths = _answering_model(module_data)
    hard = module_data.evaluation["hard"]
    # targets: the model's own greedy answers for the first half of the usable questions, the true
    # answers for the second half, so that the exact match is known to be at least 1/2 (not 0)
    usable = torch.nonzero((lengths > 0) & (lengths < 8)).flatten()
    index = usable[: 2 * (len(usable) // 2)]
    half = len(index) // 2
    width = max(hard.outputs.shape[1], tokens.shape[1])
    outputs = torch.nn.functional.pad(hard.outputs[index], (0, width - hard.outputs.shape[1]))
    outputs[:half] = torch.nn.functional.pad(tokens[index[:half]], (0, width - tokens.shape[1]))
    output_lengths = hard.output_lengths[index].clone()
    output_lengths[:half] = lengths[index[:half]]
    probe = PaddedSeq2SeqSplit(
        hard.inputs[index], hard.input_lengths[index], outputs, output_lengths, hard.group[index]
    )
    n_classes = module_data.data.spec.n_classes
    shapes = {name: model.get_parameter(name).shape for name in maskable_parameter_names(model)}
    masked = MaskedSeq2Seq(model, MaskSet.full(shapes))
    reference = _reference_exact_match(model, probe)
    assert reference >= 0.5  # the own-answer half is right by construction
    assert exact_match_accuracy(masked, probe, n_classes, 4) == reference
    assert exact_match_accuracy(model, probe, n_classes, 4) == reference
    decoded = masked.greedy_decode(hard.inputs, hard.input_lengths, 8)
    assert torch.equal(decoded[0], tokens) and torch.equal(decoded[1], lengths)
    # a mask that removes every weight changes the answers, so the comparisons above can fail
    empty = MaskedSeq2Seq(model, MaskSet.full(shapes, keep=False))
    assert exact_match_accuracy(empty, probe, n_classes, 4) < reference


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"modules": []}, "at least one module"),
        ({"modules": ["place_value"]}, "unknown Mathematics module for the mask analysis 'place_value'"),
        ({"modules": ["sort", "sort"]}, "must not repeat"),
        ({"betas": {"sort": 1e-5}}, "betas has no value for module 'add_or_sub'"),
        ({"mask_learning_rates": {"add_or_sub": 0.03}}, "mask_learning_rates has no value for module"),
        ({"betas": {"add_or_sub": -1.0, "linear_1d": 0.0, "sort": 0.0}}, "betas.add_or_sub must be >= 0"),
        ({"batch_size": 4}, r"batch_size \(4\) must be >= mask_samples \(8\)"),
        ({"n_eval": 0}, "n_eval >= 1"),
        ({"n_train": 2}, "n_train must be >= 3"),
        ({"train_steps": -1}, "train_steps and mask_steps must be >= 0"),
    ],
)
def test_bad_configs_are_user_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        MasksMathConfig(**overrides)  # type: ignore[arg-type]


def test_defaults_follow_table_b3_and_the_mask_config_uses_them() -> None:
    config = MasksMathConfig()
    tab_b3 = {"add_or_sub": 2e-5, "linear_1d": 1e-6, "differentiate": 1e-5, "sort": 3e-6, "collect": 1e-6}
    assert {module: settings.beta for module, settings in THESIS_SETTINGS.items()} == tab_b3
    assert config.betas == pytest.approx({module: BETA_SCALE * beta for module, beta in tab_b3.items()})
    assert config.mask_learning_rates["linear_1d"] == 0.02 == THESIS_SETTINGS["collect"].mask_learning_rate
    mask = config.mask_config("sort")
    assert mask.alpha == pytest.approx(BETA_SCALE * 3e-6 / config.batch_size) and mask.n_samples == 8
    assert mask.learning_rate == 0.03 and mask.steps == config.mask_steps
    task = config.task_config("sort")
    assert task.n_valid_iid == 3 * config.n_eval and task.n_test_iid == task.n_test_ood == 0
    assert not config.transformer.tied_embedding  # the output layer is masked


def test_the_verdict_needs_the_threshold_drop_and_a_solved_hard_set() -> None:
    def stats(none: float, iid: float, easy: float) -> dict[str, object]:
        return {
            "hard": {"none": (none, 0.0), "iid": (iid, 0.0), "easy": (easy, 0.0)},
            "drop": (iid - easy, 0.0),
        }

    holds = drop_verdict(stats(0.6, 0.6, 0.6 - DROP_THRESHOLD), [0.1, 0.0, -0.01])
    assert holds["holds"] and holds["testable"] and holds["seeds_with_a_drop"] == 1 and holds["seeds"] == 3
    small = drop_verdict(stats(0.6, 0.6, 0.58))
    assert small["testable"] and not small["holds"] and "seeds" not in small
    unsolved = drop_verdict(stats(0.3, MIN_HARD_ACCURACY - 0.01, 0.0))
    assert not unsolved["testable"] and not unsolved["holds"]
    assert unsolved["iid_mask_cost"] == pytest.approx(0.3 - MIN_HARD_ACCURACY + 0.01)
    assert claim_status({"a": holds}) == "holds"
    assert claim_status({"a": holds, "b": small}) == "partly"
    assert claim_status({"a": holds, "b": unsolved}) == "partly"  # not every module shows it
    assert claim_status({"b": small, "c": unsolved}) == "does not hold"
    assert claim_status({"c": unsolved}) == "not testable"


def test_a_tiny_run_writes_a_report_consistent_with_an_independent_evaluation(tmp_path: Path) -> None:
    results = run_masks_math(tmp_path, TINY)
    for name in ("report.md", "results.json", "accuracy.png"):
        assert (tmp_path / name).is_file(), name
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["seeds"] == [0] and list(saved["modules"]) == ["linear_1d"]
    assert saved["eval_sizes"] == {"linear_1d": {d: TINY.n_eval for d in DIFFICULTIES}}
    assert saved["train_sizes"] == {"linear_1d": {"all": 90, "easy": 30}}
    assert [t["module"] for t in saved["trials"]] == ["linear_1d"]
    trial = saved["modules"]["linear_1d"]["per_seed"]["0"]
    assert list(trial["accuracy"]) == list(NETWORKS)
    assert trial["hard"] == {network: trial["accuracy"][network]["hard"] for network in NETWORKS}
    assert trial["drop"] == pytest.approx(trial["hard"]["iid"] - trial["hard"]["easy"])
    assert trial["own_accuracy"]["easy"] == trial["accuracy"]["easy"]["easy"]
    assert trial["own_accuracy"]["iid"] == pytest.approx(np.mean(list(trial["accuracy"]["iid"].values())))
    assert set(trial["kept_fraction"]) == {"iid", "easy"}
    assert saved["claim"]["modules"]["linear_1d"]["seeds"] == 1
    assert results["claim"]["status"] == saved["claim"]["status"]

    # the same network again (training is deterministic), evaluated one question at a time
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECOMBINE_CACHE", str(tmp_path / "cache"))
        data = load_module(TINY, "linear_1d")
    model, _ = pretrain(TINY, data, seed=0)
    for difficulty in DIFFICULTIES:
        expected = _reference_exact_match(model, data.evaluation[difficulty])
        assert trial["accuracy"]["none"][difficulty] == pytest.approx(expected)
    assert any(trial["accuracy"]["none"].values())  # some answers are right: the check can fail
    report = (tmp_path / "report.md").read_text()
    stats = saved["modules"]["linear_1d"]["mean_std"]
    row = next(line for line in report.splitlines() if line.startswith("| linear_1d | "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == f"{100 * trial['hard']['none']:.0f} ± 0.0" and stats["hard"]["none"][1] == 0.0
    assert cells[3] == f"{100 * trial['hard']['easy']:.0f} ± 0.0"
    for heading in ("Fig. 3.6", "## The claim", "Overall:", "Scale: thesis vs this run", "exclusive weights"):
        assert heading in report


def test_the_reproduction_is_registered_with_a_quick_config() -> None:
    reproduction = REPRODUCTIONS["masks-math"]
    quick = reproduction.resolve_config(None, True, {"betas": {"sort": 1e-3}})
    assert isinstance(quick, MasksMathConfig)
    assert quick.train_steps <= 300 and quick.mask_steps <= 300 and quick.seeds == [0]
    assert quick.betas["sort"] == 1e-3  # an override of one module's beta keeps the others
    assert quick.betas["add_or_sub"] == MasksMathConfig().betas["add_or_sub"]
    full = reproduction.resolve_config(3, False, {})
    assert asdict(full) == asdict(replace(MasksMathConfig(), seeds=[0, 1, 2]))


def test_each_mask_row_is_that_masks_own_network(module_data: MathModuleData) -> None:
    """The reported accuracies under the IID and the easy mask equal an independent one-question-at-a-time
    evaluation of the network under *that* mask (a swap of the two would fail: strong pruning makes them
    differ)."""
    config = replace(TINY, mask_steps=40, mask_learning_rates={"linear_1d": 0.2}, betas={"linear_1d": 0.5})
    result = run_math_mask_trial(config, "linear_1d", seed=0, data=module_data)
    assert result.masks["iid"].kept_fraction() < 0.98 and result.masks["easy"].kept_fraction() < 0.98
    assert result.accuracy["iid"] != result.accuracy["easy"]  # so that a swap of the two is caught
    for mask in ("iid", "easy"):
        masked = MaskedSeq2Seq(result.model, result.masks[mask])
        for difficulty in DIFFICULTIES:
            expected = _reference_exact_match(masked, module_data.evaluation[difficulty])
            assert result.accuracy[mask][difficulty] == pytest.approx(expected)
