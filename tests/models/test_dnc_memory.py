"""The DNC memory (thesis 2.2, A.1) against hand-computed states and naive loops over the equations."""

from __future__ import annotations

import math

import pytest
import torch

from recombine.errors import UserError
from recombine.models.layers.dnc_memory import (
    MASK_BIAS_INIT,
    DNCInterface,
    DNCMemory,
    DNCMemoryConfig,
    DNCMemoryState,
    allocation_weighting,
    cell_statistics,
    content_weighting,
    read_weighting,
    retention_vector,
    sharpen,
    update_link,
    update_memory,
    update_precedence,
    update_usage,
)

# --- content addressing (eqs. 2.1, 2.4, A.3, A.4) ------------------------------------------------


def naive_content_weighting(memory, keys, strengths, masks, eps):  # type: ignore[no-untyped-def]
    batch, heads, cells = memory.shape[0], keys.shape[1], memory.shape[1]
    out = torch.zeros(batch, heads, cells, dtype=memory.dtype)
    for b in range(batch):
        for h in range(heads):
            m = torch.ones_like(keys[b, h]) if masks is None else masks[b, h]
            k = keys[b, h] * m
            scores = []
            for i in range(cells):
                cell = memory[b, i] * m
                cosine = float(k @ cell) / (math.sqrt(float(k @ k)) * math.sqrt(float(cell @ cell)) + eps)
                scores.append(cosine * float(strengths[b, h]))
            z = max(scores)
            exps = [math.exp(s - z) for s in scores]
            for i in range(cells):
                out[b, h, i] = exps[i] / sum(exps)
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_content_weighting_matches_a_loop_over_cells(masked: bool) -> None:
    g = torch.Generator().manual_seed(0)
    memory = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    memory[0, 3] = 0.0  # an empty cell: cosine 0 thanks to eps
    keys = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    strengths = 1 + 3 * torch.rand(2, 3, generator=g, dtype=torch.float64)
    masks = torch.rand(2, 3, 4, generator=g, dtype=torch.float64) if masked else None
    got = content_weighting(memory, keys, strengths, masks)
    expected = naive_content_weighting(memory, keys, strengths, masks, 1e-6)
    torch.testing.assert_close(got, expected)
    # the same with the cell statistics computed once and passed in (what a DNC step reuses)
    statistics = cell_statistics(memory, masked)
    assert statistics.shape == ((2, 5, 4) if masked else (2, 5))
    torch.testing.assert_close(
        content_weighting(memory, keys, strengths, masks, statistics=statistics), expected
    )
    with pytest.raises(ValueError, match="statistics"):
        content_weighting(memory, keys, strengths, masks, statistics=cell_statistics(memory, not masked))


def test_masked_content_addressing_ignores_masked_channels() -> None:
    g = torch.Generator().manual_seed(1)
    memory = torch.randn(1, 6, 8, generator=g, dtype=torch.float64)
    key = torch.randn(1, 1, 8, generator=g, dtype=torch.float64)
    strength = torch.tensor([[5.0]], dtype=torch.float64)
    mask = torch.zeros(1, 1, 8, dtype=torch.float64)
    mask[..., :4] = 1.0  # search with the first half only ("key"), ignore the rest ("value")
    other_memory = memory.clone()
    other_memory[..., 4:] = torch.randn(1, 6, 4, generator=g, dtype=torch.float64)
    other_key = key.clone()
    other_key[..., 4:] = 100.0
    reference = content_weighting(memory, key, strength, mask)
    torch.testing.assert_close(content_weighting(other_memory, other_key, strength, mask), reference)
    # without the mask the value channels do change the address (eq. 2.1's motivation)
    unmasked = content_weighting(other_memory, other_key, strength, None)
    assert (unmasked - content_weighting(memory, key, strength, None)).abs().max() > 1e-3


def test_masked_lookup_finds_the_cell_by_its_key_half_where_the_unmasked_one_is_confused() -> None:
    """Thesis 2.2: the unknown value half flattens / misleads the unmasked cosine score."""
    key_part = torch.eye(4, dtype=torch.float64)
    values = torch.tensor(
        [[9.0, 0, 0, 0], [0, 0, 0, 0.1], [0, 0, 0.1, 0], [0, 0.1, 0, 0]], dtype=torch.float64
    )
    memory = torch.cat([key_part, values], dim=-1).unsqueeze(0)  # 4 cells: key | value
    query = torch.cat([key_part[1], torch.tensor([9.0, 0, 0, 0], dtype=torch.float64)]).view(1, 1, 8)
    mask = torch.tensor([1.0] * 4 + [0.0] * 4, dtype=torch.float64).view(1, 1, 8)
    strength = torch.tensor([[20.0]], dtype=torch.float64)
    assert content_weighting(memory, query, strength, mask)[0, 0].argmax() == 1
    assert content_weighting(memory, query, strength, None)[0, 0].argmax() == 0


