"""Official train/test *parts* of a seq2seq benchmark, and the role splits made from them.

SCAN and PCFG SET ship one train file and one test file per split (CATALOG §1.1, §1.2). Our
tasks turn such a pair of parts into the split roles of DESIGN.md ("Tasks"):

* the train part -> ``train`` + ``valid_iid``: ``valid_iid`` is a seeded sample of
  ``valid_iid_fraction`` of the distinct examples of the part, drawn only among examples that occur
  exactly once (a deliberately repeated example, like the bare ``jump`` of SCAN's add-primitive
  split, always stays in ``train``);
* the test part -> ``valid_ood`` + ``test_ood``: ``valid_ood`` is a seeded uniform sample of
  ``valid_ood_fraction`` of the part, held out of ``test_ood`` and used for model selection
  (thesis 4.2.2: IID validation accuracy does not predict generalization). For an IID split (SCAN
  ``simple``) the test part becomes ``test_iid`` and there is no ``valid_ood``.

Both parts are put in canonical (sorted) order before sampling, so the roles depend only on the
multiset of examples and the seed: a task built from the official files equals the one generated
from the grammar whenever the parts are equal. :func:`part_examples` inverts the mapping (used by
``recombine export``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from recombine.errors import UserError, choices_hint
from recombine.tasks.base import Seq2SeqSplit, TaskData, Vocabulary

#: One example: (input tokens, output tokens).
Example = tuple[tuple[str, ...], tuple[str, ...]]

PARTS = ("train", "test")
#: Which roles each official part is divided into.
PART_ROLES = {"train": ("train", "valid_iid"), "test": ("valid_ood", "test_ood", "test_iid")}


def split_roles(
    train_part: Sequence[Example],
    test_part: Sequence[Example],
    *,
    valid_iid_fraction: float,
    valid_ood_fraction: float,
    iid_test: bool,
    rng: np.random.Generator,
) -> dict[str, list[Example]]:
    """Divide the official parts into role splits (see the module docstring), each shuffled."""
    train_sorted = sorted(train_part)
    counts = Counter(train_sorted)
    distinct = sorted(counts)
    singles = [example for example in distinct if counts[example] == 1]
    n_valid_iid = min(int(valid_iid_fraction * len(distinct)), len(singles))
    chosen = {singles[i] for i in rng.choice(len(singles), size=n_valid_iid, replace=False)}
    roles: dict[str, list[Example]] = {
        "train": [example for example in train_sorted if example not in chosen],
        "valid_iid": sorted(chosen),
    }
    test_sorted = sorted(test_part)
    if iid_test:
        roles["test_iid"] = test_sorted
    else:
        n_valid_ood = int(valid_ood_fraction * len(test_sorted))
        held_out = np.zeros(len(test_sorted), dtype=bool)
        held_out[rng.choice(len(test_sorted), size=n_valid_ood, replace=False)] = True
        roles["valid_ood"] = [e for e, h in zip(test_sorted, held_out, strict=True) if h]
        roles["test_ood"] = [e for e, h in zip(test_sorted, held_out, strict=True) if not h]
    return {
        name: [examples[i] for i in rng.permutation(len(examples))]
        for name, examples in roles.items()
        if examples or name in ("train", "test_ood", "test_iid")
    }


def encode_split(
    examples: Sequence[Example],
    input_vocab: Vocabulary,
    output_vocab: Vocabulary,
    group: Callable[[Example], int],
) -> Seq2SeqSplit:
    """Token-id arrays for ``examples``; ``group(example)`` gives the per-example group id."""
    in_ids = {token: i for i, token in enumerate(input_vocab.tokens)}  # one lookup table, not one per call
    out_ids = {token: i for i, token in enumerate(output_vocab.tokens)}
    return Seq2SeqSplit(
        inputs=[np.array([in_ids[t] for t in x], dtype=np.int64) for x, _ in examples],
        outputs=[np.array([out_ids[t] for t in y], dtype=np.int64) for _, y in examples],
        group=np.array([group(example) for example in examples], dtype=np.int64),
    )


def check_part(part: str) -> None:
    if part not in PARTS:
        raise UserError(f"unknown part {part!r}; {choices_hint(part, PARTS)}")


def part_examples(data: TaskData, part: str) -> list[Example]:
    """The examples of the official ``part`` ("train" or "test") a task's roles were made from."""
    check_part(part)
    examples: list[Example] = []
    for role in PART_ROLES[part]:
        split = data.splits.get(role)
        if split is None:
            continue
        assert isinstance(split, Seq2SeqSplit)
        in_tokens, out_tokens = data.input_vocab.tokens, data.output_vocab.tokens
        for x, y in zip(split.inputs, split.outputs, strict=True):
            examples.append(
                (tuple(in_tokens[i] for i in x.tolist() if i), tuple(out_tokens[i] for i in y.tolist() if i))
            )
    return examples
