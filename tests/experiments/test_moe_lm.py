"""The moe-lm reproduction's pieces: parameter-equal rows, FLOP shares by hand, and bpc evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.experiments.moe_lm import (
    MoELMResult,
    MoELMRunConfig,
    VariantResult,
    evaluate_bpc,
    feed_forward_flops,
    render_report,
    summarize_rows,
)
from recombine.models.transformer_lm import TransformerLM


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_rows_are_parameter_equal_and_flop_shares_match_hand_computation() -> None:
    config = MoELMRunConfig(d_model=32, n_heads=2, n_layers=2, n_experts=8, expert_size=16, k=2)
    dense_width = 8 * 16 + 4  # N_E G + N_E / 2
    models = {
        v: TransformerLM(20, config.model_config(v)) for v in ("dense", "sigma_moe", "switch", "s_base")
    }
    assert models["dense"].config.d_ff == dense_width
    assert count(models["dense"]) == count(models["sigma_moe"])
    # switch: N_E / 4 experts of 4 G, so only the selection matrix is smaller (6 fewer rows of d_model)
    assert count(models["sigma_moe"]) - count(models["switch"]) == 2 * (8 - 2) * 32
    sigma = feed_forward_flops(models["sigma_moe"].config, dense_width)
    assert sigma["without_selection"] == pytest.approx(2 * 16 / dense_width)  # K G / d_ff
    assert sigma["with_selection"] == pytest.approx((2 * 32 * 2 * 16 + 8 * 32) / (2 * 32 * dense_width))
    switch = feed_forward_flops(models["switch"].config, dense_width)
    assert switch["without_selection"] == pytest.approx(64 / dense_width)  # K = 1, G' = 4 G
    assert feed_forward_flops(models["dense"].config, dense_width)["without_selection"] == 1.0
    # s_base: the Switch row's shapes (N_E / 4 experts of 4 G, K = 1) with Sinkhorn routing
    assert count(models["s_base"]) == count(models["switch"])
    assert models["s_base"].config.s_base.k == 1 and models["s_base"].config.s_base.n_experts == 2
    assert feed_forward_flops(models["s_base"].config, dense_width) == switch


def test_evaluate_bpc_equals_the_token_average_and_uniform_is_log2_vocab() -> None:
    torch.manual_seed(0)
    config = MoELMRunConfig(d_model=16, n_heads=2, n_layers=1, n_experts=4, expert_size=8, k=2)
    model = TransformerLM(9, config.model_config("sigma_moe"))
    stream = np.random.default_rng(0).integers(0, 9, size=23)
    with torch.no_grad():  # by hand: windows [0:5], [5:10], ... of inputs, each predicting the next token
        bits = []
        for start in range(0, 22, 5):
            x = torch.from_numpy(stream[start : min(start + 5, 22)])[None]
            log_p = torch.log_softmax(model.eval()(x)[0], -1)
            targets = stream[start + 1 : start + 1 + x.shape[1]]
            bits += [-float(log_p[t, int(targets[t])]) / math.log(2) for t in range(x.shape[1])]
    assert evaluate_bpc(model, stream, context=5, batch_size=2) == pytest.approx(np.mean(bits), rel=1e-5)
    with torch.no_grad():
        model.readout.weight.zero_()
        model.readout.bias.zero_()
    assert evaluate_bpc(model, stream, context=5) == pytest.approx(math.log2(9), rel=1e-6)


def test_unknown_variant_names_the_choices() -> None:
    with pytest.raises(UserError, match="valid choices"):
        MoELMRunConfig(variants=["moe"])


def test_seeds_per_row() -> None:
    config = MoELMRunConfig(variants=["dense", "sigma_moe", "pkm"], seeds=[3, 4, 5], other_rows_seeds=1)
    assert config.variant_seeds("dense") == [3, 4, 5] == config.variant_seeds("sigma_moe")
    assert config.variant_seeds("pkm") == [3]
    assert MoELMRunConfig(seeds=[3, 4]).variant_seeds("pkm") == [3, 4]  # 0: every row every seed
    with pytest.raises(UserError, match="at least one seed"):
        MoELMRunConfig(seeds=[])
    with pytest.raises(UserError, match="distinct"):
        MoELMRunConfig(seeds=[1, 1])


def _run(variant: str, seed: int, valid: float, test: float) -> VariantResult:
    curve = [{"step": 1, "train_bits": 9.0, "valid_bits": valid + 1, "seconds": 1.0}]
    curve.append({"step": 2, "train_bits": 8.0, "valid_bits": valid, "seconds": 2.0})
    flops = {"without_selection": 0.25, "with_selection": 0.26}
    return VariantResult(variant, seed, 100, 40, flops, valid, test, 10.0 + seed, curve)


def test_rows_report_mean_and_sample_std_over_seeds_and_perplexity_for_subwords() -> None:
    runs = [_run("dense", 0, 2.0, 3.0), _run("dense", 1, 2.5, 3.5), _run("dense", 2, 3.0, 2.5)]
    runs.append(_run("pkm", 0, 4.0, 5.0))
    dense, pkm = summarize_rows(runs, subword=False)
    assert dense.seeds == [0, 1, 2] and pkm.seeds == [0]
    assert dense.valid_mean == pytest.approx(2.5) and dense.valid_std == pytest.approx(0.5)  # sqrt(0.5 / 2)
    assert dense.test_mean == pytest.approx(3.0) and dense.test_std == pytest.approx(0.5)
    assert dense.train_seconds_mean == pytest.approx(11.0)
    assert (pkm.valid_mean, pkm.valid_std) == (4.0, 0.0)
    subword_dense, _ = summarize_rows(runs, subword=True)  # perplexity 2^bits, averaged over seeds
    assert subword_dense.valid_mean == pytest.approx((4 + 2**2.5 + 8) / 3)
    speed = {"step_ms": 10.0, "feed_forward_ms": 5.0, "tokens_per_second": 1.0}
    dense.speed, pkm.speed = speed, speed
    corpus = {
        "name": "x",
        "vocab_size": 9,
        "tokenizer": "char",
        "characters": {},
        "sha256": "0",
        "python": "3",
    }
    config = MoELMRunConfig(variants=["dense", "pkm"], seeds=[0, 1, 2], other_rows_seeds=1)
    report = render_report(MoELMResult(config, [dense, pkm], runs, corpus, "bpc"), {}, [])
    assert "| dense | 3 |" in report and "2.500 ± 0.500" in report
    assert "| pkm | 1 |" in report and "| 4.000 |" in report
    assert "paper E8 bpc |" in report and "| 1.08 |" in report
    subword_rows = summarize_rows(runs, subword=True)
    for row in subword_rows:
        row.speed = speed
    subword_corpus = {**corpus, "tokenizer": "sentencepiece"}
    subword = render_report(MoELMResult(config, subword_rows, runs, subword_corpus, "perplexity"), {}, [])
    assert "paper WT103 ppl |" in subword and "| 11.81 |" in subword and "1.08" not in subword