# --- usage and allocation (eqs. A.5, A.6, allocation) -------------------------------------------


def test_retention_and_usage_on_a_hand_made_state() -> None:
    free = torch.tensor([[1.0, 0.5]])
    reads = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]])
    psi = retention_vector(free, reads)
    torch.testing.assert_close(psi, torch.tensor([[0.5, 0.25, 1.0]]))  # (1-.5)(1-0), (1-.5)(1-.5), 1
    usage = update_usage(torch.tensor([[0.2, 0.0, 0.5]]), torch.tensor([[0.5, 1.0, 0.0]]), psi)
    # (u + w - u w) psi: (0.2 + 0.5 - 0.1) * 0.5, (0 + 1 - 0) * 0.25, 0.5 * 1
    torch.testing.assert_close(usage, torch.tensor([[0.3, 0.25, 0.5]]))


def naive_allocation(usage: list[float]) -> list[float]:
    order = sorted(range(len(usage)), key=lambda i: (usage[i], i))
    allocation = [0.0] * len(usage)
    for j, cell in enumerate(order):
        product = 1.0
        for i in range(j):
            product *= usage[order[i]]
        allocation[cell] = (1.0 - usage[cell]) * product
    return allocation


def test_allocation_matches_a_loop_over_the_free_list() -> None:
    g = torch.Generator().manual_seed(2)
    usage = torch.rand(4, 9, generator=g, dtype=torch.float64)
    for eps in (0.0, 1e-6):
        got = allocation_weighting(usage, eps=eps)
        squashed = eps + (1 - eps) * usage
        expected = torch.tensor([naive_allocation(row.tolist()) for row in squashed], dtype=torch.float64)
        torch.testing.assert_close(got, expected)
    assert (allocation_weighting(usage).sum(-1) <= 1 + 1e-12).all()


def test_allocation_picks_the_least_used_cell() -> None:
    usage = torch.tensor([[0.9, 0.95, 0.0, 0.7], [1.0, 1.0, 1.0, 0.5]])
    allocation = allocation_weighting(usage, eps=0.0)
    assert allocation.argmax(-1).tolist() == [2, 3]
    torch.testing.assert_close(allocation[0], torch.tensor([0.0, 0.0, 1.0, 0.0]))
    torch.testing.assert_close(allocation[1], torch.tensor([0.0, 0.0, 0.0, 0.5]))
    # a fully used memory allocates nothing
    torch.testing.assert_close(allocation_weighting(torch.ones(1, 4), eps=0.0), torch.zeros(1, 4))
    # ties (an empty memory) go to the lowest index
    assert allocation_weighting(torch.zeros(1, 5))[0].argmax() == 0


# --- the memory update (eqs. 2.3, A.8) ----------------------------------------------------------


def test_memory_update_equals_eq_2_3_and_the_plain_dnc_update() -> None:
    memory = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    w = torch.tensor([[0.5, 0.0]])
    erase = torch.tensor([[1.0, 0.0]])
    v = torch.tensor([[10.0, 20.0]])
    psi = torch.tensor([[1.0, 0.25]])
    # Graves et al.: M (E - w e^T) + w v^T; row 0 = [1*(1-.5), 2] + [5, 10], row 1 untouched
    plain = update_memory(memory, w, erase, v, retention=None)
    torch.testing.assert_close(plain, torch.tensor([[[5.5, 12.0], [3.0, 4.0]]]))
    # eq. 2.3: the de-allocated row 1 is scaled by psi = 0.25
    dealloc = update_memory(memory, w, erase, v, retention=psi)
    torch.testing.assert_close(dealloc, torch.tensor([[[5.5, 12.0], [0.75, 1.0]]]))
    # the general case against the literal matrix form of eq. 2.3
    g = torch.Generator().manual_seed(3)
    memory, v, erase = (
        torch.randn(3, 5, 4, generator=g),
        torch.randn(3, 4, generator=g),
        torch.rand(3, 4, generator=g),
    )
    w, psi = torch.rand(3, 5, generator=g), torch.rand(3, 5, generator=g)
    ones_w, ones = torch.ones(4, 1), torch.ones(5, 4)  # psi 1^T must be N x W, so this 1 is in R^W
    expected = torch.stack(
        [
            memory[b] * (psi[b, :, None] @ ones_w.T) * (ones - w[b, :, None] @ erase[b, None])
            + w[b, :, None] @ v[b, None]
            for b in range(3)
        ]
    )
    torch.testing.assert_close(update_memory(memory, w, erase, v, psi), expected)


