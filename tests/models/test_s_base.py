"""S-BASE (thesis 7.3, eqs. 7.17-7.18): the log-space Sinkhorn plan against a multiplicative Sinkhorn-Knopp
loop, its marginals, the balanced assignment of a toy batch against brute force over eq. 7.18, the layer
against eq. 7.11 token by token in training (Sinkhorn routing) and evaluation (sigmoid top-K), and
``ffn=s_base`` in the classifier and the language model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from recombine import models
from recombine.errors import UserError
from recombine.models.layers.auxiliary_loss import pop_auxiliary_loss
from recombine.models.layers.feed_forward import build_feed_forward
from recombine.models.layers.pkm import PKMConfig
from recombine.models.layers.s_base import SBaseConfig, SBaseMoE, sinkhorn_log_plan
from recombine.models.layers.sigma_moe import SigmaMoE, SigmaMoEConfig, entropy_regularizer
from recombine.models.layers.topk_mlp import TopKMLPConfig
from recombine.tasks.base import TaskSpec


def sinkhorn_knopp_loop(logits: torch.Tensor, iterations: int) -> torch.Tensor:
    """Sinkhorn-Knopp on ``exp(logits)`` with plain loops: divide each row by its sum, then scale each
    column to sum ``N / N_E``."""
    n, e = logits.shape
    m = [[math.exp(float(v)) for v in row] for row in logits]
    for _ in range(iterations):
        for i in range(n):
            total = sum(m[i])
            m[i] = [v / total for v in m[i]]
        for j in range(e):
            total = sum(m[i][j] for i in range(n))
            for i in range(n):
                m[i][j] *= (n / e) / total
    return torch.tensor(m, dtype=torch.float64)


def naive_expert_mlp(
    x: torch.Tensor, index: torch.Tensor, score: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """Eq. 7.11 token by token."""
    rows = []
    for n in range(x.shape[0]):
        y = torch.zeros(values.shape[-1], dtype=x.dtype)
        for j in range(index.shape[1]):
            e = int(index[n, j])
            y = y + values[e].T @ (score[n, j] * torch.relu(keys[e].T @ x[n]))
        rows.append(y)
    return torch.stack(rows)


def test_sinkhorn_plan_equals_a_sinkhorn_knopp_loop() -> None:
    logits = torch.randn(10, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    for iterations in (1, 3):
        plan = sinkhorn_log_plan(logits, iterations).exp()
        torch.testing.assert_close(plan, sinkhorn_knopp_loop(logits, iterations))


def test_sinkhorn_plan_converges_to_the_balanced_marginals() -> None:
    logits = torch.randn(12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3
    logits[:, 0] += 4.0  # every token prefers expert 0
    plan = sinkhorn_log_plan(logits, 200).exp()
    torch.testing.assert_close(plan.sum(0), torch.full((3,), 4.0, dtype=torch.float64))  # N / N_E each
    torch.testing.assert_close(plan.sum(1), torch.ones(12, dtype=torch.float64))  # one unit per token
    one_step = sinkhorn_log_plan(logits, 1).exp()  # the columns are exact after every iteration
    torch.testing.assert_close(one_step.sum(0), torch.full((3,), 4.0, dtype=torch.float64))


def test_sinkhorn_top1_solves_the_balanced_assignment_of_a_toy_batch() -> None:
    # 6 tokens, 3 experts; plain top-1 sends 4 tokens to expert 0
    logits = torch.tensor(
        [
            [4.0, 0.0, -1.0],
            [3.0, 1.0, -2.0],
            [2.0, 1.5, 0.0],
            [2.5, -1.0, 1.0],
            [0.0, 2.0, -1.0],
            [-1.0, 0.0, 1.0],
        ],
        dtype=torch.float64,
    )
    assert torch.bincount(logits.argmax(1), minlength=3).tolist() == [4, 1, 1]
    sel = torch.sigmoid(logits)
    best, best_value = None, -math.inf  # eq. 7.18 by brute force over the 90 balanced assignments
    for assignment in set(itertools.permutations([0, 0, 1, 1, 2, 2])):
        value = sum(float(sel[n, e]) for n, e in enumerate(assignment))
        if value > best_value:
            best, best_value = assignment, value
    routed = sinkhorn_log_plan(logits, 50).argmax(1)
    assert torch.bincount(routed, minlength=3).tolist() == [2, 2, 2]
    assert tuple(routed.tolist()) == best


def _layer(k: int, n_experts: int = 4, iterations: int = 3) -> SBaseMoE:
    torch.manual_seed(3)
    config = SBaseConfig(n_experts=n_experts, k=k, sinkhorn_iterations=iterations, regularizer_weight=0.01)
    return SBaseMoE(d_model=6, d_ff=8 * n_experts, n_layers=2, config=config).double()


@pytest.mark.parametrize("k", [1, 2])
def test_training_routes_by_the_sinkhorn_plan_and_weights_by_the_sigmoid(k: int) -> None:
    layer = _layer(k).train()
    x = torch.randn(2, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y = layer(x)
    flat = x.reshape(-1, 6)
    logits = flat @ layer.expert_selection.T
    index = sinkhorn_knopp_loop(logits.detach(), 3).topk(k, dim=1).indices
    score = torch.sigmoid(logits).gather(1, index)
    expected = naive_expert_mlp(flat, index, score, layer.keys, layer.values).reshape(x.shape)
    torch.testing.assert_close(y, expected)
    grad_out = torch.randn_like(y)
    params = [layer.keys, layer.values, layer.expert_selection]
    got = torch.autograd.grad(y, params, grad_out)
    want = torch.autograd.grad(expected, params, grad_out)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    # the entropy regulariser of eq. 7.20 over the batch's tokens, as for sigma-MoE (App. F.2)
    auxiliary = pop_auxiliary_loss(layer)
    assert auxiliary is not None
    torch.testing.assert_close(auxiliary, 0.01 * entropy_regularizer(logits))


def test_training_balances_a_skewed_router_and_evaluation_uses_the_sigmoid_top_k() -> None:
    layer = _layer(1, n_experts=4, iterations=20)
    with torch.no_grad():
        layer.expert_selection.mul_(10.0)  # a sharp router (Sinkhorn's top-1 balances the better)
        layer.expert_selection[0] += 8.0  # with these inputs every token's top-1 is expert 0
    x = torch.randn(64, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).abs()
    logits = x @ layer.expert_selection.T
    assert (logits.argmax(1) == 0).all()
    layer.train()
    routed_train, _ = layer.select(logits)
    counts = torch.bincount(routed_train.reshape(-1), minlength=4)
    assert counts.max() <= 20 and counts.min() >= 12  # 16 each if exactly balanced
    layer.eval()
    routed_eval, score = layer.select(logits)
    assert (routed_eval == 0).all()
    torch.testing.assert_close(score, torch.sigmoid(logits[:, :1]))
    # in evaluation S-BASE is a sigma-MoE with sigmoid top-K and the same weights
    sigma = SigmaMoE(6, 32, 2, SigmaMoEConfig(n_experts=4, k=1)).double().eval()
    sigma.load_state_dict(layer.state_dict())
    torch.testing.assert_close(layer(x), sigma(x))


def test_padding_rows_are_left_out_of_the_balancing() -> None:
    layer = _layer(1).train()
    x = torch.randn(3, 4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    mask = torch.tensor([[True] * 4, [True, True, False, False], [True] * 4])
    padded = x.clone()
    padded[1, 2:] = 10.0  # padding content must not change the real tokens' routing
    y_padded, y = layer(padded, mask), layer(x, mask)
    torch.testing.assert_close(y_padded[mask], y[mask])


def test_config_validation() -> None:
    with pytest.raises(UserError, match="sigmoid"):
        SBaseConfig(selection="softmax")
    with pytest.raises(UserError, match="expert dropout"):
        SBaseConfig(expert_dropout=0.1)
    with pytest.raises(UserError, match="sinkhorn_iterations"):
        SBaseConfig(sinkhorn_iterations=0)
    default = SBaseConfig()
    assert (default.n_experts, default.k, default.regularizer) == (4, 1, "entropy")


def test_ffn_s_base_builds_in_the_classifier_and_language_model() -> None:
    block = build_feed_forward(
        "s_base",
        8,
        32,
        2,
        topk=TopKMLPConfig(),
        pkm=PKMConfig(),
        sigma_moe=SigmaMoEConfig(),
        switch=SigmaMoEConfig.switch(),
    )
    assert isinstance(block, SBaseMoE) and block.keys.shape == (4, 8, 8)  # 4 experts of d_ff / 4
    spec = TaskSpec(kind="classify", input_vocab_size=10, n_classes=3, max_input_length=6)
    model = models.build("transformer", spec, d_model=8, n_heads=2, d_ff=32, n_layers=2, ffn="s_base")
    tokens, lengths = torch.randint(0, 10, (4, 5)), torch.tensor([5, 3, 5, 2])
    assert model(tokens, lengths).shape == (4, 3)
    assert isinstance(model.auxiliary_loss(), torch.Tensor)
