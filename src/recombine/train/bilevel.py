"""The bilevel meta-learning loop of HNET Alg. 2, vectorised across the meta-batch with ``torch.func``.

HNET section 2 (eq. 1) and appendix C.1.3 / C.2.2. For every task ``k`` of a meta-batch the fast
parameters start at ``phi_0`` and take ``N_inner`` optimiser steps on the support loss

    phi_k <- phi_k - eta_inner * step(grad_phi L(theta, phi_k; D_support(z_k)))            (Alg. 2, inner)

then the task-shared parameters ``theta`` move along the query-loss gradient at the inner solution,

    Delta theta = mean_k grad_theta L(theta, stop_grad(phi_k); D_query(z_k))              (Alg. 2, outer)

the *first-order* outer gradient (C.1.3: "apply the stop_grad operation on phi before computing the
gradient w.r.t theta"; at the inner optimum no second-order term is needed). Alg. 2 sums over tasks; we
average, which only rescales the step. Where ``phi_0`` is itself learned (HNET D: it is part of
``theta``), its first-order gradient is the query gradient w.r.t. ``phi`` at ``phi_k`` (first-order MAML):
we write ``phi_k = phi_0 + stop_grad(phi_k - phi_0)``, whose value is ``phi_k`` and whose derivative w.r.t.
``phi_0`` is the identity. With ``learn_fast_init=False`` ``phi_0`` stays fixed (C.1.3).

The inner loop runs on all tasks at once: the gradient of the task-summed support loss of the ``vmap``-ed
learner w.r.t. the stacked fast parameters (each task's own gradient, one batched backward), with the
meta-parameters held constant and the part of the forward pass that does not depend on the
fast parameters (ANIL's encoder) computed once per inner loop. Learners whose forward pass broadcasts
over a leading task dimension (ANIL, MAML: plain matmuls) run on the stacked meta-batch without ``vmap``.
``inner_loop_per_task`` is
the plain reference (a Python loop over tasks, ``torch.autograd.grad`` and ``torch.optim``), used by the
tests and the benchmark. Losses: ``mse`` (HNET eq. 4, ``(1/2)||f - y||^2`` averaged over samples) and ``kl``
(C.2.2, ``KL(softmax(y) || softmax(f))`` averaged over samples); accuracy is the argmax match (C.2.2).
Both loops use Adam (C.1.5, C.2.4; the inner AdamW of C.2.4 has no stated weight decay) or plain SGD
inside, AdamW with gradient-norm clipping outside, optionally cosine-annealed (C.1.5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap

from recombine.errors import UserError
from recombine.models.layers.narrow_log_softmax import log_softmax_last
from recombine.models.meta_learners import FastParameters, MetaLearner
from recombine.tasks.meta_batch import MetaBatch, MetaLoss

#: how an inner optimiser applies its update (torch.optim's implementations): one tensor at a time, one
#: multi-tensor update over all of them, or one fused kernel per parameter
UPDATE_IMPLEMENTATIONS = ("for_loop", "foreach", "fused")
INNER_OPTIMIZERS = ("adam", "sgd")
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8


@dataclass
class BilevelConfig:
    outer_steps: int = 300
    meta_batch_size: int = 16  # B_outer (HNET: 64 teacher-student, 128 hyperteacher)
    inner_steps: int = 10  # N_inner (HNET C.2.4: 10; ANIL 100; teacher-student 300)
    inner_lr: float = 0.3  # eta_inner (HNET Tab. A10: 0.3 hypernetworks, 0.03 ANIL, 0.01 MAML)
    inner_optimizer: str = "adam"
    outer_lr: float = 1e-3
    outer_weight_decay: float = 1e-2
    grad_clip: float = 1.0  # max global norm of the outer gradient; 0 disables
    learn_fast_init: bool = True  # phi_0 is a meta-parameter (HNET D); False: kept fixed (C.1.3)
    cosine_schedule: bool = False  # anneal the outer learning rate to min_outer_lr (C.1.5)
    min_outer_lr: float = 1e-6
    eval_every: int = 100  # evaluate on fresh train-distribution and OOD tasks every N outer steps; 0: never
    eval_tasks: int = 32
    vectorised: bool = True  # False: the per-task reference loop (slow; for checks and benchmarks)
    # how the inner optimiser applies its update (UPDATE_IMPLEMENTATIONS, same arithmetic up to float
    # rounding); "auto": fused kernels in the vectorised loop, one tensor at a time in the per-task loop
    inner_update: str = "auto"

    def __post_init__(self) -> None:
        if self.inner_optimizer not in INNER_OPTIMIZERS:
            raise UserError(
                f"unknown train.inner_optimizer {self.inner_optimizer!r}; "
                f"valid choices: {', '.join(INNER_OPTIMIZERS)}"
            )
        if self.inner_update != "auto" and self.inner_update not in UPDATE_IMPLEMENTATIONS:
            raise UserError(
                f"unknown train.inner_update {self.inner_update!r}; "
                f"valid choices: auto, {', '.join(UPDATE_IMPLEMENTATIONS)}"
            )
        if self.outer_steps < 0 or self.meta_batch_size < 1 or self.inner_steps < 0:
            raise UserError("train.outer_steps and inner_steps must be >= 0, meta_batch_size >= 1")
        if self.inner_lr <= 0 or self.outer_lr <= 0:
            raise UserError("train.inner_lr and train.outer_lr must be > 0")


# --- losses (HNET eq. 4, C.2.2) ---


def loss_target(kind: MetaLoss, target: Tensor) -> Tensor:
    """The target in the form :func:`loss_against_target` compares predictions with: itself (``mse``) or its
    log-probabilities (``kl``), computed once per batch instead of at every inner step."""
    return target if kind == "mse" else log_softmax_last(target)


def loss_against_target(kind: MetaLoss, prediction: Tensor, target: Tensor) -> Tensor:
    """:func:`task_loss` with the target in :func:`loss_target` form (for ``kl``: log-probabilities)."""
    if kind == "mse":
        return 0.5 * ((prediction - target) ** 2).sum(-1).mean()
    kl = (target.exp() * (target - log_softmax_last(prediction))).sum(-1)
    return kl.mean()


def task_loss(kind: MetaLoss, prediction: Tensor, target: Tensor) -> Tensor:
    """Loss of one task (or a batch, averaged over every leading dimension)."""
    return loss_against_target(kind, prediction, loss_target(kind, target))


def accuracy(prediction: Tensor, target: Tensor) -> Tensor:
    """Fraction of inputs whose predicted argmax equals the target's (HNET C.2.2)."""
    return (prediction.argmax(-1) == target.argmax(-1)).float().mean()