# --- temporal links (eq. A.9) and sharpening (eqs. 2.5, A.10) -----------------------------------


def test_link_matrix_follows_the_write_order_of_one_hot_writes() -> None:
    n = 5
    link, precedence = torch.zeros(1, n, n), torch.zeros(1, n)
    for cell in (2, 0, 3):
        w = torch.zeros(1, n)
        w[0, cell] = 1.0
        link = update_link(link, precedence, w)
        precedence = update_precedence(precedence, w)
    expected = torch.zeros(n, n)
    expected[0, 2] = 1.0  # 0 was written right after 2
    expected[3, 0] = 1.0  # 3 right after 0
    torch.testing.assert_close(link[0], expected)
    torch.testing.assert_close(precedence[0], torch.eye(n)[3])  # the last write
    at_2, at_0 = torch.eye(n)[2], torch.eye(n)[0]
    torch.testing.assert_close(link[0] @ at_2, at_0)  # forward: 2 -> 0
    torch.testing.assert_close(link[0].T @ at_0, at_2)  # backward: 0 -> 2


def test_link_update_matches_a_loop_over_cell_pairs() -> None:
    g = torch.Generator().manual_seed(4)
    n = 6
    link = torch.rand(2, n, n, generator=g, dtype=torch.float64) * (1 - torch.eye(n, dtype=torch.float64))
    precedence = torch.softmax(torch.randn(2, n, generator=g, dtype=torch.float64), -1) * 0.8
    w = torch.softmax(torch.randn(2, n, generator=g, dtype=torch.float64), -1) * 0.9
    expected = torch.zeros_like(link)
    for b in range(2):
        for i in range(n):
            for j in range(n):
                if i != j:
                    expected[b, i, j] = (1 - w[b, i] - w[b, j]) * link[b, i, j] + w[b, i] * precedence[b, j]
    torch.testing.assert_close(update_link(link, precedence, w), expected)
    torch.testing.assert_close(
        update_precedence(precedence, w), (1 - w.sum(-1, keepdim=True)) * precedence + w
    )


def test_sharpening_with_s_1_is_the_identity_and_large_s_approaches_argmax() -> None:
    g = torch.Generator().manual_seed(5)
    d = torch.softmax(torch.randn(3, 7, generator=g, dtype=torch.float64), -1)
    torch.testing.assert_close(sharpen(d, torch.ones(3, dtype=torch.float64), eps=0.0), d)
    torch.testing.assert_close(sharpen(d, torch.ones(3, dtype=torch.float64)), d, atol=1e-5, rtol=0)
    one_hot = torch.nn.functional.one_hot(d.argmax(-1), 7).to(torch.float64)
    torch.testing.assert_close(sharpen(d, torch.full((3,), 1e4, dtype=torch.float64)), one_hot)
    # eq. 2.5 for a moderate s: d^s / sum d^s
    s = torch.tensor([2.0, 3.5, 1.3], dtype=torch.float64)
    torch.testing.assert_close(
        sharpen(d, s, eps=0.0), d ** s[:, None] / (d ** s[:, None]).sum(-1, keepdim=True)
    )


def test_read_weighting_mixes_backward_content_forward() -> None:
    b, c, f = (torch.eye(3)[i].view(1, 1, 3) for i in range(3))
    modes = torch.tensor([[[0.2, 0.3, 0.5]]])
    torch.testing.assert_close(read_weighting(b, c, f, modes), torch.tensor([[[0.2, 0.3, 0.5]]]))


