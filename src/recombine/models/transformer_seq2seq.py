"""Transformer encoder-decoder for seq2seq tasks (thesis ch. 4; Vaswani et al., 2017).

The configurations of thesis 4.1.2 and 4.2, by flags:

======================================  ============  ==============  ======================================
preset                                  attention     shared layers   positions
======================================  ============  ==============  ======================================
``transformer_seq2seq``                 softmax       no              absolute sinusoidal, added to the input
``transformer_seq2seq_universal``       softmax       yes             absolute sinusoidal, added to the input
``transformer_seq2seq_rel``             relative      no              Transformer-XL (thesis C.3)
``transformer_seq2seq_rel_universal``   relative      yes             Transformer-XL (thesis C.3)
======================================  ============  ==============  ======================================

* Post-LN layers (thesis C.2), dropout after every attention and feed-forward block.
* Relative PE (thesis 4.2.1, C.3, eq. C.1): symmetric offsets in the encoder, causal in the decoder, plain
  attention without positions between them; no absolute PE is added then.
* Universal (thesis 4.1.2): one encoder layer and one decoder layer, each applied ``n_*_layers`` times
  (no ACT, no timestep embedding); an absolute PE is only added at the input (the first layer).
* Embedding scaling (thesis 4.2.3, C.4), ``H_i = s E_{w_i} + c P_i``:
  ``teu`` Glorot-uniform ``E``, ``s = sqrt(d_model)``, ``c = 1``; ``none`` ``E ~ N(0, 1)``, ``s = c = 1``;
  ``ped`` ``E ~ N(0, 1/sqrt(d_model))`` (Kaiming), ``s = 1``, ``c = 1/sqrt(d_model)``. Without absolute
  PE (relative attention) only the initialisation and ``s`` remain.
* The output layer is tied to the decoder embedding (thesis C.2), ``tied_embedding=false`` unties it.
* ``ffn`` replaces the dense feed-forward block of every encoder and decoder layer by a thesis ch. 7
  block (``topk``, ``pkm``, ``sigma_moe``, ``switch``, ``s_base``;
  :mod:`recombine.models.layers.feed_forward`), also in the universal presets; their regularisers reach
  the loss through :meth:`auxiliary_loss`. S-BASE balances its routing over the whole batch in training,
  so a decoder position can then depend on later ones through the routing (a property of BASE layers);
  it is causal in evaluation.

Token conventions (EOS, SOS, teacher forcing) are those of :mod:`recombine.models.seq2seq_interface`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.models.layers.auxiliary_loss import discard_auxiliary_losses, pop_auxiliary_loss
from recombine.models.layers.decoder_layer import DECODER_ATTENTION_KINDS, DecoderLayer
from recombine.models.layers.encoder_layer import EncoderLayer
from recombine.models.layers.feed_forward import FeedForwardChoice
from recombine.models.layers.kv_cache import KeyValueCache
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.layers.token_packing import TokenPacking
from recombine.models.seq2seq_interface import PAD_ID, eos_id, sos_id
from recombine.tasks.base import TaskSpec

EMBEDDING_SCALINGS = ("ped", "none", "teu")
#: Decoding runs up to the longest output of the task plus this many steps (``max_decode_length=0``).
DECODE_MARGIN = 10


@dataclass
class TransformerSeq2SeqConfig(FeedForwardChoice):
    d_model: int = 128
    n_heads: int = 8
    d_ff: int = 256
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    dropout: float = 0.1  # after each attention and feed-forward block (thesis C.2)
    attention_dropout: float = 0.0  # on the attention queries
    attention: str = "softmax"  # "relative": Transformer-XL (thesis C.3)
    shared_layers: bool = False  # true: universal Transformer (thesis 4.1.2)
    embedding_scaling: str = "ped"  # ped, none, teu (thesis 4.2.3, C.4)
    tied_embedding: bool = True  # output layer = decoder embedding (thesis C.2)
    max_decode_length: int = 0  # 0: the task's longest output + DECODE_MARGIN

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attention not in DECODER_ATTENTION_KINDS:
            hint = choices_hint(self.attention, DECODER_ATTENTION_KINDS)
            raise UserError(f"unknown model.attention {self.attention!r} for a seq2seq Transformer; {hint}")
        if self.embedding_scaling not in EMBEDDING_SCALINGS:
            hint = choices_hint(self.embedding_scaling, EMBEDDING_SCALINGS)
            raise UserError(f"unknown model.embedding_scaling {self.embedding_scaling!r}; {hint}")
        if self.d_model % self.n_heads:
            raise UserError(f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) < 1:
                raise UserError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_decode_length < 0:
            raise UserError(f"model.max_decode_length must be >= 0, got {self.max_decode_length}")


class TransformerSeq2Seq(nn.Module):
    def __init__(self, spec: TaskSpec, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.n_classes = spec.n_classes
        self.eos_id, self.sos_id = eos_id(spec.n_classes), sos_id(spec.n_classes)
        self.max_decode_length = config.max_decode_length or spec.max_output_length + DECODE_MARGIN
        self.absolute_positions = config.attention == "softmax"

        self.src_embedding = nn.Embedding(spec.input_vocab_size, d)
        self.tgt_embedding = nn.Embedding(spec.n_classes + 2, d)  # + EOS, SOS
        for embedding in (self.src_embedding, self.tgt_embedding):
            _init_embedding(embedding.weight, config.embedding_scaling)
        # thesis C.4: s scales the token embeddings, c the positional ones
        self.token_scale = math.sqrt(d) if config.embedding_scaling == "teu" else 1.0
        self.position_scale = 1 / math.sqrt(d) if config.embedding_scaling == "ped" else 1.0

        def encoder_layer() -> EncoderLayer:
            return EncoderLayer(
                d,
                config.n_heads,
                config.d_ff,
                config.dropout,
                config.attention,  # "relative": symmetric offsets (thesis C.3)
                copy_gate=False,
                attention_dropout=config.attention_dropout,
                ffn=config.build_block(d, config.d_ff, config.n_encoder_layers),
                fast_dropout=True,  # layers/fast_dropout.py: nn.Dropout's distribution, faster on CPU
            )

        def decoder_layer() -> DecoderLayer:
            return DecoderLayer(
                d,
                config.n_heads,
                config.d_ff,
                config.dropout,
                config.attention,
                config.attention_dropout,
                ffn=config.build_block(d, config.d_ff, config.n_decoder_layers),
            )

        shared = config.shared_layers
        self.encoder_layers = nn.ModuleList(
            encoder_layer() for _ in range(1 if shared else config.n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            decoder_layer() for _ in range(1 if shared else config.n_decoder_layers)
        )
        # n_classes + 1 logits: pad (ignored), the task's tokens, EOS; never SOS
        self.output = None if config.tied_embedding else nn.Linear(d, spec.n_classes + 1)

    def auxiliary_loss(self) -> torch.Tensor | None:
        """The regularisers the ``ffn`` blocks emitted in the last training forward (e.g. gamma * eq.
        7.20 for sigma-MoE), summed over layer applications; None with dense blocks."""
        return pop_auxiliary_loss(self)

    def _embed(
        self, embedding: nn.Embedding, tokens: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """thesis C.4: ``H_i = s E_{w_i} + c P_i`` for ``tokens`` at time steps ``positions`` (broadcastable
        to ``tokens``; default ``0, 1, ...`` along the last axis). No ``P`` with relative attention."""
        h = embedding(tokens) * self.token_scale
        if self.absolute_positions:  # only at the input, i.e. the first layer (thesis 4.1.2)
            if positions is None:
                positions = torch.arange(tokens.shape[-1], device=tokens.device)
            h = h + self.position_scale * sinusoidal_embedding(positions, self.config.d_model).to(h.dtype)
        return h

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(memory [B, S, d], padding [B, S])`` for the 0-padded source ``src [B, S]``. Only the real
        positions are computed (``layers/token_packing.py``; the keys of padded ones are hidden from every
        query): ``memory`` is 0 at the padding."""
        padding = torch.arange(src.shape[1], device=src.device)[None, :] >= src_len[:, None]
        packing = TokenPacking.from_lengths(src_len, src.shape[1])
        h = self._embed(self.src_embedding, packing.pack(src), packing.positions)
        for step in range(self.config.n_encoder_layers):
            h, _ = self.encoder_layers[step % len(self.encoder_layers)](h, padding, packing)
        return packing.unpack(h), padding

    def new_decoder_cache(self) -> list[tuple[KeyValueCache, KeyValueCache]]:
        """Empty key/value caches for incremental decoding, one pair per decoder layer application. The
        applications of one layer (universal: all of them) share its cross-attention cache: the keys and
        values of the encoder output are the same for each."""
        cross = self._cross_attention_caches()
        return [(KeyValueCache(), cross[step]) for step in range(self.config.n_decoder_layers)]

    def _cross_attention_caches(self) -> list[KeyValueCache]:
        """One cross-attention cache per decoder layer application, shared by the applications of a layer."""
        caches = [KeyValueCache() for _ in self.decoder_layers]
        return [caches[step % len(caches)] for step in range(self.config.n_decoder_layers)]

    def decode(
        self,
        memory: torch.Tensor,
        padding: torch.Tensor,
        tgt_in: torch.Tensor,
        cache: list[tuple[KeyValueCache, KeyValueCache]] | None = None,
        tgt_len: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, T, n_classes + 1]`` for every decoder input position (causal: position ``t`` sees
        ``tgt_in[:, :t+1]`` only). With a ``cache`` (:meth:`new_decoder_cache`) ``tgt_in`` holds only the
        positions after those of earlier calls, whose keys and values the cache keeps. With ``tgt_len``
        (no cache) only positions ``t < tgt_len[b]`` are computed (``layers/token_packing.py``); the
        logits of the others are 0. Without a cache the keys and values of ``memory`` are still computed
        once per decoder layer, not once per application (universal: once in all)."""
        start = cache[0][0].length if cache is not None else 0
        positions = torch.arange(start, start + tgt_in.shape[1], device=tgt_in.device)
        packing = None
        if tgt_len is not None and cache is None:
            packing = TokenPacking.from_lengths(tgt_len, tgt_in.shape[1])
            tgt_in, positions = packing.pack(tgt_in), packing.positions
        h = self._embed(self.tgt_embedding, tgt_in, positions)
        caches: list[tuple[KeyValueCache | None, KeyValueCache | None]] = (
            list(cache) if cache is not None else [(None, cross) for cross in self._cross_attention_caches()]
        )
        for step in range(self.config.n_decoder_layers):
            layer = self.decoder_layers[step % len(self.decoder_layers)]
            h = layer(h, memory, padding, caches[step], packing)
        if self.output is not None:
            logits = self.output(h)
        else:  # tied (thesis C.2), no SOS row
            logits = F.linear(h, self.tgt_embedding.weight[: self.n_classes + 1])
        return logits if packing is None else packing.unpack(logits)

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, tgt_len: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits ``[B, T, n_classes + 1]`` for the decoder input ``tgt_in [B, T]`` (``[SOS] +
        y``). Positions from ``tgt_len`` on are padding: the causal mask keeps them from influencing
        earlier positions, and they are not computed at all (their logits are 0)."""
        discard_auxiliary_losses(self)  # terms of an earlier forward whose loss was never collected
        memory, padding = self.encode(src, src_len)
        return self.decode(memory, padding, tgt_in, tgt_len=tgt_len)

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_len: torch.Tensor, max_length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Batched greedy decoding: ``(tokens [B, T], lengths [B])``.

        At most ``max_length`` steps (default ``self.max_decode_length``), each emitting a token or EOS.
        ``tokens[b, :lengths[b]]`` is the argmax output before the first EOS, followed by 0. A sequence
        without EOS after ``max_length`` steps has length ``max_length``, so a length below ``max_length``
        always means the sequence ended. One loop over time steps for all sequences at once; it stops as
        soon as every sequence has emitted EOS. The pad id is never predicted. Each step feeds only the
        newest token; the keys and values of earlier positions come from a cache (``layers/kv_cache.py``)."""
        max_length = self.max_decode_length if max_length is None else max_length
        batch = src.shape[0]
        memory, padding = self.encode(src, src_len)
        cache = self.new_decoder_cache()
        newest = torch.full((batch, 1), self.sos_id, dtype=torch.long, device=src.device)
        predictions: list[torch.Tensor] = []
        lengths = torch.full((batch,), max_length, dtype=torch.long, device=src.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        for step in range(max_length):
            logits = self.decode(memory, padding, newest, cache)[:, -1]
            newest = logits[:, PAD_ID + 1 :].argmax(-1, keepdim=True) + PAD_ID + 1
            predictions.append(newest)
            ends = (newest[:, 0] == self.eos_id) & ~finished
            lengths[ends] = step
            finished |= ends
            if finished.all():
                break
        outputs = torch.cat(predictions, dim=1) if predictions else newest[:, :0]
        outputs = outputs.masked_fill(
            torch.arange(outputs.shape[1], device=src.device)[None, :] >= lengths[:, None], PAD_ID
        )
        return outputs[:, : int(lengths.max()) if batch else 0], lengths


def _init_embedding(weight: torch.Tensor, scaling: str) -> None:
    """thesis C.4: Glorot for TEU, N(0, 1) for no scaling, Kaiming N(0, 1/sqrt(d_model)) for PED."""
    if scaling == "teu":
        nn.init.xavier_uniform_(weight)
    elif scaling == "none":
        nn.init.normal_(weight, 0.0, 1.0)
    else:
        nn.init.normal_(weight, 0.0, 1 / math.sqrt(weight.shape[1]))