# --- the inner loop ---


def build_inner_optimizer(
    parameters: list[Tensor], config: BilevelConfig, implementation: str
) -> torch.optim.Optimizer:
    """The inner-loop optimiser of ``config`` (Adam or SGD) over ``parameters``, with the update
    ``implementation`` of :data:`UPDATE_IMPLEMENTATIONS` (the same arithmetic up to float rounding). The
    vectorised loop passes stacks of every task's copy of each parameter; both optimisers are
    elementwise, so one update of the stacks is every task's own update.

    The loops hand it contiguous gradients: torch's fused CPU Adam (2.13) silently computes a wrong update
    from a gradient whose strides differ from its parameter's (autograd's gradients of the stacked
    parameters can be transposed views); on CUDA the same mismatch is an error (pytorch/pytorch#106951)."""
    if implementation not in UPDATE_IMPLEMENTATIONS:
        raise ValueError(f"unknown update implementation {implementation!r}; one of {UPDATE_IMPLEMENTATIONS}")
    options = {"foreach": implementation == "foreach", "fused": implementation == "fused" or None}
    if config.inner_optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=config.inner_lr, **options)
    return torch.optim.Adam(parameters, lr=config.inner_lr, betas=_ADAM_BETAS, eps=_ADAM_EPS, **options)


def inner_update(config: BilevelConfig, vectorised: bool) -> str:
    """The update implementation of ``config``; ``auto`` resolves to ``fused`` for the vectorised loop
    (idle machine: ANIL / MAML steps 12-18 % faster than ``foreach``, benchmarks/results/bilevel.json)
    and ``for_loop`` for the per-task reference."""
    if config.inner_update != "auto":
        return config.inner_update
    return "fused" if vectorised else "for_loop"


