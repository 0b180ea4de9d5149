"""Model registry: ``recombine.models.build("ndr", task.spec, d_model=128)``.

Presets are the same architecture under another name with other defaults (timm style), so any
preset can still be changed field by field: ``model=ndr model.n_layers=10``. Every model is built for
one task kind (``names(kind="seq2seq")``); its factory refuses a task of another kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from recombine.config_validation import build_config
from recombine.errors import UserError
from recombine.models.dnc import DNCClassifier, DNCClassifierConfig
from recombine.models.lstm_classifier import LSTMClassifier, LSTMClassifierConfig
from recombine.models.lstm_seq2seq import LSTMSeq2Seq, LSTMSeq2SeqConfig
from recombine.models.transformer_classifier import TransformerClassifier, TransformerClassifierConfig
from recombine.models.transformer_seq2seq import TransformerSeq2Seq, TransformerSeq2SeqConfig
from recombine.registry import Registry
from recombine.tasks.base import TaskKind, TaskSpec

MODELS: Registry = Registry("model")
#: model name -> the task kind it is built for
KINDS: dict[str, TaskKind] = {}


def _add(
    kind: TaskKind,
    name: str,
    config_class: type,
    factory: Callable[..., nn.Module],
    description: str,
    **defaults: Any,
) -> None:
    MODELS.add(name, config_class, factory, description, **defaults)
    KINDS[name] = kind


# --- classifiers (thesis ch. 5) ---


def _transformer(spec: TaskSpec, config: TransformerClassifierConfig) -> nn.Module:
    if spec.kind != "classify":
        raise UserError(f"this Transformer is a classifier; the task is of kind {spec.kind!r}")
    return TransformerClassifier(spec, config)


def _lstm(spec: TaskSpec, config: LSTMClassifierConfig) -> nn.Module:
    if spec.kind != "classify":
        raise UserError(f"this LSTM is a classifier; the task is of kind {spec.kind!r}")
    return LSTMClassifier(spec, config)


_T = TransformerClassifierConfig
_add(
    "classify",
    "transformer",
    _T,
    _transformer,
    "Universal Transformer encoder classifier, absolute sinusoidal PE",
)
_add(
    "classify",
    "transformer_rel",
    _T,
    _transformer,
    "+ relative PE (Transformer-XL form)",
    attention="relative",
)
_add(
    "classify",
    "transformer_rel_gate",
    _T,
    _transformer,
    "+ relative PE + copy gate (thesis 5.1.1)",
    attention="relative",
    copy_gate=True,
)
_add(
    "classify",
    "transformer_absrel_gate",
    _T,
    _transformer,
    "+ gated absolute/relative PE (thesis D.2) + copy gate",
    attention="gated_absrel",
    copy_gate=True,
)
_add(
    "classify",
    "transformer_geom",
    _T,
    _transformer,
    "+ geometric attention with directional encoding, no gate (thesis 5.1.2)",
    attention="geometric",
)
_add(
    "classify",
    "ndr",
    _T,
    _transformer,
    "Neural Data Router: shared layers + geometric attention + copy gate (thesis 5.1)",
    attention="geometric",
    copy_gate=True,
)
_add(
    "classify",
    "ndr_modified",
    _T,
    _transformer,
    "NDR of the CTL++ experiments: GELU, residual data path, no FFN dropout (thesis E.1.1)",
    attention="geometric",
    copy_gate=True,
    activation="gelu",
    data_residual=True,
    ffn_dropout=False,
)
# thesis Tab. D.2: the gateless baselines with ACT (variant "A"; model.act=universal for "U")
_add(
    "classify",
    "transformer_act",
    _T,
    _transformer,
    "Universal Transformer + ACT (thesis D.1, variant A; act=universal for U)",
    act="graves",
)
_add(
    "classify",
    "transformer_rel_act",
    _T,
    _transformer,
    "+ relative PE + ACT (thesis D.1, variant A; act=universal for U)",
    attention="relative",
    act="graves",
)
_add(
    "classify",
    "transformer_geom_act",
    _T,
    _transformer,
    "+ geometric attention + ACT (thesis D.1, variant A; act=universal for U)",
    attention="geometric",
    act="graves",
)
_add("classify", "lstm", LSTMClassifierConfig, _lstm, "LSTM classifier reading the final hidden state")
_add(
    "classify",
    "bilstm",
    LSTMClassifierConfig,
    _lstm,
    "bidirectional LSTM classifier reading both final hidden states",
    d_model=400,
    bidirectional=True,
)


def _dnc(spec: TaskSpec, config: DNCClassifierConfig) -> nn.Module:
    if spec.kind != "classify":
        raise UserError(f"this DNC is a classifier; the task is of kind {spec.kind!r}")
    return DNCClassifier(spec, config)


_add("classify", "dnc", DNCClassifierConfig, _dnc, "DNC (LSTM controller + memory, thesis 2.1) classifier")
_add(
    "classify",
    "dnc_mds",
    DNCClassifierConfig,
    _dnc,
    "DNC-MDS: + masked content addressing, de-allocation, link sharpness (thesis 2.2)",
    masked=True,
    dealloc=True,
    sharpness=True,
)


# --- seq2seq (thesis ch. 4) ---


def _transformer_seq2seq(spec: TaskSpec, config: TransformerSeq2SeqConfig) -> nn.Module:
    if spec.kind != "seq2seq":
        raise UserError(f"this Transformer is a seq2seq encoder-decoder; the task is of kind {spec.kind!r}")
    return TransformerSeq2Seq(spec, config)


_S = TransformerSeq2SeqConfig
_add(
    "seq2seq",
    "transformer_seq2seq",
    _S,
    _transformer_seq2seq,
    "Transformer encoder-decoder, absolute sinusoidal PE (thesis 4.1.2)",
)
_add(
    "seq2seq",
    "transformer_seq2seq_universal",
    _S,
    _transformer_seq2seq,
    "+ shared layers (universal Transformer, thesis 4.1.2)",
    shared_layers=True,
)
_add(
    "seq2seq",
    "transformer_seq2seq_rel",
    _S,
    _transformer_seq2seq,
    "Transformer encoder-decoder, relative PE (Transformer-XL, symmetric in the encoder; thesis C.3)",
    attention="relative",
)
_add(
    "seq2seq",
    "transformer_seq2seq_rel_universal",
    _S,
    _transformer_seq2seq,
    "+ relative PE + shared layers (thesis 4.2.1)",
    attention="relative",
    shared_layers=True,
)


def _lstm_seq2seq(spec: TaskSpec, config: LSTMSeq2SeqConfig) -> nn.Module:
    if spec.kind != "seq2seq":
        raise UserError(f"this LSTM is a seq2seq encoder-decoder; the task is of kind {spec.kind!r}")
    return LSTMSeq2Seq(spec, config)


_add(
    "seq2seq",
    "lstm_seq2seq",
    LSTMSeq2SeqConfig,
    _lstm_seq2seq,
    "bidirectional LSTM encoder, LSTM decoder with Bahdanau attention (GDRC App. B)",
)
_add(
    "seq2seq",
    "lstm_seq2seq_luong",
    LSTMSeq2SeqConfig,
    _lstm_seq2seq,
    "+ Luong attention (general score, input feeding) instead of Bahdanau",
    attention="luong",
)


def build(name: str, spec: TaskSpec, **config: Any) -> nn.Module:
    entry = MODELS.get(name)
    return entry.factory(spec, build_config(entry, config, section="model"))


def names(kind: TaskKind | None = None) -> list[str]:
    """Registered model names, all or only those built for tasks of ``kind``."""
    return [name for name in MODELS.names() if kind is None or KINDS[name] == kind]


__all__ = ["KINDS", "MODELS", "build", "names"]
