"""R-MOE at CPU scale: sigma-MoE vs a parameter-equal dense language model (thesis Tab. 7.3, Fig. 7.3).

Thesis claim (7.5.3, Tab. 7.3): a sigma-MoE with ``N_E = 16``, ``K = 4`` in every feed-forward block matches
the bits per character of its parameter-equal dense baseline (Enwik8: 1.08 vs 1.08) at 25% of the MLP FLOPs.
Here: the pre-LN relative-PE Transformer LM of :mod:`recombine.models.transformer_lm` on the embedded
character corpus (:mod:`recombine.tasks.language_modelling`), at CPU scale (:class:`MoELMRunConfig`).

Rows (``variants``), all with the same attention, embedding and readout:

* ``dense``: the dense MLP of width ``N_E G + N_E / 2`` (:func:`parameter_matched_dense_width`), exactly the
  sigma-MoE's parameter count (the extra units pay for the selection matrix ``W_3``, thesis 7.5);
* ``sigma_moe``: ``N_E`` experts of ``G`` units, top-``K`` sigmoid selection, entropy regulariser ``gamma``,
  expert dropout ``delta`` (eqs. 7.11, 7.17-7.21, Tab. F.3);
* ``switch``: ``N_E / 4`` experts of ``4 G`` units, ``K = 1``, softmax selection, eq. 7.16 with gamma = 0.01;
* ``s_base``: ``N_E / 4`` experts of ``4 G`` units, ``K = 1``, Sinkhorn-balanced routing in training, sigmoid
  weights, the entropy regulariser ``gamma`` (thesis 7.3, Tab. 7.4 "S-BASE, K = 1, G = 512", F.2);
* ``topk``: the dense width with the top-``K G`` activation (the same number of active units; 7.2.1);
* ``pkm``: parameter-matched product-key memory with ReLU (7.2.2, F.1.3).

Training (thesis F.2 where it fits a CPU): Adam, linear warm-up then cosine decay to 0, gradient clipping at
0.25, random windows of ``context`` tokens (no Transformer-XL memory). Every row is trained once per seed of
``seeds`` (``other_rows_seeds`` limits the rows other than dense and sigma-MoE to the first seeds). Reported
per row, as mean ± standard deviation over its seeds: bits per character on valid and test (perplexity per
subword token for a SentencePiece corpus), parameters, the feed-forward multiply-adds per token relative to
the dense row (without the selection, as in Tab. 7.3, and with it), training time, and the speed of a
training step and of the feed-forward blocks alone, measured afterwards on the first seed's models with the
rows interleaved (medians over rounds, so load from other processes hits every row alike). For the MoE rows,
expert utilisation of the first seed's model on the validation set
(:mod:`recombine.probes.expert_utilization`, Fig. 7.3).

:func:`run_moe_lm` writes ``report.md``, ``results.json``, ``curves.png`` (validation bpc during training)
and ``expert_utilization.png``.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from recombine.errors import UserError, choices_hint
from recombine.experiments.progress import training_bar, trial_done
from recombine.models.layers.pkm import PKMConfig
from recombine.models.layers.s_base import SBaseConfig
from recombine.models.layers.sigma_moe import SigmaMoEConfig, parameter_matched_dense_width
from recombine.models.layers.topk_mlp import TopKMLPConfig
from recombine.models.transformer_lm import TransformerLM, TransformerLMConfig, bits_per_character
from recombine.probes.expert_utilization import (
    ExpertUtilization,
    measure_expert_utilization,
    save_utilization_figure,
)
from recombine.tasks.language_modelling import (
    LanguageModellingConfig,
    LanguageModellingData,
    build_language_modelling,
    evaluation_windows,
    random_windows,
)
from recombine.train.schedules import lr_multiplier

VARIANTS = ("dense", "sigma_moe", "switch", "s_base", "topk", "pkm")
#: the rows trained with every seed even when ``other_rows_seeds`` limits the others
MAIN_VARIANTS = ("dense", "sigma_moe")

#: Thesis Tab. 7.3 / 7.4 (Enwik8, 41M parameters), bits per character; Switch and S-BASE with K = 1, G = 512.
PAPER_ENWIK8_BPC = {"dense": 1.08, "sigma_moe": 1.08, "switch": 1.08, "s_base": 1.32}
#: Thesis Tab. 7.3 (WikiText-103, 47M parameters, subword tokens), perplexity: the subword runs' column.
PAPER_WT103_PERPLEXITY = {"dense": 11.81, "sigma_moe": 11.71}


def paper_column(subword: bool) -> tuple[str, dict[str, float], str]:
    """The paper column of the report: header, numbers per row, and where they come from."""
    if subword:
        return "paper WT103 ppl", PAPER_WT103_PERPLEXITY, "WikiText-103 perplexity at 47M parameters"
    return "paper E8 bpc", PAPER_ENWIK8_BPC, "Enwik8 at 41M parameters"


@dataclass
class MoELMRunConfig:
    corpus: LanguageModellingConfig = field(default_factory=LanguageModellingConfig)
    variants: list[str] = field(default_factory=lambda: ["dense", "sigma_moe"])
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    n_experts: int = 16  # N_E (Tab. F.3)
    expert_size: int = 32  # G (thesis: 128 at d_model 412-1024); N_E G = 4 d_model as in Tab. F.2
    k: int = 4  # K (Tab. F.3): K G / (N_E G) = 25% of the dense FLOPs
    expert_dropout: float = 0.05  # delta (Tab. F.3, Enwik8)
    regularizer_weight: float = 0.001  # gamma (Tab. F.3)
    dropout: float = 0.1
    context: int = 64
    batch_size: int = 16
    steps: int = 1000
    lr: float = 1e-3  # thesis 2.5e-4 for 100k steps; a short CPU run needs a larger rate
    warmup_steps: int = 100
    grad_clip: float = 0.25  # F.2
    eval_every: int = 250
    seeds: list[int] = field(default_factory=lambda: [0])
    other_rows_seeds: int = 0  # > 0: rows other than dense / sigma_moe train only the first this many seeds
    speed_rounds: int = 5
    speed_steps: int = 3
    threads: int = 1

    def __post_init__(self) -> None:
        for variant in self.variants:
            if variant not in VARIANTS:
                raise UserError(f"unknown moe-lm variant {variant!r}; {choices_hint(variant, VARIANTS)}")
        if not self.variants:
            raise UserError("need at least one variant")
        if min(self.steps, self.batch_size, self.context, self.eval_every, self.speed_rounds) < 1:
            raise UserError("steps, batch_size, context, eval_every and speed_rounds must be >= 1")
        for variant in ("switch", "s_base"):
            if self.n_experts % 4 and variant in self.variants:
                raise UserError(f"the {variant} row needs n_experts divisible by 4, got {self.n_experts}")
        if not self.seeds:
            raise UserError("need at least one seed (seeds=[0] for a single run)")
        if len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"seeds must be distinct, got {self.seeds}")
        if self.other_rows_seeds < 0:
            raise UserError(f"other_rows_seeds must be >= 0 (0: every seed), got {self.other_rows_seeds}")

    def variant_seeds(self, variant: str) -> list[int]:
        """The seeds ``variant`` is trained with."""
        if variant in MAIN_VARIANTS or not self.other_rows_seeds:
            return list(self.seeds)
        return list(self.seeds[: self.other_rows_seeds])

    def model_config(self, variant: str) -> TransformerLMConfig:
        """The LM of one row; every row has (nearly) the sigma-MoE's parameter count."""
        moe_width = self.n_experts * self.expert_size
        dense_width = parameter_matched_dense_width(self.d_model, self.n_experts, self.expert_size)
        common = {"d_model": self.d_model, "n_heads": self.n_heads, "n_layers": self.n_layers}
        common |= {"dropout": self.dropout}
        sigma = SigmaMoEConfig(
            n_experts=self.n_experts,
            k=self.k,
            expert_dropout=self.expert_dropout,
            regularizer_weight=self.regularizer_weight,
        )
        switch = SigmaMoEConfig.switch()
        switch.n_experts = self.n_experts // 4 if self.n_experts >= 4 else 1
        s_base = SBaseConfig(n_experts=switch.n_experts, k=1, regularizer_weight=self.regularizer_weight)
        if variant == "sigma_moe":
            return TransformerLMConfig(**common, ffn="sigma_moe", d_ff=moe_width, sigma_moe=sigma)
        if variant == "switch":
            return TransformerLMConfig(**common, ffn="switch", d_ff=moe_width, switch=switch)
        if variant == "s_base":
            return TransformerLMConfig(**common, ffn="s_base", d_ff=moe_width, s_base=s_base)
        if variant == "topk":
            topk = TopKMLPConfig(k=min(self.k * self.expert_size, dense_width))
            return TransformerLMConfig(**common, ffn="topk", d_ff=dense_width, topk=topk)
        if variant == "pkm":
            n_subkeys = PKMConfig(activation="relu").resolved_n_subkeys(dense_width)
            pkm = PKMConfig(activation="relu", k=min(32, n_subkeys))  # F.2: K = 32 unless fewer sub-keys
            return TransformerLMConfig(**common, ffn="pkm", d_ff=dense_width, pkm=pkm)
        return TransformerLMConfig(**common, ffn="dense", d_ff=dense_width)


