"""Hyperteacher (HNET 4.1, C.2): teacher forward pass, output normalisation, task supports.

References: the network evaluated with explicit per-unit loops; the C.2.3 mask sets written out from the
formulas by hand; connectivity by a union-find written here (HNET Def. 3.2).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from recombine.errors import UserError
from recombine.tasks.hyperteacher import (
    HyperteacherConfig,
    HyperteacherTask,
    connected_layer_masks,
    disconnected_layer_masks,
    hyperteacher_raw_outputs,
)


def _components(masks: np.ndarray) -> int:
    """Number of connected components of the mask families (union-find over shared modules)."""
    parent = list(range(len(masks)))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, j in itertools.combinations(range(len(masks)), 2):
        if np.any(masks[i] & masks[j]):
            parent[find(i)] = find(j)
    return len({find(i) for i in range(len(masks))})


def test_raw_outputs_match_a_per_unit_loop() -> None:
    config = HyperteacherConfig(n_inputs=3, n_hidden=4, n_outputs=2, n_layers=3, n_modules=3)
    task = HyperteacherTask(config, seed=1)
    p = task.teacher
    rng = np.random.default_rng(0)
    z = rng.random((2, 2, 3))
    x = rng.normal(size=(2, 5, 3))
    y = hyperteacher_raw_outputs(p, z, x)
    for t in range(2):
        for s in range(5):
            act = [
                max(sum(p.input_weight[i, j] * x[t, s, j] for j in range(3)) / np.sqrt(3), 0.0)
                for i in range(4)
            ]
            for layer in range(2):
                w = [
                    [sum(z[t, layer, m] * p.modules[layer, m, i, j] for m in range(3)) for j in range(4)]
                    for i in range(4)
                ]
                act = [max(sum(w[i][j] * act[j] for j in range(4)) / 2.0, 0.0) for i in range(4)]
            for o in range(2):
                assert y[t, s, o] == pytest.approx(
                    sum(p.output_weight[o, i] * act[i] for i in range(4)) / 2.0
                )


def test_targets_are_standardised_per_task_and_unit_then_divided_by_the_temperature() -> None:
    task = HyperteacherTask(HyperteacherConfig(temperature=0.5), seed=0)
    batch = task.sample(np.random.default_rng(0), 3)
    logits = task.target_logits(
        batch.latents, np.broadcast_to(task.moment_inputs, (3, *task.moment_inputs.shape))
    )
    np.testing.assert_allclose(logits.mean(axis=1), 0.0, atol=1e-9)
    np.testing.assert_allclose(logits.std(axis=1), 2.0, rtol=1e-9)
    assert batch.loss == "kl"


def test_output_moments_are_kept_per_task_and_equal_a_fresh_pass_over_the_moment_inputs() -> None:
    task = HyperteacherTask(HyperteacherConfig(), seed=1)
    batch = task.sample(np.random.default_rng(0), 40)  # 40 draws from 75 tasks: some repeat
    n_distinct = len({z.tobytes() for z in batch.latents})
    assert len(task._moments) == n_distinct < 40
    inputs = np.broadcast_to(task.moment_inputs, (40, *task.moment_inputs.shape))
    raw = hyperteacher_raw_outputs(task.teacher, batch.latents, inputs)
    x = batch.query_x
    expected = (
        hyperteacher_raw_outputs(task.teacher, batch.latents, x) - raw.mean(1, keepdims=True)
    ) / raw.std(1, keepdims=True)
    np.testing.assert_allclose(batch.query_y, expected, rtol=1e-9, atol=1e-12)


def test_compositional_split_holds_out_a_quarter_and_covers_every_module_in_every_layer() -> None:
    task = HyperteacherTask(HyperteacherConfig(n_modules=4, max_active=2, n_layers=3), seed=2)
    n_layer_masks = 4 + 6  # C(4,1) + C(4,2)
    assert len(task.train_tasks) + len(task.ood_tasks) == n_layer_masks**2  # Fig. A11 count
    assert len(task.ood_tasks) == 25
    assert (task.train_tasks.sum(axis=0) > 0).all()
    train = {t.tobytes() for t in task.train_tasks}
    assert not any(t.tobytes() in train for t in task.ood_tasks)


def test_non_compositional_support_never_trains_the_last_module_of_the_last_layer() -> None:
    task = HyperteacherTask(HyperteacherConfig(support="non_compositional"), seed=0)
    assert (task.train_tasks[:, -1, -1] == 0).all() and (task.ood_tasks[:, -1, -1] == 1).all()
    assert task.train_tasks[:, :-1, -1].any()  # the module is seen in the other layer


def test_connected_and_disconnected_mask_sets_follow_c23() -> None:
    m = 8
    connected = {tuple(r) for r in connected_layer_masks(m)}
    expected = set()
    for i in range(m):
        for d in (0, 1, 2):
            row = [0] * m
            row[i] = 1
            row[(i + d) % m] = 1
            expected.add(tuple(row))
    assert connected == expected and len(connected_layer_masks(m)) == 24
    disconnected = {tuple(r) for r in disconnected_layer_masks(m)}
    expected = {tuple(int(k == i) for k in range(m)) for i in range(m)}
    for group in ([0, 1, 2, 3], [4, 5, 6, 7]):
        for i, j in itertools.combinations(group, 2):
            expected.add(tuple(int(k in (i, j)) for k in range(m)))
    assert disconnected == expected
    assert _components(connected_layer_masks(m)) == 1
    assert _components(disconnected_layer_masks(m)) == 2


def test_connected_support_tasks_and_ood_tasks() -> None:
    config = HyperteacherConfig(support="connected", n_modules=8, n_layers=2)
    task = HyperteacherTask(config, seed=0)
    assert len(task.train_tasks) == 24
    other = HyperteacherTask(HyperteacherConfig(support="disconnected", n_modules=8, n_layers=2), seed=0)
    assert len(other.train_tasks) == 8 + 12
    np.testing.assert_array_equal(task.ood_tasks, other.ood_tasks)
    seen = {t.tobytes() for t in task.train_tasks} | {t.tobytes() for t in other.train_tasks}
    assert len(task.ood_tasks) == 8 + 28 - len(seen)
    assert (task.ood_tasks.sum(axis=-1) == 2).all()  # C.2.3: the OOD masks all have K = 2


def test_ood_by_number_of_active_modules() -> None:
    task = HyperteacherTask(HyperteacherConfig(n_modules=4, max_active=2, n_layers=2), seed=0)
    k3 = task.tasks("ood_k3")
    assert len(k3) == 4 and (k3.sum(axis=-1) == 3).all()
    k1 = task.tasks("ood_k1")
    assert (k1.sum(axis=-1) == 1).all()
    assert not {t.tobytes() for t in k1} & {t.tobytes() for t in task.train_tasks}
    with pytest.raises(UserError, match="ood_k1"):
        task.tasks("ood_k9")


def test_determinism_per_seed() -> None:
    a = HyperteacherTask(HyperteacherConfig(), seed=4).sample(np.random.default_rng(1), 2, "ood")
    b = HyperteacherTask(HyperteacherConfig(), seed=4).sample(np.random.default_rng(1), 2, "ood")
    np.testing.assert_array_equal(a.support_y, b.support_y)
    c = HyperteacherTask(HyperteacherConfig(), seed=5).sample(np.random.default_rng(1), 2, "ood")
    assert not np.allclose(a.support_y, c.support_y)