def over_tasks(model: MetaLearner, method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``method`` of ``model`` applied to every task of a stacked meta-batch at once: ``vmap`` over the
    leading task dimension, or the method itself for learners that broadcast over it
    (:attr:`~recombine.models.meta_learners.MetaLearner.broadcasts_over_tasks`: ANIL, MAML)."""
    return method if model.broadcasts_over_tasks else vmap(method)


def batched_fast_init(model: MetaLearner, n_tasks: int) -> FastParameters:
    """``phi_0`` repeated along a leading task dimension (a view: gradients flow to ``fast_init``)."""
    return {k: v.unsqueeze(0).expand(n_tasks, *v.shape) for k, v in model.initial_fast().items()}


def inner_loop_vectorised(
    model: MetaLearner, fast: FastParameters, x: Tensor, y: Tensor, kind: MetaLoss, config: BilevelConfig
) -> FastParameters:
    """Adapt the stacked fast parameters of every task at once (Alg. 2).

    The gradient is that of the task-summed support loss of the learner applied over all tasks
    (:func:`over_tasks`: ``vmap``, or the learner itself for ANIL / MAML, which broadcast) w.r.t. the
    stacked fast parameters: each task's loss depends only on its own slice of them, so this gives every
    task's own gradient (equal to ``vmap(grad(support loss))``) with one batched backward; for MAML it is
    2.4x faster per inner step. It is taken with ``torch.autograd.grad`` on the stacked parameters as
    leaves, not ``torch.func.grad``, whose per-call transform overhead made every meta-step 16-25 % slower
    (idle machine, benchmarks/results/bilevel_autograd_before_after.json).
    Every task has the same number of support samples, so the sum of the per-task mean losses is
    ``n_tasks`` times the loss averaged over the whole ``[tasks, samples]`` batch, which is computed on the
    stacked predictions. The learner's
    :meth:`~recombine.models.meta_learners.MetaLearner.fast_independent_features` (ANIL's encoder) are
    computed once.
    The meta-parameters are constants here: the gradient is taken only w.r.t. the fast parameters
    (``autograd.grad`` never accumulates into ``.grad`` of anything else), the rest of the loop runs under
    ``no_grad``, and the result is detached.
    """
    batched_forward = over_tasks(model, model.forward_from_features)
    fast = {k: v.detach().clone().requires_grad_(True) for k, v in fast.items()}
    optimizer = build_inner_optimizer(list(fast.values()), config, inner_update(config, vectorised=True))
    with torch.no_grad():
        features = over_tasks(model, model.fast_independent_features)(x)
        target = loss_target(kind, y)

        def summed_support_loss(stacked_fast: FastParameters) -> Tensor:
            return len(x) * loss_against_target(kind, batched_forward(stacked_fast, features), target)

        leaves = list(fast.values())
        for _ in range(config.inner_steps):
            with torch.enable_grad():
                gradients = torch.autograd.grad(summed_support_loss(fast), leaves)
            for leaf, gradient in zip(leaves, gradients, strict=True):
                leaf.grad = gradient.contiguous()  # see build_inner_optimizer
            optimizer.step()  # in place: ``fast`` holds the updated values
    # detached: no graph back to the meta-parameters even if grad mode were on here
    return {k: v.detach() for k, v in fast.items()}


def inner_loop_per_task(
    model: MetaLearner, fast: FastParameters, x: Tensor, y: Tensor, kind: MetaLoss, config: BilevelConfig
) -> FastParameters:
    """Reference: a Python loop over tasks, ``torch.autograd.grad`` and a ``torch.optim`` optimiser."""
    adapted: list[FastParameters] = []
    for task in range(len(x)):
        task_fast = {k: v[task].detach().clone().requires_grad_(True) for k, v in fast.items()}
        leaves = list(task_fast.values())
        optimizer = build_inner_optimizer(leaves, config, inner_update(config, vectorised=False))
        with torch.no_grad():
            features = model.fast_independent_features(x[task])
        target = loss_target(kind, y[task])
        for _ in range(config.inner_steps):
            loss = loss_against_target(kind, model.forward_from_features(task_fast, features), target)
            for leaf, gradient in zip(leaves, torch.autograd.grad(loss, leaves), strict=True):
                leaf.grad = gradient.contiguous()  # see build_inner_optimizer
            optimizer.step()
        adapted.append({k: v.detach() for k, v in task_fast.items()})
    return {k: torch.stack([a[k] for a in adapted]) for k in fast}


# --- the outer (query) loss with the first-order gradient ---


def batch_tensors(batch: MetaBatch, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return tuple(  # type: ignore[return-value]
        torch.as_tensor(a, dtype=dtype)
        for a in (batch.support_x, batch.support_y, batch.query_x, batch.query_y)
    )


def _dtype(model: MetaLearner) -> torch.dtype:
    return next(model.parameters()).dtype


def meta_loss(
    model: MetaLearner, batch: MetaBatch, config: BilevelConfig
) -> tuple[Tensor, Tensor, FastParameters]:
    """Adapt on the support sets, return (mean query loss, per-task query predictions, adapted phi).

    ``loss.backward()`` leaves the first-order outer gradient of Alg. 2 in the meta-parameters' ``.grad``.
    """
    support_x, support_y, query_x, query_y = batch_tensors(batch, _dtype(model))
    init = batched_fast_init(model, len(batch))
    adapt = inner_loop_vectorised if config.vectorised else inner_loop_per_task
    adapted = adapt(model, init, support_x, support_y, batch.loss, config)
    if config.learn_fast_init:  # first-order straight-through: value phi_k, d/dphi_0 = identity
        fast = {k: init[k] + (adapted[k] - init[k]).detach() for k in adapted}
    else:
        fast = adapted
    if config.vectorised and model.broadcasts_over_tasks:
        predictions = model(fast, query_x)
    elif config.vectorised:
        params = dict(model.named_parameters())
        predictions = vmap(lambda f, x: functional_call(model, params, (f, x)))(fast, query_x)
    else:
        predictions = torch.stack(
            [model({k: v[t] for k, v in fast.items()}, query_x[t]) for t in range(len(batch))]
        )
    return task_loss(batch.loss, predictions, query_y), predictions, adapted


# --- training and evaluation ---


class MetaTask:
    """What the loop needs from a task: ``sample(rng, n_tasks, split) -> MetaBatch`` (duck-typed)."""

    def sample(
        self, rng: np.random.Generator, n_tasks: int, split: str = "train"
    ) -> MetaBatch:  # pragma: no cover
        raise NotImplementedError


@dataclass
class Evaluation:
    """Query loss and accuracy (None for regression) on fresh tasks, with the adapted task embeddings."""

    loss: float
    accuracy: float | None
    embeddings: np.ndarray  # [tasks, embedding dim] learner.task_embedding of the adapted phi
    latents: np.ndarray  # [tasks, latent dim] the ground-truth task latents, flattened


def evaluate(
    model: MetaLearner,
    task: MetaTask,
    split: str,
    n_tasks: int,
    config: BilevelConfig,
    rng: np.random.Generator,
) -> Evaluation:
    """Adapt to ``n_tasks`` fresh tasks of ``split`` on their support sets, score on their query sets."""
    batch = task.sample(rng, n_tasks, split)
    loss, predictions, adapted = meta_loss(model, batch, config)
    _, _, _, query_y = batch_tensors(batch, _dtype(model))
    with torch.no_grad():
        embeddings = torch.stack(
            [model.task_embedding({k: v[t] for k, v in adapted.items()}) for t in range(len(batch))]
        )
    return Evaluation(
        loss=float(loss.detach()),
        accuracy=float(accuracy(predictions, query_y)) if batch.loss == "kl" else None,
        embeddings=embeddings.numpy(),
        latents=batch.latents.reshape(len(batch), -1),
    )


def meta_train(
    model: MetaLearner,
    task: MetaTask,
    config: BilevelConfig,
    seed: int = 0,
    on_eval: Callable[[dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Alg. 2 for ``config.outer_steps`` outer steps; returns (and reports) the evaluation records."""
    rng = np.random.default_rng(seed)
    eval_rng = np.random.default_rng([seed, 1])
    meta_params = [
        p
        for name, p in model.named_parameters()
        if config.learn_fast_init or not name.startswith("fast_init.")
    ]
    optimizer = torch.optim.AdamW(meta_params, lr=config.outer_lr, weight_decay=config.outer_weight_decay)
    history: list[dict[str, float]] = []
    for step in range(1, config.outer_steps + 1):
        if config.cosine_schedule:
            progress = (step - 1) / max(1, config.outer_steps - 1)
            lr = config.min_outer_lr + 0.5 * (config.outer_lr - config.min_outer_lr) * (
                1 + math.cos(math.pi * progress)
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss, _, _ = meta_loss(model, task.sample(rng, config.meta_batch_size, "train"), config)
        loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(meta_params, config.grad_clip)
        optimizer.step()
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"meta-training diverged at outer step {step} (query loss {loss_value})")
        if config.eval_every and (step % config.eval_every == 0 or step == config.outer_steps):
            record: dict[str, float] = {"step": step, "train_query_loss": loss_value}
            for split in ("train", "ood"):
                result = evaluate(model, task, split, config.eval_tasks, config, eval_rng)
                record[f"{split}_loss"] = result.loss
                if result.accuracy is not None:
                    record[f"{split}_accuracy"] = result.accuracy
            history.append(record)
            if on_eval is not None:
                on_eval(record)
    return history