MOE_KINDS = ("sigma_moe", "switch", "s_base")


def feed_forward_flops(config: TransformerLMConfig, dense_width: int) -> dict[str, float]:
    """Multiply-adds per token of one feed-forward block relative to the dense row's ``2 d_model d_ff``:
    without the expert selection (the thesis's "% FLOPs", Tab. 7.3) and with it."""
    d, dense = config.d_model, 2 * config.d_model * dense_width
    if config.ffn in MOE_KINDS:
        moe = {"sigma_moe": config.sigma_moe, "switch": config.switch, "s_base": config.s_base}[config.ffn]
        active = 2 * d * moe.k * moe.resolved_expert_size(config.d_ff)
        return {"without_selection": active / dense, "with_selection": (active + moe.n_experts * d) / dense}
    if config.ffn == "topk":  # the up-projection is computed in full, the down-projection for K units only
        flops = d * config.d_ff + d * config.topk.k
        return {"without_selection": flops / dense, "with_selection": flops / dense}
    if config.ffn == "pkm":
        pkm = config.pkm
        s = pkm.resolved_n_subkeys(config.d_ff)
        flops = pkm.heads * (s * d + pkm.k * d)  # two half-width sub-key products per head, K values
        return {"without_selection": flops / dense, "with_selection": flops / dense}
    return {"without_selection": config.d_ff * 2 * d / dense, "with_selection": config.d_ff * 2 * d / dense}


