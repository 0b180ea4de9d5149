"""Bilevel loop (HNET Alg. 2): the vectorised inner loop equals the per-task loop, the first-order outer
gradient equals a per-task reference, and the inner loop identifies a task when the modules are right."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from recombine.models.meta_learners import build_meta_learner
from recombine.tasks.hyperteacher import HyperteacherConfig, HyperteacherTask
from recombine.tasks.teacher_student import TeacherStudentConfig, TeacherStudentTask
from recombine.train.bilevel import (
    BilevelConfig,
    batch_tensors,
    batched_fast_init,
    inner_loop_per_task,
    inner_loop_vectorised,
    meta_loss,
    meta_train,
    task_loss,
)

SMALL = {
    "linear_hnet": {"n_layers": 2, "n_hidden": 8, "n_modules": 4},
    "nonlinear_hnet": {"n_layers": 2, "n_hidden": 8, "n_modules": 4, "hnet_hidden": 8},
    "anil": {"n_layers": 2, "n_hidden": 8},
    "maml": {"n_layers": 2, "n_hidden": 8},
}


def _hyperteacher_batch(n_tasks: int = 3):
    task = HyperteacherTask(
        HyperteacherConfig(n_inputs=4, n_hidden=6, n_outputs=3, n_shots=10, n_moment_samples=50), 0
    )
    return task.sample(np.random.default_rng(0), n_tasks)


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("update", ["auto", "foreach", "fused"])
def test_vectorised_inner_loop_equals_the_per_task_loop(name: str, optimizer: str, update: str) -> None:
    """Every update implementation of the vectorised loop against the per-task loop with the plain one
    (``fused`` once gave wrong updates from the transposed gradients of ``grad``)."""
    torch.manual_seed(0)
    model = build_meta_learner(name, 4, 3, **SMALL[name]).double()
    batch = _hyperteacher_batch()
    sx, sy, _, _ = batch_tensors(batch, torch.float64)
    config = BilevelConfig(inner_steps=5, inner_lr=0.05, inner_optimizer=optimizer, inner_update=update)
    init = batched_fast_init(model, len(batch))
    vectorised = inner_loop_vectorised(model, init, sx, sy, "kl", config)
    reference_config = dataclasses.replace(config, inner_update="for_loop")
    reference = inner_loop_per_task(model, init, sx, sy, "kl", reference_config)
    for k in reference:
        torch.testing.assert_close(vectorised[k], reference[k], rtol=1e-9, atol=1e-11)
        assert not torch.equal(vectorised[k], init[k])  # the loop did move every fast parameter


def test_exactly_anil_and_maml_broadcast_over_tasks() -> None:
    flags = {name: build_meta_learner(name, 4, 3, **SMALL[name]).broadcasts_over_tasks for name in SMALL}
    assert {name for name, flag in flags.items() if flag} == {"anil", "maml"}


@pytest.mark.parametrize("name", ["anil", "maml"])
def test_learners_that_broadcast_over_tasks_equal_their_per_task_forward(name: str) -> None:
    """``broadcasts_over_tasks``: the learner's methods on a stacked meta-batch give every task its own
    per-task result (so the bilevel loop may skip ``vmap`` for them)."""
    torch.manual_seed(2)
    model = build_meta_learner(name, 4, 3, **SMALL[name]).double()
    fast = {k: v + 0.1 * torch.randn_like(v) for k, v in batched_fast_init(model, 3).items()}
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    stacked = model(fast, x)
    features = model.fast_independent_features(x)
    for t in range(3):
        task_fast = {k: v[t] for k, v in fast.items()}
        torch.testing.assert_close(stacked[t], model(task_fast, x[t]), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(features[t], model.fast_independent_features(x[t]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["linear_hnet", "anil", "maml"])
def test_outer_gradient_is_the_first_order_query_gradient_at_the_inner_solution(name: str) -> None:
    torch.manual_seed(1)
    model = build_meta_learner(name, 4, 3, **SMALL[name]).double()
    batch = _hyperteacher_batch(4)
    config = BilevelConfig(inner_steps=4, inner_lr=0.05)
    loss, _, adapted = meta_loss(model, batch, config)
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}

    # reference: per task, gradients of the query loss w.r.t. theta and w.r.t. phi at the adapted phi
    _, _, qx, qy = batch_tensors(batch, torch.float64)
    expected = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    named = dict(model.named_parameters())
    for t in range(len(batch)):
        fast = {k: v[t].clone().requires_grad_(True) for k, v in adapted.items()}
        shared = [n for n in named if not n.startswith("fast_init.")]
        leaves = [named[n] for n in shared] + list(fast.values())
        grads = torch.autograd.grad(task_loss("kl", model(fast, qx[t]), qy[t]), leaves, allow_unused=True)
        for n, g in zip(shared + [f"fast_init.{k}" for k in fast], grads, strict=True):
            if g is not None:
                expected[n] += g / len(batch)
    for n in expected:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-9, atol=1e-12)


def test_fixed_fast_init_gets_no_gradient() -> None:
    torch.manual_seed(0)
    model = build_meta_learner("teacher_student", 4, 2, n_hidden=3, n_modules=6)
    task = TeacherStudentTask(TeacherStudentConfig(n_inputs=4, n_hidden=3, n_outputs=2, n_shots=8), 0)
    loss, _, _ = meta_loss(
        model, task.sample(np.random.default_rng(0), 2), BilevelConfig(inner_steps=2, learn_fast_init=False)
    )
    loss.backward()
    assert model.fast_init["latent"].grad is None
    assert model.module_bank.grad is not None and model.module_bank.grad.abs().sum() > 0


def test_inner_loop_identifies_the_task_when_the_student_has_the_teachers_modules() -> None:
    """HNET eq. 2: with Theta-hat = Theta and a-hat = a, min over z-hat of the task loss is 0."""
    torch.manual_seed(0)
    config = TeacherStudentConfig(distribution="discrete")
    task = TeacherStudentTask(config, 0)
    student = build_meta_learner("teacher_student", 16, 4, n_hidden=16, n_modules=6).double()
    with torch.no_grad():
        student.module_bank.copy_(torch.from_numpy(task.teacher.modules))
        student.readout.copy_(torch.from_numpy(task.teacher.readout))
    batch = task.sample(np.random.default_rng(0), 4)
    sx, sy, _, _ = batch_tensors(batch, torch.float64)
    init = {"latent": torch.from_numpy(batch.latents) + 0.1 * torch.randn(4, 6, dtype=torch.float64)}
    before = task_loss(
        "mse", torch.stack([student({"latent": init["latent"][t]}, sx[t]) for t in range(4)]), sy
    )
    adapted = inner_loop_vectorised(
        student, init, sx, sy, "mse", BilevelConfig(inner_steps=300, inner_lr=0.003)
    )
    after = task_loss(
        "mse", torch.stack([student({"latent": adapted["latent"][t]}, sx[t]) for t in range(4)]), sy
    )
    assert after < 1e-3 * before
    torch.testing.assert_close(adapted["latent"], torch.from_numpy(batch.latents), atol=1e-2, rtol=0)


def test_meta_training_is_deterministic_and_reports_train_and_ood_metrics() -> None:
    task = HyperteacherTask(
        HyperteacherConfig(n_inputs=4, n_hidden=6, n_outputs=3, n_shots=16, n_moment_samples=50), 0
    )
    config = BilevelConfig(outer_steps=3, meta_batch_size=4, inner_steps=2, eval_every=3, eval_tasks=4)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        runs.append(
            meta_train(build_meta_learner("linear_hnet", 4, 3, **SMALL["linear_hnet"]), task, config, seed=1)
        )
    assert runs[0] == runs[1]
    assert set(runs[0][0]) == {
        "step",
        "train_query_loss",
        "train_loss",
        "train_accuracy",
        "ood_loss",
        "ood_accuracy",
    }


def test_anil_inner_loop_with_cached_features_equals_plain_adam_on_the_whole_network() -> None:
    """The inner loop computes ANIL's encoder once (``fast_independent_features``); a plain reference that
    runs the whole network at every step with ``torch.optim.Adam`` must give the same readout. 8 tasks x
    64 shots of 3 outputs, so the batched loss takes the transposed ``log_softmax`` path too."""
    torch.manual_seed(2)
    model = build_meta_learner("anil", 4, 3, **SMALL["anil"]).double()
    task = HyperteacherTask(
        HyperteacherConfig(n_inputs=4, n_hidden=6, n_outputs=3, n_shots=64, n_moment_samples=50), 0
    )
    batch = task.sample(np.random.default_rng(3), 8)
    sx, sy, _, _ = batch_tensors(batch, torch.float64)
    config = BilevelConfig(inner_steps=6, inner_lr=0.05)
    adapted = inner_loop_vectorised(model, batched_fast_init(model, len(batch)), sx, sy, "kl", config)
    for t in range(len(batch)):
        leaves = [p.detach().clone().requires_grad_(True) for p in model.initial_fast().values()]
        optimizer = torch.optim.Adam(leaves, lr=config.inner_lr)
        for _ in range(config.inner_steps):
            optimizer.zero_grad()
            prediction = model(dict(zip(model.initial_fast(), leaves, strict=True)), sx[t])
            target_p = torch.softmax(sy[t], dim=-1)
            kl = (target_p * (target_p.log() - torch.log_softmax(prediction, dim=-1))).sum(-1).mean()
            kl.backward()
            optimizer.step()
        for name, leaf in zip(model.initial_fast(), leaves, strict=True):
            torch.testing.assert_close(adapted[name][t], leaf.detach(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", ["teacher_student", "anil", "maml"])
def test_vectorised_inner_loop_on_mse_equals_plain_sgd_per_task(name: str) -> None:
    """The ``mse`` loss (teacher-student, HNET eq. 4) against a reference written here: plain SGD on each
    task's own loss computed with the whole network; the adapted parameters carry no graph."""
    torch.manual_seed(4)
    sizes = {"teacher_student": {"n_hidden": 6, "n_modules": 6}, "anil": SMALL["anil"], "maml": SMALL["maml"]}
    task = TeacherStudentTask(TeacherStudentConfig(n_inputs=4, n_hidden=6, n_outputs=2, n_shots=12), 0)
    batch = task.sample(np.random.default_rng(5), 3)
    model = build_meta_learner(name, 4, 2, **sizes[name]).double()
    sx, sy, _, _ = batch_tensors(batch, torch.float64)
    config = BilevelConfig(inner_steps=4, inner_lr=0.05, inner_optimizer="sgd")
    adapted = inner_loop_vectorised(model, batched_fast_init(model, len(batch)), sx, sy, "mse", config)
    for t in range(len(batch)):
        fast = {k: v.detach().clone() for k, v in model.initial_fast().items()}
        for _ in range(config.inner_steps):
            leaves = {k: v.requires_grad_(True) for k, v in fast.items()}
            loss = 0.5 * ((model(leaves, sx[t]) - sy[t]) ** 2).sum(-1).mean()
            grads = torch.autograd.grad(loss, list(leaves.values()))
            fast = {
                k: (v - config.inner_lr * g).detach() for (k, v), g in zip(leaves.items(), grads, strict=True)
            }
        for k, v in fast.items():
            torch.testing.assert_close(adapted[k][t], v, rtol=1e-9, atol=1e-12)
            assert adapted[k].grad_fn is None and not adapted[k].requires_grad


@pytest.mark.parametrize(
    ("field", "value", "names"),
    [
        ("inner_optimizer", "rmsprop", "adam, sgd"),
        ("inner_update", "fast", "auto, for_loop, foreach, fused"),
    ],
)
def test_unknown_inner_optimizer_or_update_is_one_clear_error(field: str, value: str, names: str) -> None:
    from recombine.errors import UserError

    with pytest.raises(UserError, match=f"unknown train.{field} '{value}'; valid choices: {names}"):
        BilevelConfig(**{field: value})
