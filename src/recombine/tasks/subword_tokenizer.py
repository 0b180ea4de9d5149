"""Subword tokenisation with SentencePiece for language modelling (thesis 7.5, App. F.2: WikiText-103).

The thesis models WikiText-103 with a SentencePiece subword vocabulary (Kudo and Richardson, 2018) and reports
perplexity per subword token. A :class:`SubwordTokenizer` wraps a SentencePiece model trained on the training
split of a corpus (offline: the ``sentencepiece`` package, nothing downloaded), set up so that decoding gives
back exactly the encoded text, which a language model over a stream of text needs:

* ``normalization_rule_name=identity``, ``remove_extra_whitespaces=False``, ``add_dummy_prefix=False``: the
  text is not normalised, spaces are kept as they are;
* ``"\\n"`` is a user-defined piece, so line breaks are tokens (SentencePiece trains on lines otherwise);
* ``byte_fallback=True`` with ``character_coverage=1.0``: a character never seen in training (in the valid or
  test split) is encoded as its UTF-8 bytes, so no split has unknown tokens.

Training is deterministic (one thread, no sampling of sentences) and cached on disk
(:mod:`recombine.tasks.cache`) keyed by the SHA-256 of the training text and the settings, so a corpus is
tokenised once per machine. The byte pieces take 256 ids, so ``vocab_size`` must exceed 256 plus the number of
distinct characters; a small corpus may get fewer pieces than asked for (``hard_vocab_limit=False``).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks.cache import cached

MODEL_TYPES = ("unigram", "bpe")
#: the byte pieces of ``byte_fallback`` plus unk/bos/eos and the line-break piece
MIN_VOCAB_SIZE = 256 + 4
CACHE_VERSION = 1


def _import_sentencepiece():  # type: ignore[no-untyped-def]
    try:
        import sentencepiece
    except ImportError as error:  # pragma: no cover - the package is a dependency
        raise UserError(
            "subword tokenization needs the 'sentencepiece' package: pip install sentencepiece"
        ) from error
    return sentencepiece


def train_sentencepiece_model(text: str, vocab_size: int, model_type: str = "unigram") -> bytes:
    """The serialised SentencePiece model trained on the lines of ``text`` (see the module docstring)."""
    spm = _import_sentencepiece()
    if model_type not in MODEL_TYPES:
        raise UserError(
            f"unknown sentencepiece model_type {model_type!r}; {choices_hint(model_type, MODEL_TYPES)}"
        )
    if vocab_size < MIN_VOCAB_SIZE:
        raise UserError(
            f"subword vocab_size must be >= {MIN_VOCAB_SIZE} (256 byte pieces + specials), got {vocab_size}"
        )
    lines = [line for line in text.split("\n") if line]
    if not lines:
        raise UserError("cannot train a subword tokenizer on an empty text")
    required = MIN_VOCAB_SIZE + len(set(text) - {"\n"})
    if vocab_size < required:
        raise UserError(
            f"subword vocab_size {vocab_size} is too small: the 256 byte pieces, specials and the "
            f"{required - MIN_VOCAB_SIZE} distinct characters of the text need >= {required}"
        )
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            byte_fallback=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            user_defined_symbols=["\n"],
            hard_vocab_limit=False,
            max_sentence_length=1 << 16,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as error:
        raise UserError(f"sentencepiece training failed: {str(error).splitlines()[0]}") from error
    return writer.getvalue()


@dataclass(frozen=True)
class SubwordTokenizer:
    """A SentencePiece model (``model_proto``, the serialised model) with the tokenizer interface of
    :class:`~recombine.tasks.char_tokenizer.CharTokenizer`: ``encode``, ``decode``, ``len``."""

    model_proto: bytes
    _processor: object = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spm = _import_sentencepiece()
        object.__setattr__(self, "_processor", spm.SentencePieceProcessor(model_proto=self.model_proto))

    def __getstate__(self) -> dict[str, bytes]:
        return {"model_proto": self.model_proto}

    def __setstate__(self, state: dict[str, bytes]) -> None:
        object.__setattr__(self, "model_proto", state["model_proto"])
        self.__post_init__()

    @classmethod
    def train(cls, text: str, vocab_size: int = 8000, model_type: str = "unigram") -> SubwordTokenizer:
        """Train on ``text`` (the training split), or load the cached model trained on the same text."""
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        settings = {"sha256": digest, "vocab_size": vocab_size, "model_type": model_type}
        proto = cached(
            "sentencepiece",
            CACHE_VERSION,
            settings,
            lambda: train_sentencepiece_model(text, vocab_size, model_type),
        )
        return cls(proto)

    def __len__(self) -> int:
        return int(self._processor.get_piece_size())  # type: ignore[attr-defined]

    def encode(self, text: str) -> np.ndarray:
        """``int64`` piece ids of ``text``; ``decode(encode(text)) == text`` for any text. The lines are
        encoded as one batch (the line break is a user-defined piece, so this segments the whole text)."""
        processor = self._processor
        lines = text.split("\n")
        newline = np.array([processor.piece_to_id("\n")], dtype=np.int64)  # type: ignore[attr-defined]
        encoded = processor.encode(lines)  # type: ignore[attr-defined]
        parts: list[np.ndarray] = []
        for i, ids in enumerate(encoded):
            if i:
                parts.append(newline)
            parts.append(np.asarray(ids, dtype=np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return str(self._processor.decode([int(i) for i in ids]))  # type: ignore[attr-defined]

    def pieces(self, ids: np.ndarray | list[int]) -> list[str]:
        """The pieces of ``ids`` (for inspection)."""
        return [str(self._processor.id_to_piece(int(i))) for i in ids]  # type: ignore[attr-defined]