@torch.no_grad()
def evaluate_bpc(model: TransformerLM, stream: np.ndarray, context: int, batch_size: int = 32) -> float:
    """Mean bits per token of ``stream`` (bits per character for a character-level corpus): every token
    but the first predicted once, from the preceding tokens of its window of ``context``
    (:func:`evaluation_windows`)."""
    was_training = model.training
    model.eval()
    windows = evaluation_windows(stream, context)
    total_bits, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        groups: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for window in chunk:  # the last window may be shorter
            groups.setdefault(len(window[0]), []).append(window)
        for group in groups.values():
            x = torch.from_numpy(np.stack([w[0] for w in group]))
            y = torch.from_numpy(np.stack([w[1] for w in group]))
            total_bits += float(bits_per_character(model(x), y)) * y.numel()
            count += y.numel()
    model.train(was_training)
    return total_bits / count


@dataclass
class VariantResult:
    """One training run (a row and a seed); ``valid_bits`` / ``test_bits`` are bits per token."""

    variant: str
    seed: int
    parameters: int
    feed_forward_parameters: int
    flops: dict[str, float]
    valid_bits: float
    test_bits: float
    train_seconds: float
    curve: list[dict[str, float]]
    utilization: dict[str, dict[str, float | int]] = field(default_factory=dict)


@dataclass
class RowSummary:
    """A row over its seeds: mean and (sample) standard deviation of the metric (bpc, or perplexity for
    subword tokens), the first seed's speed measurement."""

    variant: str
    seeds: list[int]
    parameters: int
    feed_forward_parameters: int
    flops: dict[str, float]
    valid_mean: float
    valid_std: float
    test_mean: float
    test_std: float
    train_seconds_mean: float
    speed: dict[str, float] = field(default_factory=dict)


def _training_step(
    model: TransformerLM, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, grad_clip: float
) -> float:
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    auxiliary = model.auxiliary_loss()
    total = loss if auxiliary is None else loss + auxiliary
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return float(loss.detach()) / math.log(2.0)