# --- the module: interface layout (eq. A.1, A.2) and whole steps --------------------------------


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("sharpness", [False, True])
def test_interface_size_is_that_of_eq_a1(masked: bool, sharpness: bool) -> None:
    w, r = 6, 3
    memory = DNCMemory(
        10, DNCMemoryConfig(n_cells=4, cell_width=w, n_read_heads=r, masked=masked, sharpness=sharpness)
    )
    expected = w * r + 3 * w + 5 * r + 3  # Graves et al. [2016]
    expected += (w + r * w) if masked else 0
    expected += 2 * r if sharpness else 0
    assert memory.interface_size == expected
    if masked and sharpness:
        assert expected == 2 * w * r + 4 * w + 7 * r + 3  # the full DNC-MDS of A.1
        parsed = memory.parse_interface(torch.zeros(2, expected))
        lowest = torch.sigmoid(torch.tensor(0.0)) * (1 - 0.1) + 0.1
        torch.testing.assert_close(parsed.read_masks, torch.full((2, r, w), float(lowest)))
        assert memory.interface.bias[memory.interface_slice("write_mask")].eq(MASK_BIAS_INIT).all()
        parsed = memory.parse_interface(torch.full((1, expected), -50.0))
        assert parsed.write_mask is not None and parsed.write_mask.min() >= 0.1  # (delta, 1), eq. A.2
        assert parsed.forward_sharpness is not None and parsed.forward_sharpness.min() >= 1.0  # oneplus


def test_config_rejects_bad_values() -> None:
    with pytest.raises(UserError, match="n_cells"):
        DNCMemoryConfig(n_cells=0)
    with pytest.raises(UserError, match="mask_min"):
        DNCMemoryConfig(mask_min=1.0)


N, W = 5, 4
VECTORS = torch.eye(W) * 2.0  # orthogonal contents


def interface(
    *,
    write: torch.Tensor | None = None,
    read_key: torch.Tensor | None = None,
    mode: int = 1,
    free: float = 0.0,
    sharp: bool = False,
) -> DNCInterface:
    """One head; write ``write`` to a freshly allocated cell (or nothing), read in mode
    0 backward / 1 content / 2 forward."""
    big = 1e4
    modes = torch.zeros(1, 1, 3)
    modes[0, 0, mode] = 1.0  # exactly one mode, so a content read of a stored item is one-hot
    return DNCInterface(
        read_keys=(read_key if read_key is not None else torch.ones(W)).view(1, 1, W),
        read_strengths=torch.tensor([[50.0]]),
        write_key=torch.ones(1, W),
        write_strength=torch.tensor([1.0]),
        erase=torch.ones(1, W),
        write_vector=(write if write is not None else torch.zeros(W)).view(1, W),
        free_gates=torch.tensor([[free]]),
        allocation_gate=torch.tensor([1.0]),
        write_gate=torch.tensor([1.0 if write is not None else 0.0]),
        read_modes=modes,
        write_mask=None,
        read_masks=None,
        forward_sharpness=torch.tensor([[big]]) if sharp else None,
        backward_sharpness=torch.tensor([[big]]) if sharp else None,
    )


def run(memory: DNCMemory, steps: list[DNCInterface]) -> list[DNCMemoryState]:
    state, states = memory.initial_state(1), []
    for step in steps:
        state, _ = memory.step(step, state)
        states.append(state)
    return states


@pytest.mark.parametrize("sharpness", [False, True])
def test_steps_allocate_in_order_and_links_replay_the_sequence(sharpness: bool) -> None:
    memory = DNCMemory(3, DNCMemoryConfig(n_cells=N, cell_width=W, n_read_heads=1, sharpness=sharpness))
    steps = [interface(write=VECTORS[i]) for i in range(3)]
    steps += [
        interface(read_key=VECTORS[0]),  # content: find the first item
        interface(mode=2, sharp=sharpness),  # forward link: the second
        interface(mode=2, sharp=sharpness),  # the third
        interface(mode=0, sharp=sharpness),  # backward: the second again
    ]
    states = run(memory, steps)
    # allocation put each item in a different, previously unused cell
    written = [int(s.write_weighting[0].argmax()) for s in states[:3]]
    assert len(set(written)) == 3
    assert all(float(states[i].write_weighting[0, written[i]]) > 0.99 for i in range(3))
    for state, item in zip(states[3:], (0, 1, 2, 1), strict=True):
        torch.testing.assert_close(state.reads[0, 0], VECTORS[item], atol=1e-3, rtol=0)


