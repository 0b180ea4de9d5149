"""Model registry: ``recombine.models.build("ndr", task.spec, d_model=128)``.

Presets are the same architecture under another name with other defaults (timm style), so any
preset can still be changed field by field: ``model=ndr model.n_layers=10``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from recombine.config_validation import build_config
from recombine.errors import UserError
from recombine.models.lstm_classifier import LSTMClassifier, LSTMClassifierConfig
from recombine.models.transformer_classifier import TransformerClassifier, TransformerClassifierConfig
from recombine.registry import Registry
from recombine.tasks.base import TaskSpec

MODELS: Registry = Registry("model")


def _transformer(spec: TaskSpec, config: TransformerClassifierConfig) -> nn.Module:
    if spec.kind != "classify":
        raise UserError(f"this Transformer is a classifier; the task is of kind {spec.kind!r}")
    return TransformerClassifier(spec, config)


def _lstm(spec: TaskSpec, config: LSTMClassifierConfig) -> nn.Module:
    if spec.kind != "classify":
        raise UserError(f"this LSTM is a classifier; the task is of kind {spec.kind!r}")
    return LSTMClassifier(spec, config)


_T = TransformerClassifierConfig
MODELS.add(
    "transformer", _T, _transformer, "Universal Transformer encoder classifier, absolute sinusoidal PE"
)
MODELS.add("transformer_rel", _T, _transformer, "+ relative PE (Transformer-XL form)", attention="relative")
MODELS.add(
    "transformer_rel_gate",
    _T,
    _transformer,
    "+ relative PE + copy gate (thesis 5.1.1)",
    attention="relative",
    copy_gate=True,
)
MODELS.add(
    "transformer_absrel_gate",
    _T,
    _transformer,
    "+ gated absolute/relative PE (thesis D.2) + copy gate",
    attention="gated_absrel",
    copy_gate=True,
)
MODELS.add(
    "transformer_geom",
    _T,
    _transformer,
    "+ geometric attention with directional encoding, no gate (thesis 5.1.2)",
    attention="geometric",
)
MODELS.add(
    "ndr",
    _T,
    _transformer,
    "Neural Data Router: shared layers + geometric attention + copy gate (thesis 5.1)",
    attention="geometric",
    copy_gate=True,
)
MODELS.add("lstm", LSTMClassifierConfig, _lstm, "LSTM classifier reading the final hidden state")
MODELS.add(
    "bilstm",
    LSTMClassifierConfig,
    _lstm,
    "bidirectional LSTM classifier reading both final hidden states",
    d_model=400,
    bidirectional=True,
)


def build(name: str, spec: TaskSpec, **config: Any) -> nn.Module:
    entry = MODELS.get(name)
    return entry.factory(spec, build_config(entry, config, section="model"))


def names() -> list[str]:
    return MODELS.names()


__all__ = ["MODELS", "build", "names"]