def train_variant(
    config: MoELMRunConfig, variant: str, data: LanguageModellingData, seed: int = 0
) -> tuple[TransformerLM, VariantResult, dict[str, ExpertUtilization]]:
    torch.manual_seed(seed)
    model_config = config.model_config(variant)
    model = TransformerLM(data.vocab_size, model_config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_multiplier("cosine", config.warmup_steps, config.steps)
    )
    rng = np.random.default_rng(seed)
    train = data.splits["train"]
    curve: list[dict[str, float]] = []
    elapsed, recent = 0.0, []
    with training_bar(config.steps, f"{variant} seed {seed}") as bar:
        for step in range(1, config.steps + 1):
            x, y = (
                torch.from_numpy(a) for a in random_windows(train, config.batch_size, config.context, rng)
            )
            started = time.perf_counter()
            recent.append(_training_step(model, optimizer, x, y, config.grad_clip))
            schedule.step()
            elapsed += time.perf_counter() - started
            if step % config.eval_every == 0 or step == config.steps:
                valid = evaluate_bpc(model, data.splits["valid"], config.context)
                curve.append(
                    {
                        "step": step,
                        "train_bits": float(np.mean(recent)),
                        "valid_bits": valid,
                        "seconds": elapsed,
                    }
                )
                recent = []
            bar.update()
    dense_width = parameter_matched_dense_width(config.d_model, config.n_experts, config.expert_size)
    result = VariantResult(
        variant=variant,
        seed=seed,
        parameters=sum(p.numel() for p in model.parameters()),
        feed_forward_parameters=sum(p.numel() for layer in model.layers for p in layer.ffn.parameters()),
        flops=feed_forward_flops(model_config, dense_width),
        valid_bits=curve[-1]["valid_bits"],
        test_bits=evaluate_bpc(model, data.splits["test"], config.context),
        train_seconds=elapsed,
        curve=curve,
    )
    utilization: dict[str, ExpertUtilization] = {}
    if model_config.ffn in MOE_KINDS:
        batches = [
            torch.from_numpy(np.stack([w[0] for w in chunk]))
            for chunk in _full_windows(data.splits["valid"], config.context, 32)
        ]
        utilization = measure_expert_utilization(model, batches)
        result.utilization = {name: s.summary() for name, s in utilization.items()}
    return model, result, utilization


def _full_windows(
    stream: np.ndarray, context: int, batch_size: int
) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    windows = [w for w in evaluation_windows(stream, context) if len(w[0]) == context]
    return [windows[i : i + batch_size] for i in range(0, len(windows), batch_size)]


def measure_speed(
    models: dict[str, TransformerLM], config: MoELMRunConfig, data: LanguageModellingData
) -> dict[str, dict[str, float]]:
    """Median milliseconds of a training step (forward, auxiliary loss, backward, clipping and an SGD step
    with learning rate 0, so the trained weights stay) and of the feed-forward blocks alone (forward +
    backward of every layer's block on random states of the same shape), the rows interleaved round by
    round."""
    rng = np.random.default_rng(config.seeds[0] + 1)
    x, y = (
        torch.from_numpy(a)
        for a in random_windows(data.splits["train"], config.batch_size, config.context, rng)
    )
    hidden = torch.randn(
        config.batch_size, config.context, config.d_model, generator=torch.Generator().manual_seed(0)
    )
    step_ms: dict[str, list[float]] = {name: [] for name in models}
    ffn_ms: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(config.speed_rounds):
        for name, model in models.items():
            optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # timing only: the weights stay
            model.train()
            started = time.perf_counter()
            for _ in range(config.speed_steps):
                _training_step(model, optimizer, x, y, config.grad_clip)
            step_ms[name].append(1000 * (time.perf_counter() - started) / config.speed_steps)
            started = time.perf_counter()
            for _ in range(config.speed_steps):
                for layer in model.layers:
                    layer.ffn(hidden.requires_grad_(True)).sum().backward()
                model.auxiliary_loss()
            ffn_ms[name].append(1000 * (time.perf_counter() - started) / config.speed_steps)
            model.zero_grad(set_to_none=True)
    tokens = config.batch_size * config.context
    return {
        name: {
            "step_ms": statistics.median(step_ms[name]),
            "feed_forward_ms": statistics.median(ffn_ms[name]),
            "tokens_per_second": tokens / (statistics.median(step_ms[name]) / 1000),
        }
        for name in models
    }


def metric_name(subword: bool) -> str:
    return "perplexity" if subword else "bpc"


def bits_to_metric(bits: float, subword: bool) -> float:
    """Bits per token as the reported metric: perplexity ``2^bits`` per subword token, else bpc."""
    return float(2.0**bits) if subword else bits


