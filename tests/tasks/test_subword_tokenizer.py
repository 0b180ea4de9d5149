"""SentencePiece subword tokenisation (thesis 7.5: WikiText-103 with SentencePiece, perplexity): exact round
trip (spaces, line breaks, characters unseen in training), training on the train split only, determinism and
the on-disk cache, pickling, and the language-modelling task with ``tokenizer=sentencepiece``."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from recombine.errors import UserError
from recombine.tasks.language_modelling import LanguageModellingConfig, build_language_modelling
from recombine.tasks.subword_tokenizer import SubwordTokenizer, train_sentencepiece_model

TRAIN_TEXT = (
    "The quick brown fox jumps over the lazy dog.\n"
    "  Indented line with  two spaces and a tab\there.\n\n"
    "Numbers 12345 and punctuation: (a, b) -> [c]!\n"
) * 40


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("RECOMBINE_CACHE", str(directory))
    monkeypatch.delenv("RECOMBINE_NO_CACHE", raising=False)
    return directory


def test_round_trip_is_exact_even_for_unseen_characters(cache: Path) -> None:
    tokenizer = SubwordTokenizer.train(TRAIN_TEXT, vocab_size=340)
    for text in (TRAIN_TEXT, "  leading and trailing  \n\n\nblank lines\n", "unseen: ü ≥ 字 €\tdone", ""):
        ids = tokenizer.encode(text)
        assert ids.dtype.name == "int64"
        assert ((ids >= 0) & (ids < len(tokenizer))).all()
        assert tokenizer.decode(ids) == text
    # subwords are longer than characters on the training text, and a line break is one piece
    assert len(tokenizer.encode(TRAIN_TEXT)) < 0.9 * len(TRAIN_TEXT)
    assert tokenizer.pieces(tokenizer.encode("a\nb"))[1] == "\n"


def test_training_is_deterministic_and_cached(cache: Path) -> None:
    first = train_sentencepiece_model(TRAIN_TEXT, 340)
    assert train_sentencepiece_model(TRAIN_TEXT, 340) == first
    tokenizer = SubwordTokenizer.train(TRAIN_TEXT, vocab_size=340)
    assert tokenizer.model_proto == first
    entries = list(cache.glob("sentencepiece-*.pkl"))
    assert len(entries) == 1
    assert SubwordTokenizer.train(TRAIN_TEXT, vocab_size=340).model_proto == first  # served from the cache
    SubwordTokenizer.train(TRAIN_TEXT, vocab_size=350)  # other settings: another entry
    assert len(list(cache.glob("sentencepiece-*.pkl"))) == 2


def test_tokenizer_pickles(cache: Path) -> None:
    tokenizer = SubwordTokenizer.train(TRAIN_TEXT, vocab_size=340)
    restored = pickle.loads(pickle.dumps(tokenizer))
    assert restored.model_proto == tokenizer.model_proto
    assert (restored.encode(TRAIN_TEXT[:200]) == tokenizer.encode(TRAIN_TEXT[:200])).all()


def test_bad_settings_are_user_errors(cache: Path) -> None:
    with pytest.raises(UserError, match="vocab_size must be >= 260"):
        train_sentencepiece_model(TRAIN_TEXT, 100)
    with pytest.raises(UserError, match="valid choices"):
        train_sentencepiece_model(TRAIN_TEXT, 300, model_type="wordpiece")
    with pytest.raises(UserError, match="too small"):
        train_sentencepiece_model(TRAIN_TEXT, 270)
    with pytest.raises(UserError, match="empty"):
        train_sentencepiece_model("\n\n", 300)
    with pytest.raises(UserError, match="valid choices"):
        LanguageModellingConfig(tokenizer="bpe")
    with pytest.raises(UserError, match="vocab_size"):
        LanguageModellingConfig(tokenizer="sentencepiece", vocab_size=100)


def _write_wikitext(directory: Path) -> dict[str, str]:
    texts = {
        "train": " = Valkyria Chronicles = \n\n Senjō no Valkyria 3 : <unk> Chronicles \n" * 30,
        "valid": " = Tower Building = \n The building is a <unk> tower . \n",
        "test": " = Robert Boulter = \n Robert Boulter is an English film actor \n",
    }
    for split, text in texts.items():
        (directory / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")
    return texts


def test_wikitext_with_sentencepiece_trains_on_train_only(tmp_path: Path, cache: Path) -> None:
    texts = _write_wikitext(tmp_path)
    config = LanguageModellingConfig(
        corpus="wikitext103", path=str(tmp_path), tokenizer="sentencepiece", vocab_size=340
    )
    data = build_language_modelling(config)
    assert data.subword and data.metadata["tokenizer"] == "sentencepiece"
    for split, text in texts.items():
        assert data.text(split) == text
    # the tokenizer is the one trained on the training split alone
    assert data.tokenizer.model_proto == SubwordTokenizer.train(texts["train"], 340).model_proto
    # "B" occurs in valid and test only: no piece of its own, it falls back to its UTF-8 byte
    assert data.tokenizer.pieces(data.tokenizer.encode("B")) == ["<0x42>"]
    assert data.tokenizer.pieces(data.tokenizer.encode("V")) == ["V"]
    char_data = build_language_modelling(LanguageModellingConfig(corpus="wikitext103", path=str(tmp_path)))
    assert not char_data.subword and len(char_data.splits["train"]) == len(texts["train"])
