"""Attention/gate maps of an example given as text: same maps as for the split example, clear token errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recombine import models, run_config
from recombine.errors import UserError
from recombine.probes.attention_maps import load_run_model, step_maps
from recombine.probes.attention_probe import (
    attention_probe,
    example_file_stem,
    example_maps,
    label_of,
    tokenize_example,
)
from recombine.train import fit

TINY_CTLPP_NDR = [
    "task=ctlpp",
    "task.variant=A",
    "task.n_functions=6",
    "task.max_length=3",
    "task.n_train=300",
    "task.n_test_iid=20",
    "task.n_valid_ood=20",
    "task.n_test_ood=20",
    "model=ndr",
    "model.d_model=16",
    "model.n_heads=2",
    "model.d_ff=32",
    "model.n_layers=3",
    "train.steps=10",
    "train.batch_size=16",
    "train.eval_every=10",
    "train.log_every=5",
    "train.threads=1",
    "seed=4",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ctlpp-attention")
    fit(run_config.resolve(run_config.parse_overrides(TINY_CTLPP_NDR)), path, progress=False)
    return path


def test_text_example_gives_the_maps_of_the_same_split_example(tiny_run: Path, tmp_path: Path) -> None:
    model, task = load_run_model(tiny_run)
    split = task.splits["test_ood"]
    text = " ".join(task.input_vocab.decode(split.inputs[3]))  # e.g. "c b 3"
    ids = tokenize_example(task, text)
    np.testing.assert_array_equal(ids, split.inputs[3])
    from_text, from_split = example_maps(model, task, ids), step_maps(model, task, "test_ood", 3)
    np.testing.assert_array_equal(from_text.attention, from_split.attention)
    assert from_text.gates is not None and from_split.gates is not None
    np.testing.assert_array_equal(from_text.gates, from_split.gates)
    assert (from_text.prediction, from_text.target) == (from_split.prediction, from_split.target)
    assert from_text.attention.shape[:2] == (3, 2)  # steps, heads

    written = attention_probe(tiny_run, text, tmp_path / "maps")
    assert [p.name for p in written] == ["attention.png", "attention-heads.png"]
    assert all(p.stat().st_size > 0 for p in written)


def test_label_is_unknown_for_an_example_in_no_split(tiny_run: Path) -> None:
    _, task = load_run_model(tiny_run)
    seen = {tuple(x) for s in task.splits.values() for x in s.inputs}
    # a length-3 example of the max_length-3 task that no split holds (the splits are small samples)
    tokens = [*task.metadata["function_names"], *task.metadata["symbols"]]  # type: ignore[misc]
    unseen = next(
        (a, b, c)
        for a in tokens[:6]
        for b in tokens[:6]
        for c in tokens[6:]
        if tuple(task.input_vocab.encode([a, b, c])) not in seen
    )
    assert label_of(task, task.input_vocab.encode(list(unseen))) == "?"
    first = task.splits["train"]
    assert label_of(task, first.inputs[0]) == task.output_vocab.tokens[int(first.targets[0])]


def test_unknown_tokens_and_models_without_attention_are_user_errors(tiny_run: Path) -> None:
    _, task = load_run_model(tiny_run)
    with pytest.raises(UserError, match=r"unknown token 'z' .* valid tokens: 0 1 2"):
        tokenize_example(task, "a z 3")
    with pytest.raises(UserError, match="unknown token '<pad>'"):
        tokenize_example(task, "a <pad>")
    with pytest.raises(UserError, match="empty"):
        tokenize_example(task, "   ")
    lstm = models.build("lstm", task.spec, d_model=8)
    with pytest.raises(UserError, match="Transformer classifier"):
        example_maps(lstm, task, tokenize_example(task, "a 3"))
    assert example_file_stem(" c b  3 ") == "c_b_3"
