"""Meta-learners (HNET D): forward passes against direct evaluations, fast/meta splits, initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from recombine.errors import UserError
from recombine.models.meta_learners import LEARNERS, build_meta_learner


def test_linear_hypernetwork_matches_a_direct_evaluation_of_d3() -> None:
    torch.manual_seed(0)
    model = build_meta_learner("linear_hnet", 3, 2, n_layers=2, n_hidden=4, n_modules=5).double()
    fast = {k: torch.randn_like(v) for k, v in model.initial_fast().items()}
    x = torch.randn(6, 3, dtype=torch.float64)

    def generated(part: str) -> torch.Tensor:
        e = fast[f"embedding_{part}"]
        return model.banks[part] @ (e * math.sqrt(5) / math.sqrt(float((e**2).sum())))

    w0 = generated("first").reshape(4, 3)
    w1 = generated("hidden").reshape(4, 4)
    w2 = generated("last").reshape(2, 4)
    expected = torch.zeros(6, 2, dtype=torch.float64)
    w0, w1, w2 = w0.detach(), w1.detach(), w2.detach()
    for s in range(6):
        a0 = [
            max(
                float(sum(w0[i, j] * x[s, j] for j in range(3))) / math.sqrt(3) + float(fast["bias_0"][i]),
                0.0,
            )
            for i in range(4)
        ]
        a1 = [
            max(sum(float(w1[i, j]) * a0[j] for j in range(4)) / 2.0 + float(fast["bias_1"][i]), 0.0)
            for i in range(4)
        ]
        for o in range(2):
            expected[s, o] = sum(float(w2[o, j]) * a1[j] for j in range(4)) / 2.0 + float(fast["bias_2"][o])
    torch.testing.assert_close(model(fast, x), expected)


def test_embedding_norm_does_not_change_the_linear_hypernetwork() -> None:
    torch.manual_seed(0)
    model = build_meta_learner("linear_hnet", 3, 2, n_layers=2, n_hidden=4, n_modules=5)
    fast = model.initial_fast()
    scaled = {k: (3.0 * v if k.startswith("embedding") else v) for k, v in fast.items()}
    x = torch.randn(4, 3)
    torch.testing.assert_close(model(fast, x), model(scaled, x))


def test_fast_and_meta_parameters_are_split_as_appendix_d_states() -> None:
    torch.manual_seed(0)
    anil = build_meta_learner("anil", 4, 3, n_layers=2, n_hidden=8)
    assert set(anil.initial_fast()) == {"weight_2", "bias_2"}
    assert {n for n, _ in anil.named_parameters()} == {
        "encoder.weight_0", "encoder.bias_0", "encoder.weight_1", "encoder.bias_1",
        "fast_init.weight_2", "fast_init.bias_2",
    }  # fmt: skip
    maml = build_meta_learner("maml", 4, 3, n_layers=2, n_hidden=8)
    assert all(n.startswith("fast_init.") for n, _ in maml.named_parameters())
    hnet = build_meta_learner("linear_hnet", 4, 3, n_layers=2, n_hidden=8, n_modules=6)
    assert set(hnet.initial_fast()) == {
        "embedding_first", "embedding_hidden", "embedding_last", "bias_0", "bias_1", "bias_2",
    }  # fmt: skip
    assert all(v.abs().sum() == 0 for k, v in hnet.initial_fast().items() if k.startswith("bias"))
    nonlinear = build_meta_learner(
        "nonlinear_hnet", 4, 3, n_layers=2, n_hidden=8, n_modules=6, hnet_hidden=16
    )
    assert set(nonlinear.initial_fast()) == set(hnet.initial_fast())
    assert (
        sum(1 for m in nonlinear.generators["first"] if isinstance(m, torch.nn.Linear)) == 4
    )  # D.4: 4 layers


def test_initialisation_scales() -> None:
    torch.manual_seed(0)
    hnet = build_meta_learner("linear_hnet", 16, 8, n_modules=16)
    bank = hnet.banks["hidden"]
    assert bank.abs().max() <= 2 / 4 + 1e-6  # truncated at 2 std, std = 1/sqrt(16)
    assert bank.std().item() == pytest.approx(0.8796 / 4, rel=0.02)
    emb = torch.cat([v for k, v in hnet.initial_fast().items() if k.startswith("embedding")])
    assert emb.abs().max() <= math.sqrt(3)
    maml = build_meta_learner("maml", 16, 8)
    w = maml.initial_fast()["weight_1"]
    assert w.std().item() == pytest.approx(0.8796 / math.sqrt(368), rel=0.02)


def test_teacher_student_student_is_eq_3() -> None:
    torch.manual_seed(0)
    student = build_meta_learner("teacher_student", 5, 2, n_hidden=3, n_modules=4).double()
    z = torch.randn(4, dtype=torch.float64)
    x = torch.randn(7, 5, dtype=torch.float64)
    w = sum(z[m] * student.module_bank[m] for m in range(4))
    expected = torch.relu(x @ w.T / math.sqrt(5)) @ student.readout.T
    torch.testing.assert_close(student({"latent": z}, x), expected)


def test_every_learner_builds_and_unknown_names_raise() -> None:
    torch.manual_seed(0)
    for name in LEARNERS:
        model = (
            build_meta_learner(name, 4, 3)
            if name == "teacher_student"
            else build_meta_learner(name, 4, 3, n_hidden=8)
        )
        assert model(model.initial_fast(), torch.randn(2, 4)).shape == (2, 3)
    with pytest.raises(UserError, match="linear_hnet"):
        build_meta_learner("hnet", 4, 3)
    with pytest.raises(UserError, match="valid fields"):
        build_meta_learner("anil", 4, 3, width=3)


def test_anil_equals_a_direct_evaluation_of_its_relu_mlp() -> None:
    """HNET D.2: ReLU hidden layers from the encoder, a linear readout from the fast parameters; the
    inner loop's split into ``fast_independent_features`` and ``forward_from_features`` composes to it."""
    torch.manual_seed(0)
    model = build_meta_learner("anil", 3, 2, n_layers=2, n_hidden=4).requires_grad_(False)
    fast = {k: torch.randn_like(v) for k, v in model.initial_fast().items()}
    x = torch.randn(5, 3)
    expected = torch.zeros(5, 2)
    for s in range(5):
        a = [float(v) for v in x[s]]
        for layer in range(2):
            w, b = model.encoder[f"weight_{layer}"], model.encoder[f"bias_{layer}"]
            a = [max(0.0, sum(float(w[o, j]) * a[j] for j in range(len(a))) + float(b[o])) for o in range(4)]
        for o in range(2):
            expected[s, o] = sum(float(fast["weight_2"][o, j]) * a[j] for j in range(4)) + float(
                fast["bias_2"][o]
            )
    torch.testing.assert_close(model(fast, x), expected)
    features = model.fast_independent_features(x)
    torch.testing.assert_close(model.forward_from_features(fast, features), expected)