@pytest.mark.parametrize("dealloc", [False, True])
def test_deallocation_wipes_content_only_with_d(dealloc: bool) -> None:
    """Eq. 2.3: a freed cell's content disappears from content look-up only in DNC-D.

    Hand-made state: cells 0 and 1 hold two items, the last read was exactly cell 0. This step frees
    what was read (free gate 1), writes nothing, and looks the first item up by content."""
    memory = DNCMemory(3, DNCMemoryConfig(n_cells=N, cell_width=W, n_read_heads=1, dealloc=dealloc))
    empty = memory.initial_state(1)
    contents = empty.memory.clone()
    contents[0, :2] = VECTORS[:2]
    state = empty._replace(
        memory=contents,
        usage=torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]]),
        read_weightings=torch.eye(N)[0].view(1, 1, N),
    )
    freed, _ = memory.step(interface(read_key=VECTORS[0], free=1.0), state)
    torch.testing.assert_close(
        freed.usage, torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    )  # eq. A.6, both variants
    if dealloc:
        torch.testing.assert_close(freed.memory[0, 0], torch.zeros(W))
        # every cell now scores cosine 0 (eq. 2.4 with eps): the freed item is not found any more
        torch.testing.assert_close(freed.read_weightings[0, 0], torch.full((N,), 1 / N))
    else:
        torch.testing.assert_close(freed.memory[0, 0], VECTORS[0])
        assert freed.read_weightings[0, 0, 0] > 0.99  # memory aliasing: the freed cell is still found
    torch.testing.assert_close(freed.memory[0, 1], VECTORS[1])  # the kept item is untouched


def test_module_forward_runs_batched_and_returns_a_trace() -> None:
    torch.manual_seed(0)
    config = DNCMemoryConfig(
        n_cells=6, cell_width=5, n_read_heads=2, masked=True, dealloc=True, sharpness=True
    )
    memory = DNCMemory(7, config)
    state = memory.initial_state(3)
    for _ in range(4):
        reads, state, trace = memory(torch.randn(3, 7), state, return_trace=True)
    assert reads.shape == (3, 2, 5) and trace is not None
    torch.testing.assert_close(trace.read_modes.sum(-1), torch.ones(3, 2))
    assert (trace.write_weighting.sum(-1) <= 1 + 1e-5).all()
    assert (trace.read_weightings.sum(-1) <= 1 + 1e-5).all()
    assert trace.read_masks is not None and trace.read_masks.shape == (3, 2, 5)
    reads.sum().backward()
    assert memory.interface.weight.grad is not None and torch.isfinite(memory.interface.weight.grad).all()


@pytest.mark.parametrize("masked", [False, True])
def test_reusing_the_cell_statistics_changes_neither_values_nor_gradients(masked: bool) -> None:
    """A step reuses the statistics of M_{t-1} computed by the previous read; recomputing them from
    scratch every step (``memory_statistics=None``) must give the same reads and gradients, and a state
    whose memory was replaced by hand must not use the statistics of the old memory."""
    config = DNCMemoryConfig(
        n_cells=5, cell_width=4, n_read_heads=2, masked=masked, dealloc=True, sharpness=True
    )
    torch.manual_seed(0)
    memory = DNCMemory(6, config).double()
    inputs = torch.randn(5, 3, 6, dtype=torch.float64)

    def unroll(recompute: bool) -> tuple[torch.Tensor, torch.Tensor]:
        memory.zero_grad()
        state = memory.initial_state(3, dtype=torch.float64)
        outputs = []
        for t in range(inputs.shape[0]):
            if recompute:
                state = state._replace(memory_statistics=None)
            reads, state, _ = memory(inputs[t], state)
            outputs.append(reads)
        total = torch.stack(outputs)
        (total * torch.linspace(-1, 1, total.numel(), dtype=torch.float64).view_as(total)).sum().backward()
        return total.detach(), memory.interface.weight.grad.clone()

    reads, grad = unroll(recompute=False)
    reads_again, grad_again = unroll(recompute=True)
    torch.testing.assert_close(reads, reads_again)
    torch.testing.assert_close(grad, grad_again)

    with torch.no_grad():
        state = memory.initial_state(3, dtype=torch.float64)
        for t in range(3):
            _, state, _ = memory(inputs[t], state)
        edited = state._replace(memory=state.memory * 0.5 + 0.1)  # stale statistics left in the state
        reads_edited, _, _ = memory(inputs[3], edited)
        reads_fresh, _, _ = memory(inputs[3], edited._replace(memory_statistics=None))
    torch.testing.assert_close(reads_edited, reads_fresh)
