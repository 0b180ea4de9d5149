"""The memory of the improved Differentiable Neural Computer (thesis ch. 2, appendix A.1).

One :class:`DNCMemory` step reads the controller output ``h_t``, projects it to the interface vector
``xi_t = W_xi h_t`` (eq. A.1), writes the memory, then reads it with ``R`` read heads:

* content addressing ``C(M, k, beta, m) = softmax(D(k * m, M * 1 m^T) beta)`` with the stabilised
  cosine similarity ``D(u, v) = u . v / (|u| |v| + eps)`` (eqs. 2.1, 2.4, A.3, A.4);
* retention ``psi_t = prod_i (1 - f_t^i w_{t-1}^{r,i})`` (eq. A.5) and usage
  ``u_t = (u_{t-1} + w_{t-1}^w - u_{t-1} * w_{t-1}^w) * psi_t`` (eq. A.6);
* sort-based allocation, least used first: ``a_t[phi[j]] = (1 - u_t[phi[j]]) prod_{i<j} u_t[phi[i]]``
  with ``phi = argsort(u_t)`` (the unnumbered equation after A.6);
* the write weighting ``w_t^w = g^w [g^a a_t + (1 - g^a) c_t^w]`` (eq. A.7);
* the memory update ``M_t = M_{t-1} * psi_t 1^T * (E - w_t^w e_t^T) + w_t^w v_t^T`` (eqs. 2.3, A.8);
* precedence ``p_t = (1 - sum_i w_t^w[i]) p_{t-1} + w_t^w`` and the temporal link matrix
  ``L_t[i, j] = (1 - w_t^w[i] - w_t^w[j]) L_{t-1}[i, j] + w_t^w[i] p_{t-1}[j]``, zero diagonal (eq. A.9);
* forward / backward weightings ``f = S(L_t w_{t-1}^r, s^f)``, ``b = S(L_t^T w_{t-1}^r, s^b)`` with the
  sharpening ``S(d, s)_i = ((d_i + eps) / max(d + eps))^s / sum_j (...)`` (eqs. 2.5, A.10);
* read weightings ``w^r = pi[1] b + pi[2] c^r + pi[3] f`` (eqs. A.11, A.12) and reads ``r = M_t^T w^r``.

The three modifications of thesis 2.2 are switches of :class:`DNCMemoryConfig`; with all three off
this is the DNC of Graves et al. [2016] (the "compare this to" lines of appendix A.1):

* ``masked`` (M): the controller emits masks ``m = sigmoid(m_hat) (1 - delta) + delta`` (eq. A.2) for
  the write and every read key; without it ``m = 1``.
* ``dealloc`` (D): de-allocation also wipes memory content (the ``psi_t 1^T`` factor of eq. 2.3).
* ``sharpness`` (S): link distributions are sharpened with ``s = oneplus(s_hat)`` (eq. 2.5); without
  it ``f = L_t w_{t-1}^r`` and ``b = L_t^T w_{t-1}^r``.

Two details follow both reference implementations (Graves et al.'s and Csordás's) rather than the
thesis text: usages are computed from a gradient-stopped previous write weighting, and usages are
squashed to ``eps + (1 - eps) u`` before allocation so that the products never vanish exactly. The
interface vector is clipped to ``[-interface_clip, interface_clip]`` (Csordás's code, 20).

Everything is batched over the batch, the heads and the memory cells; a model loops over time only.
Each equation is also a plain function here so tests can check it on hand-made states. One saving
that does not change the math: every memory state ``M_t`` is looked up twice (by the read heads of
step ``t`` and the write head of step ``t + 1``), and the part of the cosine similarity that depends
on ``M_t`` alone (the cell norms, or ``M_t * M_t`` with masking: :func:`cell_statistics`) is computed
once and carried in :class:`DNCMemoryState`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError

#: the stabilising constant of the cosine similarity (eq. 2.4), the sharpening (eq. A.10) and the
#: usage squashing before allocation (both reference implementations use 1e-6)
EPS = 1e-6
#: initial bias of the mask logits (thesis A.1: "initializing biases ... to 1")
MASK_BIAS_INIT = 1.0


@dataclass
class DNCMemoryConfig:
    n_cells: int = 21  # N (thesis D.3.3: 21 cells on CTL)
    cell_width: int = 200  # W
    n_read_heads: int = 4  # R
    masked: bool = False  # M: masked content addressing (eq. 2.1)
    dealloc: bool = False  # D: de-allocation wipes content (eq. 2.3)
    sharpness: bool = False  # S: link distribution sharpness enhancement (eq. 2.5)
    mask_min: float = 0.1  # delta of eq. A.2 (the masks live in (delta, 1))
    interface_clip: float = 20.0  # |xi_t| bound; 0 disables

    def __post_init__(self) -> None:
        if min(self.n_cells, self.cell_width, self.n_read_heads) < 1:
            raise UserError("model.n_cells, model.cell_width and model.n_read_heads must be >= 1")
        if not 0.0 <= self.mask_min < 1.0:
            raise UserError(f"model.mask_min must be in [0, 1); got {self.mask_min}")
        if self.interface_clip < 0:
            raise UserError(f"model.interface_clip must be >= 0 (0 disables it); got {self.interface_clip}")


# --- the equations, one function each -----------------------------------------------------------


def oneplus(x: torch.Tensor) -> torch.Tensor:
    """``oneplus(x) = 1 + log(1 + e^x)`` (thesis A.1), in ``[1, inf)``."""
    return 1.0 + F.softplus(x)


def _safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(x)`` for ``x >= 0`` whose gradient at exactly 0 is 0 instead of inf (empty memory cells)."""
    positive = x > 0
    return torch.where(positive, torch.where(positive, x, torch.ones_like(x)).sqrt(), torch.zeros_like(x))


