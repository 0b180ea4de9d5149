"""Several models of one architecture trained as one batched model ("members" of an ensemble).

A small recurrent model such as the DNC at the thesis's A.2 sizes spends most of a training step on the
overhead of a few hundred tiny tensor operations per time step, not on arithmetic: on this machine a
compiled step of three A.2 DNCs as one ensemble took 1.3x (DNC) to 1.4x (DNC-MDS) as long as one DNC's
step (``benchmarks/bench_dnc_ensemble.py``).
Training the seeds of one configuration side by side in one model whose batch holds every member's batch
therefore costs little more than training one of them.

:func:`stack_models` turns ``E`` models of the same architecture into one module of that architecture whose
``nn.Linear`` and ``nn.LSTMCell`` layers hold the ``E`` members' weights stacked along a new first dimension
(:class:`EnsembleLinear`, :class:`EnsembleLSTMCell`). Its batch is member-major: rows ``i*B .. (i+1)*B - 1``
belong to member ``i``, and each row goes through its own member's weights. This is exact (up to float
rounding) for any model whose rows do not interact and whose only parameters sit in those two layer types,
which holds for the DNC: its memory has no parameters and works per batch row. Members do not interact in
the backward pass either, so an element-wise optimiser (Adam, RMSprop, with or without weight decay) on the
stacked parameters updates each member exactly as alone; a global gradient-norm clip must be taken per
member (:func:`clip_grad_norm_per_member`).

:func:`member_state_dict` and :func:`stack_state_dicts` convert between the ensemble's state dict and its
members' (same parameter names), and :func:`member_optimizer_state` / :func:`stack_optimizer_states` do the
same for an optimiser's state dict, so that each member can be saved, resumed and read back as a plain model.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from recombine.errors import UserError


class EnsembleLinear(nn.Module):
    """``E`` linear layers: ``[E*B, in] -> [E*B, out]``, rows ``i*B .. (i+1)*B - 1`` through member ``i``."""

    def __init__(self, members: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.n_members = len(members)
        self.in_features, self.out_features = members[0].in_features, members[0].out_features
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in members]))  # [E, out, in]
        has_bias = members[0].bias is not None
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in members])) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(self.n_members, -1, self.in_features)  # [E, B, in]
        weight = self.weight.transpose(1, 2)  # [E, in, out]
        if self.bias is None:
            out = torch.bmm(rows, weight)
        else:
            out = torch.baddbmm(self.bias.unsqueeze(1), rows, weight)
        return out.reshape(*x.shape[:-1], self.out_features)


class EnsembleLSTMCell(nn.Module):
    """``E`` LSTM cells with ``nn.LSTMCell``'s equations, parameter names and gate order (i, f, g, o)."""

    def __init__(self, members: Sequence[nn.LSTMCell]) -> None:
        super().__init__()
        first = members[0]
        self.n_members = len(members)
        self.input_size, self.hidden_size = first.input_size, first.hidden_size
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            if getattr(first, name) is None:
                raise UserError("an ensemble of LSTM cells needs cells with biases")
            setattr(self, name, nn.Parameter(torch.stack([getattr(m, name).detach() for m in members])))

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, cell = state
        e = self.n_members
        gates = torch.baddbmm(
            self.bias_ih.unsqueeze(1), x.reshape(e, -1, self.input_size), self.weight_ih.transpose(1, 2)
        )
        gates = torch.baddbmm(
            gates + self.bias_hh.unsqueeze(1),
            hidden.reshape(e, -1, self.hidden_size),
            self.weight_hh.transpose(1, 2),
        ).reshape(-1, 4 * self.hidden_size)
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
        new_cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)
        new_hidden = torch.sigmoid(output_gate) * torch.tanh(new_cell)
        return new_hidden, new_cell


#: the layer types :func:`stack_models` stacks, with their ensemble counterparts
_ENSEMBLE_LAYERS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: EnsembleLinear,
    nn.LSTMCell: EnsembleLSTMCell,
}


