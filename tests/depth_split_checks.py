"""Split checks shared by the tests of the depth-split expression tasks (ListOps, simple arithmetic).

Each check takes ``decode(data, split)``: that split's examples as hashable token sequences (a tuple
of tokens or a string), so the checks compare what the model sees, whatever the task's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import pytest

import recombine.tasks
from recombine.errors import UserError
from recombine.tasks.base import TaskData
from recombine.tasks.cache import cache_dir

Decode = Callable[[TaskData, str], Sequence[Hashable]]


def check_lengths_and_distinct_splits(data: TaskData, decode: Decode, max_length: int = 50) -> None:
    """Examples are at most ``max_length`` tokens, distinct within a split, and no held-out example
    is in ``train``."""
    train = decode(data, "train")
    assert len(set(train)) == len(train)
    for name in data.splits:
        examples = decode(data, name)
        assert max(len(e) for e in examples) <= max_length  # type: ignore[arg-type]
        assert len(set(examples)) == len(examples), name
        if name != "train":
            assert not set(examples) & set(train), name


def check_deterministic_per_seed(data: TaskData, build: Callable[[int], TaskData], decode: Decode) -> None:
    """``build(0)`` gives ``data`` (built with seed 0) again; ``build(1)`` differs in every split."""
    again, other = build(0), build(1)
    for name in data.splits:
        assert decode(again, name) == decode(data, name)
        assert (again.splits[name].targets == data.splits[name].targets).all()
        assert decode(other, name) != decode(data, name)


def check_cache_round_trip(
    task: str, sizes: dict[str, int], decode: Decode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first ``recombine.tasks.get`` writes one cache file; the second reads the same splits."""
    monkeypatch.delenv("RECOMBINE_NO_CACHE", raising=False)  # a module fixture may have set it
    first = recombine.tasks.get(task, seed=2, **sizes)
    assert len(list(cache_dir().glob(f"{task}-v*.pkl"))) == 1
    second = recombine.tasks.get(task, seed=2, **sizes)
    for name in first.splits:
        assert decode(first, name) == decode(second, name)


def check_bad_config_is_one_line_user_error(task: str, overrides: dict[str, object]) -> None:
    with pytest.raises(UserError) as error:
        recombine.tasks.get(task, **overrides)
    assert "\n" not in str(error.value) and str(error.value)