def cell_statistics(memory: torch.Tensor, masked: bool) -> torch.Tensor:
    """What content addressing (eqs. 2.4 / A.4) needs of ``M`` besides ``M`` itself, for reuse.

    Unmasked: the cell norms ``|M_i|`` ``[B, N]``; masked: the squared entries ``M * M`` ``[B, N, W]``
    (``|M_i * m|^2 = sum_w m^2 M_i^2``). One memory state is looked up twice, by the read heads of step
    ``t`` and by the write head of step ``t + 1``; computing these once per state saves a pass over the
    memory, forward and backward, per step (the values and gradients are the same).
    """
    if masked:
        return memory * memory
    return torch.linalg.vector_norm(memory, dim=-1)  # its gradient at 0 is 0 (empty cells)


def content_weighting(
    memory: torch.Tensor,
    keys: torch.Tensor,
    strengths: torch.Tensor,
    masks: torch.Tensor | None = None,
    eps: float = EPS,
    statistics: torch.Tensor | None = None,
) -> torch.Tensor:
    """``C(M, k, beta, m)`` of eqs. 2.1 / A.3 with the cosine similarity of eqs. 2.4 / A.4.

    memory ``[B, N, W]``, keys ``[B, H, W]``, strengths ``[B, H]``, masks ``[B, H, W]`` or ``None``
    (no masking, Graves et al.) -> weightings ``[B, H, N]``. The masked cells ``M * 1 m^T`` are never
    materialised per head: ``(k m) . (M_i m) = sum_w k m^2 M_i`` and ``|M_i m|^2 = sum_w m^2 M_i^2``.
    ``statistics`` is ``cell_statistics(memory, masks is not None)`` when the caller already has it.
    """
    if statistics is None:
        statistics = cell_statistics(memory, masks is not None)
    elif statistics.shape != (memory.shape if masks is not None else memory.shape[:-1]):
        raise ValueError(f"statistics of shape {tuple(statistics.shape)} do not fit this memory and masks")
    if masks is None:
        dots = torch.matmul(keys, memory.transpose(-1, -2))  # [B, H, N]
        key_norms = torch.linalg.vector_norm(keys, dim=-1)  # [B, H]; its gradient at 0 is 0
        cell_norms = statistics.unsqueeze(1)  # [B, 1, N]
    else:
        squared_masks = masks * masks
        dots = torch.matmul(keys * squared_masks, memory.transpose(-1, -2))
        key_norms = _safe_sqrt((keys * keys * squared_masks).sum(-1))
        cell_norms = _safe_sqrt(torch.matmul(squared_masks, statistics.transpose(-1, -2)))
    similarity = dots / (key_norms.unsqueeze(-1) * cell_norms + eps)  # eq. 2.4
    return torch.softmax(similarity * strengths.unsqueeze(-1), dim=-1)  # eq. 2.1


