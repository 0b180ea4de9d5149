"""The ``dnc-key-value`` reproduction (thesis 2.3, Fig. 2.2b): phases read off the sequences, the mask switch
against hand-made masks, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from recombine.experiments.dnc_key_value import (
    DNC_KEY_VALUE,
    key_value_phases,
    mask_switch,
    phase_mask_means,
)
from recombine.experiments.scripted_reproduction import run_scripted
from recombine.tasks.memory_tasks import KeyValueConfig, MemorySequence, sample_sequence
from tiny_dnc import TINY_DNC_REPRODUCTION


@pytest.mark.parametrize("seed", range(5))
def test_the_phases_are_where_the_task_puts_them(seed: int) -> None:
    """``L`` stored words, a marker, ``L`` queries of w1, a marker, ``L`` queries of w2 (thesis 2.3)."""
    task = KeyValueConfig(width=4, length_range=(2, 9))
    sequence = sample_sequence(task, np.random.default_rng(seed))
    length = int(sequence.loss_mask.sum()) // 2
    phases = key_value_phases(task, sequence)
    assert (phases.q1_marker, phases.q2_marker, phases.end) == (length, 2 * length + 1, 3 * length + 2)
    # the q1 queries are w1 halves of stored words, the q2 queries w2 halves
    stored = sequence.inputs[:length]
    for step in range(phases.q1_marker + 1, phases.q2_marker):
        assert any((sequence.inputs[step, :4] == word[:4]).all() for word in stored)
    for step in range(phases.q2_marker + 1, phases.end):
        assert any((sequence.inputs[step, 4:8] == word[4:8]).all() for word in stored)


def _naive_cosine(a: np.ndarray, b: np.ndarray) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_the_mask_switch_is_one_minus_the_cosine_of_the_phase_means() -> None:
    """A mask on channels 0-3 in q1 and 4-7 in q2 switched completely (1); the same mask in both did not
    (0); a partly shared one against a loop over the answer steps and the channels."""
    task = KeyValueConfig(width=4, length_range=(3, 3))
    sequence = sample_sequence(task, np.random.default_rng(0))
    phases = key_value_phases(task, sequence)
    q1_steps = list(range(phases.q1_marker + 1, phases.q2_marker))
    q2_steps = list(range(phases.q2_marker + 1, phases.end))
    disjoint = np.zeros((len(sequence), 8))
    disjoint[q1_steps, :4] = 1.0
    disjoint[q2_steps, 4:] = 1.0
    assert mask_switch(*phase_mask_means(disjoint, sequence, phases)) == pytest.approx(1.0)
    same = np.zeros((len(sequence), 8))
    same[q1_steps + q2_steps, 2:6] = 0.7
    same[: phases.q1_marker] = 1.0  # the storing phase does not count
    assert mask_switch(*phase_mask_means(same, sequence, phases)) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(3)
    mixed = rng.random((len(sequence), 8))
    q1_mean = [sum(mixed[t, c] for t in q1_steps) / len(q1_steps) for c in range(8)]
    q2_mean = [sum(mixed[t, c] for t in q2_steps) / len(q2_steps) for c in range(8)]
    expected = 1.0 - _naive_cosine(np.array(q1_mean), np.array(q2_mean))
    assert mask_switch(*phase_mask_means(mixed, sequence, phases)) == pytest.approx(expected, rel=1e-12)


def test_a_tiny_run_reports_the_mask_switch_of_the_masked_variant(tmp_path: Path) -> None:
    out = tmp_path / "key-value"
    overrides = {**TINY_DNC_REPRODUCTION, "variants": ["dnc", "dnc_m"], "max_length": 4}
    report = run_scripted(DNC_KEY_VALUE, out, seeds=2, overrides=overrides).read_text()
    results = json.loads((out / "results.json").read_text())
    assert set(results["mask_switch"]) == {"dnc_m"}  # the plain DNC has no mask
    switches = results["mask_switch"]["dnc_m"]
    assert len(switches) == 2 and all(0.0 <= s <= 1.0 for s in switches)
    assert "Mask switch of dnc_m" in report and "![read_mask_dnc_m.png](read_mask_dnc_m.png)" in report
    assert (out / "read_mask_dnc_m.png").stat().st_size > 0
    assert "| dnc |" in report and "| dnc_m |" in report


def test_the_sequence_of_the_figure_is_the_first_evaluation_sequence() -> None:
    """The figure and the switch read the seed's evaluation sequences, which the trainer scores: a check
    that both draw them from the same generator (``evaluation_sequence``)."""
    from recombine.experiments.dnc_memory import evaluation_sequence
    from recombine.tasks.memory_tasks import sample_batch

    task = KeyValueConfig(width=4, length_range=(2, 5))
    first: MemorySequence = evaluation_sequence(task, seed=3)
    batch = sample_batch(task, 4, np.random.default_rng([3, 1]))
    np.testing.assert_array_equal(batch.inputs[0, : len(first)], first.inputs)
