"""Representation compatibility (thesis 6.3.1, Fig. 6.3, E.2.1) against naive loops and hand-made cases."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recombine import models, run_config, tasks
from recombine.errors import UserError
from recombine.probes.attention_maps import load_run_model
from recombine.probes.representation_compatibility import (
    RepresentationCompatibility,
    SymbolCompatibility,
    cluster_by_similarity,
    compatibility_from_model,
    cosine_similarity_matrix,
    pair_accuracy,
    representation_compatibility,
    save_compatibility_figure,
    save_figure,
    symbol_representations,
    two_step_correct,
    write_outputs,
)
from recombine.train import fit
from tiny_ctlpp import TINY_CTLPP


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ctlpp-ndr")
    fit(run_config.resolve(run_config.parse_overrides(TINY_CTLPP)), path, progress=False)
    return path


# --- the equations on arrays ----------------------------------------------------------------------------


def test_cosine_matrix_matches_a_naive_loop() -> None:
    r = np.random.default_rng(0).normal(size=(7, 5))
    expected = np.empty((7, 7))
    for i in range(7):
        for j in range(7):
            dot = sum(r[i, k] * r[j, k] for k in range(5))
            expected[i, j] = dot / (np.sqrt(sum(x * x for x in r[i])) * np.sqrt(sum(x * x for x in r[j])))
    np.testing.assert_allclose(cosine_similarity_matrix(r), expected, atol=1e-12)


def test_orthogonal_groups_form_exactly_two_contiguous_clusters() -> None:
    rng = np.random.default_rng(1)
    groups = rng.permutation(np.repeat([0, 1], 5))  # interleaved group membership
    basis = np.eye(4)
    r = basis[groups] * rng.uniform(0.5, 2.0, size=(10, 1))  # group k points along e_k, varying length
    similarity = cosine_similarity_matrix(r)
    np.testing.assert_allclose(similarity, (groups[:, None] == groups[None, :]).astype(float), atol=1e-12)
    order, labels = cluster_by_similarity(similarity, n_clusters=2)
    assert sorted(order.tolist()) == list(range(10))
    # the clusters are the groups, renumbered so that C_1 is the first block along the leaf order
    assert labels[order[0]] == 0
    assert np.all((labels == labels[0]) == (groups == groups[0]))
    assert np.all(np.diff(labels[order]) >= 0)  # contiguous blocks on the diagonal


def test_identical_or_nearly_identical_representations_form_one_cluster() -> None:
    r = np.tile(np.array([[1.0, 2.0, -0.5]]), (6, 1))
    _, labels = cluster_by_similarity(cosine_similarity_matrix(r), n_clusters=2)
    assert labels.tolist() == [0] * 6
    near = r + np.random.default_rng(2).normal(scale=1e-3, size=r.shape)  # cos > 0.999: closer than 0.1
    _, labels = cluster_by_similarity(cosine_similarity_matrix(near), n_clusters=2, min_distance=0.1)
    assert labels.tolist() == [0] * 6
    _, forced = cluster_by_similarity(cosine_similarity_matrix(near), n_clusters=2, min_distance=0.0)
    assert len(set(forced.tolist())) == 2  # without the threshold the cut is forced


def test_pair_accuracy_hand_computed() -> None:
    # 4 functions; groups (a, a, b, b); clusters C_1 = {0}, C_2 = {1, 2, 3}
    correct = np.array(
        [
            [1, 1, 0, 0],  # f_1 = 0 (C_1, G_a) works only before G_a
            [1, 1, 1, 1],
            [1, 1, 1, 0],
            [0, 1, 1, 1],
        ],
        dtype=bool,
    )
    groups = np.array([0, 0, 1, 1])
    clusters = np.array([0, 1, 1, 1])
    by_cluster = pair_accuracy(correct, clusters, groups, 2, 2)
    np.testing.assert_allclose(by_cluster, [[2 / 2, 0 / 2], [5 / 6, 5 / 6]])
    by_group = pair_accuracy(correct, groups, groups, 2, 2)
    np.testing.assert_allclose(by_group, [[4 / 4, 2 / 4], [3 / 4, 3 / 4]])
    empty = pair_accuracy(correct, clusters, groups, 3, 2)  # a third cluster with no member
    assert np.all(np.isnan(empty[2]))


def _synthetic_result(
    representations: np.ndarray, groups: np.ndarray, correct: np.ndarray
) -> RepresentationCompatibility:
    n_groups = int(groups.max()) + 1
    entries = []
    for k, r in enumerate(representations):
        similarity = cosine_similarity_matrix(r)
        order, clusters = cluster_by_similarity(similarity)
        entries.append(
            SymbolCompatibility(
                symbol=str(k),
                similarity=similarity,
                order=order,
                clusters=clusters,
                correct=correct[k],
                by_cluster=pair_accuracy(correct[k], clusters, groups, int(clusters.max()) + 1, n_groups),
                by_group=pair_accuracy(correct[k], groups, groups, n_groups, n_groups),
            )
        )
    names = [chr(ord("a") + i) for i in range(len(groups))]
    return RepresentationCompatibility(names, ["a", "b"], groups, entries)


def test_scores_perfect_for_shared_representations_and_known_for_orthogonal_groups(tmp_path: Path) -> None:
    groups = np.array([0, 0, 0, 1, 1, 1])
    n_symbols = 3
    rng = np.random.default_rng(3)
    shared = np.repeat(rng.normal(size=(n_symbols, 1, 8)), 6, axis=1)  # one vector per symbol
    everything_right = np.ones((n_symbols, 6, 6), dtype=bool)
    perfect = _synthetic_result(shared, groups, everything_right)
    assert perfect.summary() == pytest.approx(
        {
            "similarity_within_groups": 1.0,
            "similarity_across_groups": 1.0,
            "accuracy_within_groups": 1.0,
            "accuracy_across_groups": 1.0,
            "mean_clusters": 1.0,
        }
    )
    # orthogonal per-group representations; a function only "understands" its own group's representation
    split = np.stack([np.eye(8)[groups * 2 + k % 2] for k in range(n_symbols)])
    own_group_only = np.broadcast_to(groups[:, None] == groups[None, :], (n_symbols, 6, 6)).copy()
    failed = _synthetic_result(split, groups, own_group_only)
    assert failed.summary() == pytest.approx(
        {
            "similarity_within_groups": 1.0,
            "similarity_across_groups": 0.0,
            "accuracy_within_groups": 1.0,
            "accuracy_across_groups": 0.0,
            "mean_clusters": 2.0,
        }
    )
    for entry in failed.symbols:  # Fig. E.2: clusters are the groups, so both panels are the identity
        first_cluster_group = groups[entry.order[0]]
        expected = np.eye(2) if first_cluster_group == 0 else np.eye(2)[::-1]
        np.testing.assert_array_equal(entry.by_cluster, expected)
        np.testing.assert_array_equal(entry.by_group, np.eye(2))
    assert save_figure(failed, tmp_path / "s.png").stat().st_size > 0
    assert save_compatibility_figure(failed, tmp_path / "c.png").stat().st_size > 0
    with pytest.raises(UserError, match="valid choices: 0, 1, 2"):
        save_figure(failed, tmp_path / "x.png", symbols=["9"])


# --- on a model -----------------------------------------------------------------------------------------


def _naive_input(task: tasks.TaskData, start: int, funcs: list[int]) -> torch.Tensor:
    meta = task.metadata
    tokens = [meta["symbols"][start], *(meta["function_names"][f] for f in funcs)]  # type: ignore[index]
    if meta["direction"] == "backward":
        tokens = tokens[::-1]
    return torch.as_tensor(task.input_vocab.encode(tokens))[None]


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_representations_are_the_readout_inputs_of_single_applications(direction: str) -> None:
    sizes = {"n_train": 100, "n_test_iid": 5, "n_valid_ood": 5, "n_test_ood": 5}
    task = tasks.get("ctlpp", seed=2, variant="A", direction=direction, n_functions=6, max_length=2, **sizes)
    torch.manual_seed(0)
    model = models.build("ndr", task.spec, d_model=16, n_heads=2, d_ff=32, n_layers=2).eval()
    representations = symbol_representations(model, task)
    table = task.metadata["functions"]
    assert representations.shape == (8, 6, 16)
    with torch.no_grad():
        for out in range(8):
            for f in range(6):
                start = next(s for s in range(8) if table[f][s] == out)  # type: ignore[index]
                logits = model(_naive_input(task, start, [f]), torch.tensor([2]))
                recomputed = model.readout(torch.as_tensor(representations[out, f], dtype=torch.float32))
                torch.testing.assert_close(recomputed, logits[0], atol=1e-5, rtol=1e-5)


def test_two_step_correctness_matches_a_naive_loop(tiny_run: Path) -> None:
    model, task = load_run_model(tiny_run)
    correct = two_step_correct(model, task)
    table = task.metadata["functions"]
    assert correct.shape == (8, 8, 8)
    with torch.no_grad():
        for out in (0, 5):
            for first in range(8):
                start = next(s for s in range(8) if table[first][s] == out)  # type: ignore[index]
                for second in range(8):
                    logits = model(_naive_input(task, start, [first, second]), torch.tensor([3]))
                    target = task.output_vocab.index(task.metadata["symbols"][table[second][out]])  # type: ignore[index]
                    assert correct[out, first, second] == (int(logits.argmax()) == target)


def test_end_to_end_on_a_trained_run(tiny_run: Path, tmp_path: Path) -> None:
    result = representation_compatibility(tiny_run)
    model, task = load_run_model(tiny_run)
    assert [s.symbol for s in result.symbols] == task.metadata["symbols"]
    groups = task.metadata["groups"]
    assert result.group_names == ["a", "b"]
    for entry in result.symbols:
        np.testing.assert_allclose(np.diag(entry.similarity), 1.0, atol=1e-9)
        np.testing.assert_allclose(entry.similarity, entry.similarity.T, atol=1e-12)
        # E.2b cells are consistent with the pair summaries: G_a has 4 functions, G_b 4
        np.testing.assert_allclose(entry.by_group.sum(), 4 * entry.correct.mean(), atol=1e-12)
    written = write_outputs(result, tmp_path / "out")
    assert [p.name for p in written] == ["compatibility.json", "similarity.png", "compatibility.png"]
    data = json.loads(written[0].read_text())
    assert data["groups"] == groups
    for symbol in data["symbols"].values():  # the clusters partition the functions, in leaf order
        members = [f for cluster in symbol["clusters"].values() for f in cluster]
        assert members == symbol["order"] and sorted(members) == sorted(result.function_names)
    again = compatibility_from_model(model, task)
    np.testing.assert_array_equal(again.symbols[3].similarity, result.symbols[3].similarity)


def test_refuses_a_task_that_is_not_ctlpp(tiny_run: Path) -> None:
    model, task = load_run_model(tiny_run)
    with pytest.raises(UserError, match="needs a CTL\\+\\+ run"):
        compatibility_from_model(model, dataclasses.replace(task, name="ctl", metadata={}))
    with pytest.raises(UserError, match="valid choices: average"):
        cluster_by_similarity(np.eye(3), method="ward!")
