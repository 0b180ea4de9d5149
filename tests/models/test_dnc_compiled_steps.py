"""``DNC(compile_steps=True)``: each time step through ``torch.compile`` gives the eager DNC's outputs and
gradients (up to float rounding), for the plain DNC and DNC-MDS. Compiling takes ~30-40 s per variant
on the CI machine's CPU, so one small configuration per variant is checked."""

from __future__ import annotations

import copy

import pytest
import torch

from recombine.models.dnc import DNC
from recombine.models.layers.dnc_memory import DNCMemoryConfig


@pytest.mark.parametrize("improved", [False, True], ids=["dnc", "dnc_mds"])
def test_compiled_steps_equal_the_eager_dnc(improved: bool) -> None:
    torch.manual_seed(0)
    memory = DNCMemoryConfig(
        n_cells=5, cell_width=6, n_read_heads=2, masked=improved, dealloc=improved, sharpness=improved
    )
    eager = DNC(4, 3, 8, memory)
    compiled = copy.deepcopy(eager)
    compiled.compile_steps = True
    x = torch.randn(3, 9, 4)
    outputs = {}
    for name, model in (("eager", eager), ("compiled", compiled)):
        out, trace = model(x)
        assert trace is None
        out.square().sum().backward()
        outputs[name] = (out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(outputs["compiled"][0], outputs["eager"][0], rtol=1e-5, atol=1e-6)
    for name, gradient in outputs["eager"][1].items():
        torch.testing.assert_close(outputs["compiled"][1][name], gradient, rtol=1e-4, atol=1e-6)
    # traces run eagerly, also on a deep copy of a model that has compiled its step
    out, trace = copy.deepcopy(compiled)(x, return_trace=True)
    assert trace is not None and trace.write_weighting.shape == (3, 9, 5)
    torch.testing.assert_close(out, outputs["eager"][0], rtol=1e-5, atol=1e-6)