def stack_models(models: Sequence[nn.Module]) -> nn.Module:
    """One module computing all ``models`` at once on a member-major batch (module docstring).

    The models must share one architecture and its settings: everything but the parameters (the modules'
    settings, e.g. a DNC's memory switches) is taken from the first model. Every parameter must belong to an
    ``nn.Linear`` or an ``nn.LSTMCell`` and the models must have no buffers; anything else raises UserError.
    The result is a copy: ``models`` are left alone."""
    if len(models) < 1:
        raise UserError("an ensemble needs at least one model")
    names = [dict(m.named_modules()) for m in models]
    shapes = [{n: tuple(p.shape) for n, p in m.named_parameters()} for m in models]
    if any(s != shapes[0] for s in shapes[1:]):
        raise UserError("the models of an ensemble must have the same parameter names and shapes")
    if any(True for model in models for _ in model.buffers()):
        raise UserError("cannot stack models with buffers: only parameters are stacked")
    ensemble = copy.deepcopy(models[0])
    for name, module in list(ensemble.named_modules()):
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        layer = _ENSEMBLE_LAYERS.get(type(module))
        if layer is None:
            raise UserError(f"cannot stack {type(module).__name__} {name!r}: only Linear and LSTMCell layers")
        stacked = layer([modules[name] for modules in names])
        if not name:  # the models are single layers
            return stacked
        parent_name, _, child = name.rpartition(".")
        setattr(ensemble.get_submodule(parent_name) if parent_name else ensemble, child, stacked)
    return ensemble


def _check_member(ensemble: nn.Module, index: int) -> None:
    n_members = {m.n_members for m in ensemble.modules() if isinstance(m, (EnsembleLinear, EnsembleLSTMCell))}
    if len(n_members) != 1:
        raise ValueError("not an ensemble made by stack_models")
    (count,) = n_members
    if not 0 <= index < count:
        raise IndexError(f"member {index} of an ensemble of {count}")


def member_state_dict(ensemble: nn.Module, index: int) -> dict[str, torch.Tensor]:
    """Member ``index``'s weights under the plain model's parameter names (copies)."""
    _check_member(ensemble, index)
    return {name: tensor[index].clone() for name, tensor in ensemble.state_dict().items()}


def stack_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The inverse of :func:`member_state_dict`: plain models' state dicts -> the ensemble's."""
    return {name: torch.stack([state[name] for state in states]) for name in states[0]}


def member_optimizer_state(optimizer_state: dict[str, Any], index: int) -> dict[str, Any]:
    """Member ``index``'s part of the state dict of an optimiser over an ensemble's parameters: every
    per-parameter tensor with a member dimension is sliced, scalars (Adam's and RMSprop's ``step``) kept.
    It loads into the same optimiser class built over the plain member model's parameters, in the same
    order (:func:`stack_models` keeps the parameter names and their order)."""
    state = {
        key: {name: _member_slice(value, index) for name, value in per_parameter.items()}
        for key, per_parameter in optimizer_state["state"].items()
    }
    return {"state": state, "param_groups": copy.deepcopy(optimizer_state["param_groups"])}


def stack_optimizer_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The inverse of :func:`member_optimizer_state`. The members' scalar entries must agree (they trained
    the same number of steps)."""
    if any(state["state"].keys() != states[0]["state"].keys() for state in states[1:]):
        raise ValueError("the members' optimiser states cover different parameters")
    stacked: dict[Any, dict[str, Any]] = {}
    for key, first in states[0]["state"].items():
        stacked[key] = {}
        for name, value in first.items():
            values = [state["state"][key][name] for state in states]
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                stacked[key][name] = torch.stack(values)
            elif any(not torch.equal(torch.as_tensor(v), torch.as_tensor(value)) for v in values[1:]):
                raise ValueError(f"the members' optimiser entries {name!r} differ: {values}")
            else:
                stacked[key][name] = copy.deepcopy(value)
    return {"state": stacked, "param_groups": copy.deepcopy(states[0]["param_groups"])}


def _member_slice(value: Any, index: int) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value[index].clone()
    return copy.deepcopy(value)


def clip_grad_norm_per_member(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """``nn.utils.clip_grad_norm_`` for each member of stacked parameters: each member's gradients are
    scaled by ``min(1, max_norm / (norm + 1e-6))``, its norm taken over all its gradients. Returns the
    members' norms before clipping, ``[E]``."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    squares = torch.stack([g.flatten(1).square().sum(1) for g in grads]).sum(0)  # [E]
    norms = squares.sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


def member_rows(batch_size: int, index: int) -> slice:
    """The rows of member ``index`` in a member-major batch of ``batch_size`` rows per member."""
    return slice(index * batch_size, (index + 1) * batch_size)
