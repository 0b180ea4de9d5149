"""Stacked models (recombine.models.ensemble): an ensemble computes what its members compute alone, and its
weights, gradients and optimiser states split back into the members' exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from recombine.errors import UserError
from recombine.experiments.dnc_memory import VARIANTS
from recombine.models.dnc import DNC
from recombine.models.ensemble import (
    EnsembleLSTMCell,
    clip_grad_norm_per_member,
    member_optimizer_state,
    member_rows,
    member_state_dict,
    stack_models,
    stack_optimizer_states,
    stack_state_dicts,
)
from recombine.models.layers.dnc_memory import DNCMemoryConfig

BATCH = 3


def dncs(variant: str, n: int) -> list[DNC]:
    masked, dealloc, sharpness = VARIANTS[variant]
    memory = DNCMemoryConfig(
        n_cells=5, cell_width=4, n_read_heads=2, masked=masked, dealloc=dealloc, sharpness=sharpness
    )
    models = []
    for seed in range(n):
        torch.manual_seed(seed)
        models.append(DNC(3, 2, 8, memory))
    return models


@pytest.mark.parametrize("variant", ["dnc", "dnc_mds"])
def test_stacked_dncs_compute_each_members_outputs_and_gradients(variant: str) -> None:
    models = dncs(variant, 3)
    ensemble = stack_models(models)
    x = torch.randn(3 * BATCH, 6, 3)
    out, _ = ensemble(x)
    alone = [model(x[member_rows(BATCH, i)])[0] for i, model in enumerate(models)]
    for i, expected in enumerate(alone):
        torch.testing.assert_close(out[member_rows(BATCH, i)], expected, rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    sum(o.square().sum() for o in alone).backward()
    for name, stacked in ensemble.named_parameters():
        for i, model in enumerate(models):
            torch.testing.assert_close(stacked.grad[i], model.get_parameter(name).grad, rtol=1e-4, atol=1e-6)


def test_stacking_keeps_the_members_untouched_and_the_parameter_names() -> None:
    models = dncs("dnc_ds", 2)
    before = [copy.deepcopy(m.state_dict()) for m in models]
    ensemble = stack_models(models)
    assert [n for n, _ in ensemble.named_parameters()] == [n for n, _ in models[0].named_parameters()]
    with torch.no_grad():
        for p in ensemble.parameters():
            p.add_(1.0)
    for model, state in zip(models, before, strict=True):
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, state[name])


def test_ensemble_lstm_cell_follows_nn_lstm_cell() -> None:
    cells = []
    for seed in range(2):
        torch.manual_seed(seed)
        cells.append(nn.LSTMCell(4, 5))
    stacked = EnsembleLSTMCell(cells)
    x, h, c = torch.randn(2 * BATCH, 4), torch.randn(2 * BATCH, 5), torch.randn(2 * BATCH, 5)
    hidden, cell = stacked(x, (h, c))
    for i, reference in enumerate(cells):
        rows = member_rows(BATCH, i)
        expected_hidden, expected_cell = reference(x[rows], (h[rows], c[rows]))
        torch.testing.assert_close(hidden[rows], expected_hidden)
        torch.testing.assert_close(cell[rows], expected_cell)


def test_ensemble_linear_keeps_extra_dimensions_member_major() -> None:
    layers = [nn.Linear(4, 2) for _ in range(3)]
    x = torch.randn(3 * BATCH, 5, 4)
    out = stack_models(layers)(x)
    assert out.shape == (3 * BATCH, 5, 2)
    for i, layer in enumerate(layers):
        torch.testing.assert_close(out[member_rows(BATCH, i)], layer(x[member_rows(BATCH, i)]))


def test_member_weights_round_trip_through_a_plain_model() -> None:
    models = dncs("dnc_mds", 3)
    ensemble = stack_models(models)
    members = [member_state_dict(ensemble, i) for i in range(3)]
    for model, state in zip(models, members, strict=True):
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, state[name])
    restored = stack_state_dicts(members)
    for name, tensor in ensemble.state_dict().items():
        assert torch.equal(tensor, restored[name])
    with pytest.raises(IndexError):
        member_state_dict(ensemble, 3)


@pytest.mark.parametrize("optimizer_class", [torch.optim.Adam, torch.optim.RMSprop])
def test_an_element_wise_optimiser_on_the_stack_updates_each_member_as_alone(optimizer_class: type) -> None:
    # float64: RMSprop divides by the root of tiny squared gradients, which magnifies float32 rounding
    models = [model.double() for model in dncs("dnc_ds", 2)]
    ensemble = stack_models(models)
    options = {"lr": 1e-2, "weight_decay": 1e-3}
    if optimizer_class is torch.optim.RMSprop:
        options["momentum"] = 0.9
    stacked_optimizer = optimizer_class(ensemble.parameters(), **options)
    optimizers = [optimizer_class(m.parameters(), **options) for m in models]
    for step in range(3):
        x = torch.randn(2 * BATCH, 4, 3, generator=torch.Generator().manual_seed(step), dtype=torch.float64)
        stacked_optimizer.zero_grad()
        ensemble(x)[0].square().sum().backward()
        stacked_optimizer.step()
        for i, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            optimizer.zero_grad()
            model(x[member_rows(BATCH, i)])[0].square().sum().backward()
            optimizer.step()
    for i, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(member_state_dict(ensemble, i)[name], tensor)
        # the member's share of the stacked optimiser's state loads into its own optimiser and matches it
        share = member_optimizer_state(stacked_optimizer.state_dict(), i)
        own = optimizer.state_dict()
        fresh = optimizer_class(copy.deepcopy(model).parameters(), **options)
        fresh.load_state_dict(share)
        for key, entries in own["state"].items():
            for entry, value in entries.items():
                torch.testing.assert_close(share["state"][key][entry], value)
    restacked = stack_optimizer_states(
        [member_optimizer_state(stacked_optimizer.state_dict(), i) for i in range(2)]
    )
    for key, entries in stacked_optimizer.state_dict()["state"].items():
        for entry, value in entries.items():
            assert torch.equal(restacked["state"][key][entry], value)


def test_gradient_clip_per_member_matches_clip_grad_norm_on_each_member() -> None:
    models = dncs("dnc", 3)
    ensemble = stack_models(models)
    x = torch.randn(3 * BATCH, 5, 3)
    scales = [1.0, 50.0, 1e-3]  # member 1 far above the limit, member 2 below it
    out, _ = ensemble(x)
    sum(scales[i] * out[member_rows(BATCH, i)].square().sum() for i in range(3)).backward()
    norms = clip_grad_norm_per_member(ensemble.parameters(), 1.0)
    for i, model in enumerate(models):
        (scales[i] * model(x[member_rows(BATCH, i)])[0].square().sum()).backward()
        expected_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        torch.testing.assert_close(norms[i], expected_norm, rtol=1e-4, atol=1e-6)
        for name, stacked in ensemble.named_parameters():
            torch.testing.assert_close(stacked.grad[i], model.get_parameter(name).grad, rtol=1e-4, atol=1e-7)
    assert norms[1] > 1.0 > norms[2]


def test_stack_models_refuses_what_it_cannot_stack() -> None:
    with pytest.raises(UserError, match="buffers"):
        stack_models([nn.BatchNorm1d(3), nn.BatchNorm1d(3)])
    with pytest.raises(UserError, match="Embedding"):
        stack_models([nn.Sequential(nn.Embedding(3, 2)), nn.Sequential(nn.Embedding(3, 2))])
    with pytest.raises(UserError, match="same parameter names and shapes"):
        stack_models([nn.Linear(2, 3), nn.Linear(2, 4)])
    with pytest.raises(UserError, match="at least one"):
        stack_models([])
