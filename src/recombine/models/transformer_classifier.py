"""Transformer encoder classifiers, from the plain Transformer to the Neural Data Router.

One model, assembled by flags (thesis ch. 5, Tab. 5.1 rows):

============================  ===============  =========  ============
preset                        attention        copy gate  PE
============================  ===============  =========  ============
``transformer``               softmax          no         absolute (first layer only)
``transformer_rel``           relative (XL)    no         relative
``transformer_rel_gate``      relative (XL)    yes        relative
``transformer_absrel_gate``   gated abs/rel    yes        gated (eq. D.7)
``transformer_geom``          geometric        no         direction (eq. 5.9)
``ndr``                       geometric        yes        direction (eq. 5.9)
``ndr_modified``              geometric        yes        direction (eq. 5.9)
============================  ===============  =========  ============

``ndr_modified`` is the NDR of the CTL++ experiments (thesis E.1.1): GELU feed-forward blocks
(``activation="gelu"``, eq. E.1), a residual connection in the data path (``data_residual=True``,
eq. E.2) and no dropout on the feed-forward output (``ffn_dropout=False``).

Each input gets a begin (B) and end (E) token; the prediction is read from the last column
(the E token) of the final layer (thesis D.3.3), or the first column with ``readout="first"``.

The feed-forward block of every layer is chosen by ``ffn`` (``dense``, ``topk``, ``pkm``, ``sigma_moe``,
``switch``, ``s_base``; thesis ch. 7, :mod:`recombine.models.layers.feed_forward`), configured by the nested
``topk`` / ``pkm`` / ``sigma_moe`` / ``switch`` / ``s_base`` fields
(``model.ffn=sigma_moe model.sigma_moe.k=2``).
Regularisers those blocks emit in a training forward are returned by :meth:`auxiliary_loss`.
With shared layers (``shared_layers=True``, Universal-Transformer style) the number of
steps can be raised at test time with ``test_layers`` (thesis D.3.1).

Adaptive Computation Time (thesis appendix D.1, Tab. D.2 baselines): ``act=graves`` (variant "A")
or ``act=universal`` (variant "U", Dehghani et al. 2019) reads every column's output at its own
halting step instead of after the last layer, with at most ``n_layers`` (``test_layers`` in
evaluation) steps, threshold ``1 - act_epsilon`` and ponder cost weight ``act_alpha``
(:mod:`recombine.models.layers.adaptive_computation`); the ponder cost joins
:meth:`auxiliary_loss`. ``act=none`` (the default) is the plain fixed-depth model, with the same
parameters and checkpoint layout as before ACT existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.models.layers.activations import ACTIVATIONS
from recombine.models.layers.adaptive_computation import (
    AdaptiveComputationResult,
    AdaptiveComputationTime,
    check_act_variant,
)
from recombine.models.layers.auxiliary_loss import discard_auxiliary_losses, pop_auxiliary_loss
from recombine.models.layers.encoder_layer import ATTENTION_KINDS, EncoderLayer
from recombine.models.layers.feed_forward import FeedForwardChoice
from recombine.models.layers.glorot_init import WEIGHT_INITS, glorot_init_ndr_layer
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.tasks.base import TaskSpec


@dataclass
class TransformerClassifierConfig(FeedForwardChoice):
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 256
    n_layers: int = 8
    dropout: float = 0.1
    attention_dropout: float = 0.1
    gate_dropout: float = 0.0  # probability of closing a column's copy gate in training (thesis E.1)
    attention: str = "softmax"
    copy_gate: bool = False
    shared_layers: bool = True
    readout: str = "last"
    test_layers: int = 0
    act: str = "none"  # none | graves | universal (thesis D.1, Tab. D.2 "A" / "U")
    act_alpha: float = 0.03  # ponder cost weight (D.1: best of 0.001 .. 0.1)
    act_epsilon: float = 0.01  # halting threshold 1 - epsilon (eq. D.2)
    activation: str = "relu"  # relu (eq. 5.5) | gelu (eq. E.1, modified NDR)
    data_residual: bool = False  # eq. E.2: u = LN(FFN_data(a) + a) (modified NDR; gated models only)
    ffn_dropout: bool = True  # dropout on the feed-forward output (E.1.1: none in the modified NDR)
    # dropout on the hidden units of the data and gate FFNs (the authors' released NDR layer; with
    # ffn_dropout=false that layer's placement)
    hidden_dropout: bool = False
    # divide each row of the geometric attention by its sum (the authors' released code; not in eqs. 5.7-5.10)
    geometric_normalize: bool = False
    # "glorot": the weight initialisation of the authors' released NDR layer (geometric attention, dense
    # ReLU FFN; recombine.models.layers.glorot_init); "pytorch": PyTorch's defaults
    weight_init: str = "pytorch"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.activation not in ACTIVATIONS:
            raise UserError(
                f"unknown model.activation {self.activation!r}; {choices_hint(self.activation, ACTIVATIONS)}"
            )
        if self.activation != "relu" and self.ffn != "dense":
            raise UserError(f"model.activation applies to the dense feed-forward block, not ffn={self.ffn}")
        if self.data_residual and not self.copy_gate:
            raise UserError("model.data_residual (thesis eq. E.2) needs model.copy_gate=true")
        if self.geometric_normalize and self.attention != "geometric":
            raise UserError(f"model.geometric_normalize applies to attention=geometric, not {self.attention}")
        if self.hidden_dropout and self.ffn != "dense":
            raise UserError(
                f"model.hidden_dropout applies to the dense feed-forward block, not ffn={self.ffn}"
            )
        if self.weight_init not in WEIGHT_INITS:
            hint = choices_hint(self.weight_init, WEIGHT_INITS)
            raise UserError(f"unknown model.weight_init {self.weight_init!r}; {hint}")
        check_act_variant(self.act)
        if not 0.0 < self.act_epsilon < 1.0:
            raise UserError(f"model.act_epsilon must be in (0, 1), got {self.act_epsilon}")
        if self.act_alpha < 0.0:
            raise UserError(f"model.act_alpha must be >= 0, got {self.act_alpha}")
        if self.attention not in ATTENTION_KINDS:
            raise UserError(
                f"unknown model.attention {self.attention!r}; {choices_hint(self.attention, ATTENTION_KINDS)}"
            )
        if self.weight_init == "glorot" and (
            self.attention != "geometric" or self.ffn != "dense" or self.activation != "relu"
        ):
            raise UserError(
                "model.weight_init=glorot (the released NDR layer's initialisation) needs "
                "attention=geometric, ffn=dense and activation=relu, "
                f"not {self.attention}, {self.ffn} and {self.activation}"
            )
        if self.readout not in ("first", "last"):
            raise UserError(f"unknown model.readout {self.readout!r}; valid choices: last, first")
        if self.d_model % self.n_heads:
            raise UserError(f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}")
        if not 0.0 <= self.gate_dropout < 1.0:
            raise UserError(f"model.gate_dropout must be in [0, 1), got {self.gate_dropout}")
        if self.n_layers < 1:
            raise UserError(f"model.n_layers must be >= 1, got {self.n_layers}")
        if self.test_layers and not self.shared_layers:
            raise UserError(
                "model.test_layers needs model.shared_layers=true (unshared layers cannot be repeated)"
            )


class TransformerClassifier(nn.Module):
    def __init__(self, spec: TaskSpec, config: TransformerClassifierConfig) -> None:
        super().__init__()
        self.config = config
        self.begin_id, self.end_id = spec.input_vocab_size, spec.input_vocab_size + 1
        self.embedding = nn.Embedding(spec.input_vocab_size + 2, config.d_model)
        self.absolute_positions = config.attention == "softmax"

        def make_layer() -> EncoderLayer:
            ffn = config.build_block(config.d_model, config.d_ff, config.n_layers)
            return EncoderLayer(
                config.d_model,
                config.n_heads,
                config.d_ff,
                config.dropout,
                config.attention,
                config.copy_gate,
                config.attention_dropout,
                config.gate_dropout,
                ffn,
                activation=config.activation,
                data_residual=config.data_residual,
                ffn_dropout=config.ffn_dropout,
                hidden_dropout=config.hidden_dropout,
                geometric_normalize=config.geometric_normalize,
            )

        n_modules = 1 if config.shared_layers else config.n_layers
        self.layers = nn.ModuleList(make_layer() for _ in range(n_modules))
        if config.weight_init == "glorot":  # (before the readout: the ndr-ctl records were drawn so)
            for layer in self.layers:
                glorot_init_ndr_layer(layer)
        self.readout = nn.Linear(config.d_model, spec.n_classes)
        # created only with ACT on, so that act=none keeps the checkpoint layout of the plain model
        self.adaptive_computation = (
            AdaptiveComputationTime(config.d_model, config.act, config.act_epsilon, config.act_alpha)
            if config.act != "none"
            else None
        )

    def auxiliary_loss(self) -> torch.Tensor | None:
        """The regularisers the feed-forward blocks emitted in the last training forward, summed over
        layer applications (e.g. gamma * eq. 7.20 for sigma-MoE), plus the ACT ponder cost
        (thesis D.1); None when there are none."""
        return pop_auxiliary_loss(self)

    def n_steps(self) -> int:
        if not self.training and self.config.test_layers:
            return self.config.test_layers
        return self.config.n_layers

    def _with_boundary_tokens(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``B x1 .. xn E <pad>..``: begin at column 0, end right after each sequence."""
        batch = tokens.shape[0]
        framed = torch.nn.functional.pad(tokens, (1, 1))
        framed[:, 0] = self.begin_id
        framed[torch.arange(batch, device=tokens.device), lengths + 1] = self.end_id
        return framed

    def _encode(
        self, tokens: torch.Tensor, lengths: torch.Tensor, internals: list[dict[str, torch.Tensor]] | None
    ) -> tuple[torch.Tensor, AdaptiveComputationResult | None]:
        """The final column states ``[B, N, d]`` (with ACT: each column's halted output) and the ACT
        result (None without ACT); appends each step's layer internals to ``internals`` if given."""
        discard_auxiliary_losses(self)
        framed = self._with_boundary_tokens(tokens, lengths)
        columns = torch.arange(framed.shape[1], device=tokens.device)
        padding = columns[None, :] > (lengths + 1)[:, None]
        h = self.embedding(framed)
        if self.absolute_positions:  # PE only at the first layer (universal transformer)
            h = h + sinusoidal_embedding(columns, self.config.d_model)

        def apply_step(state: torch.Tensor, step: int) -> torch.Tensor:
            state, info = self.layers[step % len(self.layers)](state, padding)
            if internals is not None:
                internals.append(info)
            return state

        if self.adaptive_computation is None:
            for step in range(self.n_steps()):
                h = apply_step(h, step)
            return h, None
        halting = self.adaptive_computation(h, padding, self.n_steps(), apply_step)
        if internals is not None:
            for step, info in enumerate(internals):
                info["halting_probability"] = halting.halting_probabilities[..., step]
        return halting.output, halting

    def halting(self, tokens: torch.Tensor, lengths: torch.Tensor) -> AdaptiveComputationResult:
        """ACT's halting probabilities and steps per column for a batch (thesis Fig. D.1); columns are
        ``B x1 .. xn E <pad>``."""
        if self.adaptive_computation is None:
            raise UserError("this model has no ACT; build it with model.act=graves or model.act=universal")
        _, result = self._encode(tokens, lengths, None)
        assert result is not None
        return result

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, return_internals: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        internals: list[dict[str, torch.Tensor]] = []
        h, _ = self._encode(tokens, lengths, internals if return_internals else None)
        read_column = lengths + 1 if self.config.readout == "last" else torch.zeros_like(lengths)
        logits = self.readout(h[torch.arange(h.shape[0], device=h.device), read_column])
        return (logits, internals) if return_internals else logits
