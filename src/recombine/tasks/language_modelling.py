"""Language modelling: the testbed of thesis ch. 7 (7.5, App. F.2; CATALOG §1.16).

Corpora (``corpus``):

=================  =================================================================================
``stdlib_docs``    the embedded default (:mod:`recombine.tasks.stdlib_corpus`): Python's bundled
                   documentation, about 0.8M characters. Whole documents are dealt to the splits:
                   the documents are shuffled with ``split_seed`` and the first ones fill ``test``
                   (``test_fraction`` of the characters), the next ``valid``, the rest ``train``.
``text_file``      any UTF-8 text file at ``path``, split contiguously (train, valid, test in that order).
``enwik8``         the official Enwik8 file (``enwik8`` or ``enwik8.zip`` in the directory ``path``),
                   read byte by byte and split contiguously; the default fractions give the standard
                   90M / 5M / 5M split (Transformer-XL's ``prep_enwik8.py``).
``wikitext103``    the official WikiText-103 files in the directory ``path``: ``wiki.{train,valid,test}.raw``
                   (``wikitext-103-raw-v1``), else ``wiki.{train,valid,test}.tokens`` (``wikitext-103-v1``),
                   (the thesis models it with SentencePiece subwords: ``tokenizer=sentencepiece``).
=================  =================================================================================

Tokenizers (``tokenizer``):

* ``char`` (default; Enwik8, metric bits per character): the alphabet is every character of the whole corpus
  (as for Enwik8's 205 byte values), so no split holds an unknown symbol and a uniform model scores exactly
  ``log2(vocabulary size)`` bits per character;
* ``sentencepiece`` (WikiText-103, metric perplexity per subword token): a SentencePiece model of
  ``vocab_size`` pieces trained on the *training split* only, cached on disk
  (:mod:`recombine.tasks.subword_tokenizer`); byte fallback encodes characters unseen in training.

Each split is one stream of token ids; :func:`random_windows` samples training windows and
:func:`evaluation_windows` cuts a split into consecutive windows that predict every token but the first once.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks.char_tokenizer import CharTokenizer
from recombine.tasks.stdlib_corpus import Document, stdlib_documents
from recombine.tasks.subword_tokenizer import MIN_VOCAB_SIZE, MODEL_TYPES, SubwordTokenizer

CORPORA = ("stdlib_docs", "text_file", "enwik8", "wikitext103")
TOKENIZERS = ("char", "sentencepiece")
SPLITS = ("train", "valid", "test")
DOCUMENT_SEPARATOR = "\n\n"

ENWIK8_HINT = (
    "download http://mattmahoney.net/dc/enwik8.zip and put enwik8.zip (or the unzipped enwik8) "
    "in that directory"
)
WIKITEXT_HINT = (
    "download wikitext-103-raw-v1.zip (https://s3.amazonaws.com/research.metamind.io/wikitext/"
    "wikitext-103-raw-v1.zip), unzip it and pass the directory holding wiki.train.raw, wiki.valid.raw, "
    "wiki.test.raw"
)


@dataclass
class LanguageModellingConfig:
    corpus: str = "stdlib_docs"
    path: str = ""  # text_file: the file; enwik8 / wikitext103: the directory with the official files
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0  # stdlib_docs: the order in which documents are dealt to the splits
    tokenizer: str = "char"  # char | sentencepiece
    vocab_size: int = (
        8000  # sentencepiece: pieces (the thesis does not state its WikiText-103 vocabulary size)
    )
    subword_model: str = "unigram"  # sentencepiece: unigram | bpe

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise UserError(
                f"unknown language-modelling corpus {self.corpus!r}; {choices_hint(self.corpus, CORPORA)}"
            )
        if self.tokenizer not in TOKENIZERS:
            raise UserError(
                f"unknown language-modelling tokenizer {self.tokenizer!r}; "
                f"{choices_hint(self.tokenizer, TOKENIZERS)}"
            )
        if self.subword_model not in MODEL_TYPES:
            raise UserError(
                f"unknown subword_model {self.subword_model!r}; "
                f"{choices_hint(self.subword_model, MODEL_TYPES)}"
            )
        if self.tokenizer == "sentencepiece" and self.vocab_size < MIN_VOCAB_SIZE:
            raise UserError(
                f"vocab_size must be >= {MIN_VOCAB_SIZE} for sentencepiece, got {self.vocab_size}"
            )
        if not (0 < self.valid_fraction < 1 and 0 < self.test_fraction < 1):
            raise UserError("valid_fraction and test_fraction must lie in (0, 1)")
        if self.valid_fraction + self.test_fraction >= 1:
            raise UserError("valid_fraction + test_fraction must be < 1 (the rest is train)")
        if self.corpus != "stdlib_docs" and not self.path:
            raise UserError(
                f"corpus={self.corpus} needs path=<{'file' if self.corpus == 'text_file' else 'directory'}>"
            )


@dataclass
class LanguageModellingData:
    """A tokenised corpus: one ``int64`` id stream per split (``train``, ``valid``, ``test``)."""

    name: str
    tokenizer: CharTokenizer | SubwordTokenizer
    splits: dict[str, np.ndarray]
    description: str = ""
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def subword(self) -> bool:
        """True for subword tokens (reported as perplexity), False for characters (bits per character)."""
        return not isinstance(self.tokenizer, CharTokenizer)

    def text(self, split: str) -> str:
        return self.tokenizer.decode(self.splits[split])


def split_documents(
    documents: list[Document], valid_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[Document]]:
    """Deal whole documents to the splits: shuffled by ``seed``, the first fill ``test`` up to
    ``test_fraction`` of all characters, the next ``valid``, the rest ``train`` (each split non-empty)."""
    if len(documents) < 3:
        raise UserError(f"need at least 3 documents to split into train/valid/test, got {len(documents)}")
    order = np.random.default_rng(seed).permutation(len(documents))
    total = sum(len(d.text) for d in documents)
    dealt: dict[str, list[Document]] = {"test": [], "valid": [], "train": []}
    position = 0
    for split, fraction in (("test", test_fraction), ("valid", valid_fraction)):
        filled = 0
        while position < len(order) - 1 and (not dealt[split] or filled < fraction * total):
            document = documents[order[position]]
            dealt[split].append(document)
            filled += len(document.text)
            position += 1
    dealt["train"] = [documents[i] for i in order[position:]]
    if not dealt["train"]:
        raise UserError("valid_fraction + test_fraction leave no document for train")
    return {split: dealt[split] for split in SPLITS}


def contiguous_split(text: str, valid_fraction: float, test_fraction: float) -> dict[str, str]:
    """``train | valid | test`` in text order; ``valid`` and ``test`` hold ``round(fraction * len)`` chars."""
    n_valid, n_test = round(valid_fraction * len(text)), round(test_fraction * len(text))
    n_train = len(text) - n_valid - n_test
    if min(n_train, n_valid, n_test) < 2:
        raise UserError(f"text of {len(text)} characters is too short for a train/valid/test split")
    return {
        "train": text[:n_train],
        "valid": text[n_train : n_train + n_valid],
        "test": text[n_train + n_valid :],
    }


def _read_enwik8(directory: Path) -> str:
    if directory.is_file() and directory.name == "enwik8":
        return directory.read_bytes().decode("latin-1")
    plain, archive = directory / "enwik8", directory / "enwik8.zip"
    if plain.is_file():
        return plain.read_bytes().decode("latin-1")  # one symbol per byte
    if archive.is_file():
        try:
            with zipfile.ZipFile(archive) as z:
                return z.read("enwik8").decode("latin-1")
        except (zipfile.BadZipFile, KeyError) as error:
            raise UserError(
                f"{archive} is not the official enwik8.zip (no member 'enwik8'); {ENWIK8_HINT}"
            ) from error
    raise UserError(f"enwik8 not found in {directory}: {ENWIK8_HINT}")


def _read_wikitext(directory: Path) -> dict[str, str]:
    for suffix in ("raw", "tokens"):
        files = {split: directory / f"wiki.{split}.{suffix}" for split in SPLITS}
        if all(f.is_file() for f in files.values()):
            return {split: f.read_text(encoding="utf-8") for split, f in files.items()}
    raise UserError(f"WikiText-103 not found in {directory}: {WIKITEXT_HINT}")


def _split_texts(config: LanguageModellingConfig) -> tuple[dict[str, str], dict[str, object]]:
    if config.corpus == "stdlib_docs":
        documents = stdlib_documents()
        dealt = split_documents(documents, config.valid_fraction, config.test_fraction, config.split_seed)
        texts = {split: DOCUMENT_SEPARATOR.join(d.text for d in docs) for split, docs in dealt.items()}
        return texts, {"documents": {split: [d.title for d in docs] for split, docs in dealt.items()}}
    path = Path(config.path).expanduser()
    if config.corpus == "text_file":
        if not path.is_file():
            raise UserError(f"text file {path} not found: pass path=<a UTF-8 text file>")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise UserError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from error
        return contiguous_split(text, config.valid_fraction, config.test_fraction), {}
    if config.corpus == "enwik8":
        return contiguous_split(_read_enwik8(path), config.valid_fraction, config.test_fraction), {}
    return _read_wikitext(path), {}


def build_language_modelling(config: LanguageModellingConfig | None = None) -> LanguageModellingData:
    """Read (or assemble) the corpus, fit the tokenizer (the character alphabet on all of it, or a
    SentencePiece model on the training split), tokenise every split."""
    config = config or LanguageModellingConfig()
    texts, metadata = _split_texts(config)
    tokenizer: CharTokenizer | SubwordTokenizer
    if config.tokenizer == "sentencepiece":
        tokenizer = SubwordTokenizer.train(texts["train"], config.vocab_size, config.subword_model)
    else:
        tokenizer = CharTokenizer.fit(*texts.values())
    splits = {split: tokenizer.encode(texts[split]) for split in SPLITS}
    digest = hashlib.sha256()
    for split in SPLITS:
        digest.update(texts[split].encode("utf-8"))
    metadata |= {
        "corpus": config.corpus,
        "sha256": digest.hexdigest(),
        "characters": {split: len(texts[split]) for split in SPLITS},
        "tokenizer": config.tokenizer,
    }
    unit = "subword" if config.tokenizer == "sentencepiece" else "character-level"
    return LanguageModellingData(
        name=f"lm_{config.corpus}" + ("_sp" if config.tokenizer == "sentencepiece" else ""),
        tokenizer=tokenizer,
        splits=splits,
        description=f"{unit} language modelling on {config.corpus} ({len(tokenizer)} symbols)",
        metadata=metadata,
    )


def random_windows(
    stream: np.ndarray, n_windows: int, length: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n_windows`` uniformly placed windows: inputs ``stream[s : s + length]`` and next-token targets
    ``stream[s + 1 : s + length + 1]``, both ``[n_windows, length]``."""
    if len(stream) < length + 1:
        raise UserError(f"a split of {len(stream)} tokens is shorter than context length + 1 = {length + 1}")
    starts = rng.integers(0, len(stream) - length, size=n_windows)
    index = starts[:, None] + np.arange(length + 1)[None, :]
    windows = stream[index]
    return windows[:, :-1], windows[:, 1:]


def evaluation_windows(stream: np.ndarray, length: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Consecutive non-overlapping windows ``(inputs, targets)`` of at most ``length`` tokens that predict
    every token of ``stream`` except the first exactly once (the last window may be shorter)."""
    return [
        (
            stream[start : min(start + length, len(stream) - 1)],
            stream[start + 1 : min(start + length, len(stream) - 1) + 1],
        )
        for start in range(0, len(stream) - 1, length)
    ]