def retention_vector(free_gates: torch.Tensor, previous_read_weightings: torch.Tensor) -> torch.Tensor:
    """``psi_t = prod_i (1 - f_t^i w_{t-1}^{r,i})`` (eq. A.5): free gates ``[B, R]``, reads ``[B, R, N]``."""
    return (1.0 - free_gates.unsqueeze(-1) * previous_read_weightings).prod(dim=1)


def update_usage(
    usage: torch.Tensor, previous_write_weighting: torch.Tensor, retention: torch.Tensor
) -> torch.Tensor:
    """``u_t = (u_{t-1} + w_{t-1}^w - u_{t-1} * w_{t-1}^w) * psi_t`` (eq. A.6), all ``[B, N]``."""
    return (usage + previous_write_weighting - usage * previous_write_weighting) * retention


def allocation_weighting(usage: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Sort-based allocation (thesis A.1, after eq. A.6): ``[B, N]`` usages -> ``[B, N]`` weighting.

    ``phi = argsort(u)`` ascending (least used first; ties go to the lower index), then
    ``a[phi[j]] = (1 - u[phi[j]]) prod_{i<j} u[phi[i]]``. Usages are first squashed to
    ``eps + (1 - eps) u`` (reference implementations), so ``eps=0`` is the literal equation.
    """
    usage = eps + (1.0 - eps) * usage
    sorted_usage, free_list = torch.sort(usage, dim=-1, stable=True)
    exclusive_products = torch.cumprod(
        torch.cat([torch.ones_like(sorted_usage[..., :1]), sorted_usage[..., :-1]], dim=-1), dim=-1
    )
    sorted_allocation = (1.0 - sorted_usage) * exclusive_products
    return torch.zeros_like(sorted_allocation).scatter(-1, free_list, sorted_allocation)


def write_weighting(
    allocation: torch.Tensor,
    write_content: torch.Tensor,
    allocation_gate: torch.Tensor,
    write_gate: torch.Tensor,
) -> torch.Tensor:
    """``w_t^w = g^w [g^a a_t + (1 - g^a) c_t^w]`` (eq. A.7): ``[B, N]`` weightings, ``[B]`` gates."""
    g_a = allocation_gate.unsqueeze(-1)
    return write_gate.unsqueeze(-1) * (g_a * allocation + (1.0 - g_a) * write_content)


def update_memory(
    memory: torch.Tensor,
    write_weighting: torch.Tensor,
    erase: torch.Tensor,
    write_vector: torch.Tensor,
    retention: torch.Tensor | None,
) -> torch.Tensor:
    """``M_t = M_{t-1} * psi_t 1^T * (E - w e^T) + w v^T`` (eq. 2.3 / A.8).

    ``retention=None`` drops the ``psi_t 1^T`` factor: the update of Graves et al. [2016].
    memory ``[B, N, W]``, write weighting ``[B, N]``, erase and write vectors ``[B, W]``.
    """
    w = write_weighting.unsqueeze(-1)  # [B, N, 1]
    # E - w e^T, or psi 1^T * (E - w e^T) = psi 1^T - (psi * w) e^T, as one batched outer product
    psi = torch.ones_like(w) if retention is None else retention.unsqueeze(-1)
    factor = torch.baddbmm(psi.expand_as(memory), psi * w, erase.unsqueeze(1), alpha=-1.0)
    return torch.baddbmm(memory * factor, w, write_vector.unsqueeze(1))  # + w v^T


def update_link(link: torch.Tensor, precedence: torch.Tensor, write_weighting: torch.Tensor) -> torch.Tensor:
    """``L_t[i, j] = (1 - w[i] - w[j]) L_{t-1}[i, j] + w[i] p_{t-1}[j]``, ``L_t[i, i] = 0`` (eq. A.9).

    ``L[i, j]`` is the degree to which cell ``i`` was written right after cell ``j``.
    link ``[B, N, N]``, the previous precedence and the current write weighting ``[B, N]``.
    """
    w_i = write_weighting.unsqueeze(-1)
    w_j = write_weighting.unsqueeze(-2)
    updated = (1.0 - w_i - w_j) * link + w_i * precedence.unsqueeze(-2)
    updated.diagonal(dim1=-2, dim2=-1).zero_()
    return updated


def update_precedence(precedence: torch.Tensor, write_weighting: torch.Tensor) -> torch.Tensor:
    """``p_t = (1 - sum_i w_t^w[i]) p_{t-1} + w_t^w`` (eq. A.9), ``[B, N]``."""
    return (1.0 - write_weighting.sum(-1, keepdim=True)) * precedence + write_weighting


def sharpen(distribution: torch.Tensor, sharpness: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``S(d, s)_i = ((d_i + eps) / max(d + eps))^s / sum_j ((d_j + eps) / max(d + eps))^s`` (eq. A.10).

    distribution ``[..., N]``, sharpness ``[...]``. ``eps=0`` is eq. 2.5 (for ``d`` with a positive max).
    """
    shifted = distribution + eps
    scaled = (shifted / shifted.amax(dim=-1, keepdim=True)).pow(sharpness.unsqueeze(-1))
    return scaled / scaled.sum(dim=-1, keepdim=True)


def read_weighting(
    backward: torch.Tensor, content: torch.Tensor, forward: torch.Tensor, read_modes: torch.Tensor
) -> torch.Tensor:
    """``w^r = pi[1] b + pi[2] c^r + pi[3] f`` (eq. A.12): ``[B, R, N]`` each, read modes ``[B, R, 3]``."""
    return read_modes[..., 0:1] * backward + read_modes[..., 1:2] * content + read_modes[..., 2:3] * forward


# --- the module ----------------------------------------------------------------------------------


@dataclass
class DNCInterface:
    """The interface vector ``xi_t`` split and squashed (eqs. A.1, A.2). Masks and sharpness
    coefficients are ``None`` when their modification is off."""

    read_keys: torch.Tensor  # [B, R, W]
    read_strengths: torch.Tensor  # [B, R], oneplus
    write_key: torch.Tensor  # [B, W]
    write_strength: torch.Tensor  # [B], oneplus
    erase: torch.Tensor  # [B, W], sigmoid
    write_vector: torch.Tensor  # [B, W]
    free_gates: torch.Tensor  # [B, R], sigmoid
    allocation_gate: torch.Tensor  # [B], sigmoid
    write_gate: torch.Tensor  # [B], sigmoid
    read_modes: torch.Tensor  # [B, R, 3] softmax: (backward, content, forward)
    write_mask: torch.Tensor | None  # [B, W] in (delta, 1)
    read_masks: torch.Tensor | None  # [B, R, W] in (delta, 1)
    forward_sharpness: torch.Tensor | None  # [B, R], oneplus
    backward_sharpness: torch.Tensor | None  # [B, R], oneplus


class DNCMemoryState(NamedTuple):
    """Everything carried from step ``t-1`` to step ``t``."""

    memory: torch.Tensor  # M [B, N, W]
    usage: torch.Tensor  # u [B, N]
    link: torch.Tensor  # L [B, N, N]
    precedence: torch.Tensor  # p [B, N]
    write_weighting: torch.Tensor  # w^w [B, N]
    read_weightings: torch.Tensor  # w^r [B, R, N]
    reads: torch.Tensor  # r [B, R, W]
    #: ``(M, cell_statistics(M, masked))``: reused by the next step's write lookup only while ``memory``
    #: is that very tensor ``M`` (a state edited with ``_replace(memory=...)`` recomputes them)
    memory_statistics: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass
class DNCMemoryTrace:
    """What one step did, for visualisation (thesis Figs. 2.3-2.4). A model stacks the steps along
    dim 1 (time) with :meth:`stack`."""

    write_weighting: torch.Tensor  # [B, N]
    allocation: torch.Tensor  # [B, N]
    usage: torch.Tensor  # [B, N] (u_t, before this step's write)
    read_weightings: torch.Tensor  # [B, R, N]
    content_read_weightings: torch.Tensor  # [B, R, N]
    forward: torch.Tensor  # [B, R, N] f_t (after sharpening when S is on)
    backward: torch.Tensor  # [B, R, N] b_t
    read_modes: torch.Tensor  # [B, R, 3] (backward, content, forward)
    write_mask: torch.Tensor | None  # [B, W]
    read_masks: torch.Tensor | None  # [B, R, W]

    @classmethod
    def stack(cls, steps: list[DNCMemoryTrace]) -> DNCMemoryTrace:
        def gather(name: str) -> torch.Tensor | None:
            values = [getattr(step, name) for step in steps]
            return None if values[0] is None else torch.stack(values, dim=1)

        return cls(**{f.name: gather(f.name) for f in fields(cls)})  # type: ignore[arg-type]


class DNCMemory(nn.Module):
    """The memory access of the (improved) DNC, one time step per call.

    ``forward(controller_output, state) -> (reads [B, R, W], new_state, trace | None)``.
    """

    def __init__(self, d_controller: int, config: DNCMemoryConfig) -> None:
        super().__init__()
        self.config = config
        self.sizes = self._interface_sizes(config)
        self.interface = nn.Linear(d_controller, sum(self.sizes.values()))  # W_xi (eq. A.1)
        nn.init.xavier_uniform_(self.interface.weight)
        nn.init.zeros_(self.interface.bias)
        if config.masked:
            with torch.no_grad():
                for name in ("write_mask", "read_masks"):
                    self.interface.bias[self.interface_slice(name)] = MASK_BIAS_INIT

    @staticmethod
    def _interface_sizes(config: DNCMemoryConfig) -> dict[str, int]:
        """Sub-vector sizes in the order of eq. A.1 (``2WR + 4W + 7R + 3`` in the full DNC-MDS)."""
        w, r = config.cell_width, config.n_read_heads
        sizes = {
            "read_keys": r * w,
            "read_strengths": r,
            "write_key": w,
            "write_strength": 1,
            "erase": w,
            "write_vector": w,
            "free_gates": r,
            "allocation_gate": 1,
            "write_gate": 1,
            "read_modes": 3 * r,
        }
        if config.masked:
            sizes |= {"write_mask": w, "read_masks": r * w}
        if config.sharpness:
            sizes |= {"forward_sharpness": r, "backward_sharpness": r}
        return sizes

    @property
    def interface_size(self) -> int:
        return sum(self.sizes.values())

    def interface_slice(self, name: str) -> slice:
        start = 0
        for part, size in self.sizes.items():
            if part == name:
                return slice(start, start + size)
            start += size
        raise KeyError(name)

    def parse_interface(self, xi: torch.Tensor) -> DNCInterface:
        """Split ``xi_t [B, interface_size]`` and apply the squashing functions of eqs. A.1-A.2."""
        config = self.config
        r, w = config.n_read_heads, config.cell_width
        raw = dict(zip(self.sizes, torch.split(xi, list(self.sizes.values()), dim=-1), strict=True))

        def mask(logits: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(logits) * (1.0 - config.mask_min) + config.mask_min  # eq. A.2

        return DNCInterface(
            read_keys=raw["read_keys"].reshape(-1, r, w),
            read_strengths=oneplus(raw["read_strengths"]),
            write_key=raw["write_key"],
            write_strength=oneplus(raw["write_strength"]).squeeze(-1),
            erase=torch.sigmoid(raw["erase"]),
            write_vector=raw["write_vector"],
            free_gates=torch.sigmoid(raw["free_gates"]),
            allocation_gate=torch.sigmoid(raw["allocation_gate"]).squeeze(-1),
            write_gate=torch.sigmoid(raw["write_gate"]).squeeze(-1),
            read_modes=torch.softmax(raw["read_modes"].reshape(-1, r, 3), dim=-1),
            write_mask=mask(raw["write_mask"]) if config.masked else None,
            read_masks=mask(raw["read_masks"]).reshape(-1, r, w) if config.masked else None,
            forward_sharpness=oneplus(raw["forward_sharpness"]) if config.sharpness else None,
            backward_sharpness=oneplus(raw["backward_sharpness"]) if config.sharpness else None,
        )

    def initial_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32
    ) -> DNCMemoryState:
        """Empty memory, zero usage, links, precedence (``p_0 = 0``, ``L_0 = 0``) and weightings."""
        n, w, r = self.config.n_cells, self.config.cell_width, self.config.n_read_heads

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(batch_size, *shape, device=device, dtype=dtype)

        memory = zeros(n, w)
        statistics = zeros(n, w) if self.config.masked else zeros(n)  # those of the empty memory
        return DNCMemoryState(
            memory, zeros(n), zeros(n, n), zeros(n), zeros(n), zeros(r, n), zeros(r, w), (memory, statistics)
        )

    def step(
        self, interface: DNCInterface, state: DNCMemoryState, return_trace: bool = False
    ) -> tuple[DNCMemoryState, DNCMemoryTrace | None]:
        """Write, then read (thesis 2.1 "Read / Write"), given an already parsed interface."""
        config = self.config
        # usage and allocation (eqs. A.5, A.6, allocation)
        retention = retention_vector(interface.free_gates, state.read_weightings)
        usage = update_usage(state.usage, state.write_weighting.detach(), retention)
        allocation = allocation_weighting(usage)
        # write (eqs. A.7, A.8 / 2.3); the look-up reuses the statistics of M_{t-1} from the last read
        cached = state.memory_statistics
        write_mask = None if interface.write_mask is None else interface.write_mask.unsqueeze(1)
        previous_statistics = None
        if (
            cached is not None
            and cached[0] is state.memory
            and cached[1].dim() == 2 + (write_mask is not None)
        ):
            previous_statistics = cached[1]
        write_content = content_weighting(
            state.memory,
            interface.write_key.unsqueeze(1),
            interface.write_strength.unsqueeze(1),
            write_mask,
            statistics=previous_statistics,
        ).squeeze(1)
        written = write_weighting(allocation, write_content, interface.allocation_gate, interface.write_gate)
        memory = update_memory(
            state.memory,
            written,
            interface.erase,
            interface.write_vector,
            retention if config.dealloc else None,
        )
        # temporal links (eq. A.9) and link distributions (eqs. 2.5, A.10)
        link = update_link(state.link, state.precedence, written)
        precedence = update_precedence(state.precedence, written)
        forward = torch.matmul(state.read_weightings, link.transpose(-1, -2))  # L_t w_{t-1}^r
        backward = torch.matmul(state.read_weightings, link)  # L_t^T w_{t-1}^r
        if interface.forward_sharpness is not None and interface.backward_sharpness is not None:
            forward = sharpen(forward, interface.forward_sharpness)
            backward = sharpen(backward, interface.backward_sharpness)
        # read (eqs. A.11, A.12)
        statistics = cell_statistics(memory, interface.read_masks is not None)
        read_content = content_weighting(
            memory, interface.read_keys, interface.read_strengths, interface.read_masks, statistics=statistics
        )
        reads_weighting = read_weighting(backward, read_content, forward, interface.read_modes)
        reads = torch.matmul(reads_weighting, memory)  # r = M_t^T w^r
        new_state = DNCMemoryState(
            memory, usage, link, precedence, written, reads_weighting, reads, (memory, statistics)
        )
        trace = None
        if return_trace:
            trace = DNCMemoryTrace(
                write_weighting=written,
                allocation=allocation,
                usage=usage,
                read_weightings=reads_weighting,
                content_read_weightings=read_content,
                forward=forward,
                backward=backward,
                read_modes=interface.read_modes,
                write_mask=interface.write_mask,
                read_masks=interface.read_masks,
            )
        return new_state, trace

    def forward(
        self, controller_output: torch.Tensor, state: DNCMemoryState, return_trace: bool = False
    ) -> tuple[torch.Tensor, DNCMemoryState, DNCMemoryTrace | None]:
        xi = self.interface(controller_output)  # eq. A.1
        if self.config.interface_clip > 0:
            xi = xi.clamp(-self.config.interface_clip, self.config.interface_clip)
        new_state, trace = self.step(self.parse_interface(xi), state, return_trace)
        return new_state.reads, new_state, trace