def mean_and_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize_rows(runs: list[VariantResult], subword: bool) -> list[RowSummary]:
    """One :class:`RowSummary` per variant, in the order of ``runs``."""
    by_variant: dict[str, list[VariantResult]] = {}
    for run in runs:
        by_variant.setdefault(run.variant, []).append(run)
    rows = []
    for variant, group in by_variant.items():
        valid = mean_and_std([bits_to_metric(r.valid_bits, subword) for r in group])
        test = mean_and_std([bits_to_metric(r.test_bits, subword) for r in group])
        rows.append(
            RowSummary(
                variant=variant,
                seeds=[r.seed for r in group],
                parameters=group[0].parameters,
                feed_forward_parameters=group[0].feed_forward_parameters,
                flops=group[0].flops,
                valid_mean=valid[0],
                valid_std=valid[1],
                test_mean=test[0],
                test_std=test[1],
                train_seconds_mean=statistics.fmean(r.train_seconds for r in group),
            )
        )
    return rows


@dataclass
class MoELMResult:
    config: MoELMRunConfig
    rows: list[RowSummary]
    runs: list[VariantResult]
    corpus: dict[str, object]
    metric: str = "bpc"


def run_moe_lm(out_dir: str | Path, config: MoELMRunConfig | None = None) -> MoELMResult:
    """Train every row with its seeds, measure speed and expert utilisation (first seed); write
    ``report.md``, ``results.json`` and the figures."""
    config = config or MoELMRunConfig()
    torch.set_num_threads(config.threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = build_language_modelling(config.corpus)
    subword = data.subword
    models: dict[str, TransformerLM] = {}
    runs: list[VariantResult] = []
    utilization: dict[str, dict[str, ExpertUtilization]] = {}
    total = sum(len(config.variant_seeds(variant)) for variant in config.variants)
    for variant in config.variants:
        for seed in config.variant_seeds(variant):
            started = time.perf_counter()
            model, run, per_layer = train_variant(config, variant, data, seed)
            runs.append(run)
            headline = f"valid {metric_name(subword)} {bits_to_metric(run.valid_bits, subword):.3f}"
            seconds = time.perf_counter() - started
            trial_done(len(runs), total, f"{variant} seed {seed}", seconds, headline, steps=config.steps)
            if variant not in models:  # the first seed's model is timed and its utilisation plotted
                models[variant] = model
                if per_layer:
                    utilization[variant] = per_layer
    speed = measure_speed(models, config, data)
    rows = summarize_rows(runs, subword)
    for row in rows:
        row.speed = speed[row.variant]
    corpus = {
        "name": data.name,
        "vocab_size": data.vocab_size,
        "tokenizer": data.metadata.get("tokenizer", "char"),
        "characters": data.metadata["characters"],
        "tokens": {split: len(ids) for split, ids in data.splits.items()},
        "sha256": data.metadata["sha256"],
        "python": platform.python_version(),
    }
    result = MoELMResult(config, rows, runs, corpus, metric_name(subword))
    (out / "results.json").write_text(
        json.dumps(
            {
                "config": asdict(config),
                "corpus": corpus,
                "metric": result.metric,
                "rows": [asdict(r) for r in rows],
                "runs": [asdict(r) for r in runs],
            },
            indent=2,
        )
    )
    save_curves_figure(runs, out / "curves.png", subword)
    figures = ["curves.png"]
    if utilization:
        save_utilization_figure(utilization, out / "expert_utilization.png", "validation set, Fig. 7.3")
        figures.append("expert_utilization.png")
    (out / "report.md").write_text(render_report(result, utilization, figures))
    return result


def _with_std(mean: float, std: float, n: int, digits: int) -> str:
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if n > 1 else f"{mean:.{digits}f}"


def render_report(
    result: MoELMResult, utilization: dict[str, dict[str, ExpertUtilization]], figures: list[str]
) -> str:
    c, corpus, metric = result.config, result.corpus, result.metric
    dense = next((r for r in result.rows if r.variant == "dense"), None)
    digits = 2 if metric == "perplexity" else 3
    paper_header, paper_numbers, paper_source = paper_column(metric == "perplexity")
    lines = [
        "# sigma-MoE vs dense language model at CPU scale (thesis Tab. 7.3, 7.4, Fig. 7.3)",
        "",
        f"Corpus `{corpus['name']}` ({corpus['vocab_size']} {corpus['tokenizer']} tokens; characters "
        f"train/valid/test {corpus['characters']}; sha256 `{str(corpus['sha256'])[:16]}`, "
        f"Python {corpus['python']}).",
        f"Pre-LN Transformer LM with relative PE: d_model {c.d_model}, {c.n_layers} layers, "
        f"{c.n_heads} heads, context {c.context}, batch {c.batch_size}, {c.steps} steps, Adam lr {c.lr} "
        f"(warm-up {c.warmup_steps}, cosine), clip {c.grad_clip}, dropout {c.dropout}, seeds {c.seeds}"
        + (
            f" ({c.other_rows_seeds} for the rows other than dense and sigma_moe)"
            if c.other_rows_seeds
            else ""
        )
        + f", {c.threads} thread(s).",
        f"sigma-MoE: N_E {c.n_experts}, G {c.expert_size}, K {c.k}, delta {c.expert_dropout}, "
        f"gamma {c.regularizer_weight}; switch / s_base: N_E {max(c.n_experts // 4, 1)}, "
        f"G {4 * c.expert_size}, "
        f"K 1; dense width {parameter_matched_dense_width(c.d_model, c.n_experts, c.expert_size)} "
        "(parameter-matched).",
        "",
        f"| model | seeds | params | FFN params | % FFN FLOPs (w/o / with selection) | valid {metric} "
        f"| test {metric} | train s | step ms | FFN ms | speed vs dense | {paper_header} |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        relative = f"{dense.speed['step_ms'] / r.speed['step_ms']:.2f}x" if dense else "-"
        paper = paper_numbers.get(r.variant)
        n = len(r.seeds)
        lines.append(
            f"| {r.variant} | {n} | {r.parameters:,} | {r.feed_forward_parameters:,} "
            f"| {100 * r.flops['without_selection']:.1f}% / {100 * r.flops['with_selection']:.1f}% "
            f"| {_with_std(r.valid_mean, r.valid_std, n, digits)} "
            f"| {_with_std(r.test_mean, r.test_std, n, digits)} "
            f"| {r.train_seconds_mean:.0f} | {r.speed['step_ms']:.0f} "
            f"| {r.speed['feed_forward_ms']:.0f} | {relative} | {paper if paper else '-'} |"
        )
    lines += [
        "",
        f"{metric}: mean ± sample standard deviation over the row's seeds. train s: mean training time per "
        "seed. step ms / FFN ms: medians over interleaved rounds after training, first seed's models (a "
        "training step; the feed-forward blocks of all layers, forward + backward, on the same number of "
        f"tokens). The paper's numbers are {paper_source} and 100k GPU steps; only the gaps between "
        "rows are comparable.",
    ]
    if utilization:
        lines += [
            "",
            "Expert utilisation on the validation set, first seed (share = proportion of the selection "
            "weight; normalised entropy 1 = balanced):",
            "",
            "| model | layer | normalised entropy | dead experts | max share | min share |",
            "|---|---|---|---|---|---|",
        ]
        for variant, per_layer in utilization.items():
            for layer, stats in per_layer.items():
                s = stats.summary()
                lines.append(
                    f"| {variant} | {layer} | {s['normalized_entropy']:.3f} | {s['dead_experts']} "
                    f"| {s['max_share']:.3f} | {s['min_share']:.4f} |"
                )
    lines += [""] + [f"![{f}]({f})" for f in figures] + [""]
    return "\n".join(lines)


def save_curves_figure(runs: list[VariantResult], path: Path, subword: bool = False) -> Path:
    """Validation metric during training: per row the mean over its seeds (which share the evaluation
    steps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_variant: dict[str, list[VariantResult]] = {}
    for run in runs:
        by_variant.setdefault(run.variant, []).append(run)
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for variant, group in by_variant.items():
        curve = group[0].curve
        values = [
            statistics.fmean(bits_to_metric(r.curve[i]["valid_bits"], subword) for r in group)
            for i in range(len(curve))
        ]
        seconds = [statistics.fmean(r.curve[i]["seconds"] for r in group) for i in range(len(curve))]
        label = f"{variant} ({len(group)} seed{'s' if len(group) > 1 else ''})"
        axes[0].plot([p["step"] for p in curve], values, marker=".", label=label)
        axes[1].plot(seconds, values, marker=".")
    axes[0].set_xlabel("training step")
    axes[1].set_xlabel("training seconds (1 thread)")
    for ax in axes:
        ax.set_ylabel(f"validation {metric_name(subword)}")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


if __name__ == "__main__":  # python -m recombine.experiments.moe_lm OUT_DIR [VARIANT ...]
    import sys

    arguments = sys.argv[1:]
    run_moe_lm(
        arguments[0] if arguments else "moe-lm",
        MoELMRunConfig(variants=arguments[1:]) if len(arguments) > 1 else None,
    )
