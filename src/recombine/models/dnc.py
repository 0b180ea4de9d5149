"""The (improved) Differentiable Neural Computer and a DNC sequence classifier (thesis ch. 2, A.1).

:class:`DNC` wires an LSTM controller to :class:`~recombine.models.layers.dnc_memory.DNCMemory` as in
thesis A.1: the controller receives ``x_t`` concatenated with the previous reads
``r_{t-1}^1 .. r_{t-1}^R`` and emits ``h_t``; the memory is written and read from ``h_t``; the output is
``y_t = W_y h_t + W_r [r_t^1; ...; r_t^R]`` (the last equation of A.1, Graves et al. [2016]).

:class:`DNCClassifier` is the DNC baseline of thesis Tab. 5.1 / D.3.3 for the sequence-classification
tasks: embedding, DNC over the tokens (no begin/end tokens for RNNs, D.3.3), and a linear readout
of the DNC output after the last real token, exactly like the LSTM classifier. Defaults follow
Tab. D.3 / D.3.3 (controller 200, dropout 0.5, 21 cells, 4 read heads); the cell width, which the
thesis does not give, is the controller size as in Csordás's CTL code.

``compile_steps=True`` runs each time step through ``torch.compile``: the DNC's step is a few hundred
small tensor operations, so at small sizes the eager step is dominated by per-operation overhead, which
the compiled step fuses away (``benchmarks/bench_dnc_compile.py``, idle: 2.8-3.6x at the thesis's
repeated-copy size, nothing at the CTL classifier size). The first call compiles (9-17 s per size on an
idle CPU, 30-50 s under load; cached on disk afterwards);
outputs and gradients equal the eager ones up to float rounding. Traces (``return_trace=True``) always
run eagerly.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from recombine.errors import UserError
from recombine.models.layers.dnc_memory import DNCMemory, DNCMemoryConfig, DNCMemoryState, DNCMemoryTrace
from recombine.tasks.base import TaskSpec


class DNC(nn.Module):
    """LSTM controller + DNC memory over a sequence: ``[B, T, d_input] -> [B, T, d_output]``."""

    def __init__(
        self,
        d_input: int,
        d_output: int,
        d_controller: int,
        memory: DNCMemoryConfig,
        compile_steps: bool = False,
    ) -> None:
        super().__init__()
        self.memory_config = memory
        self.compile_steps = compile_steps
        reads_size = memory.n_read_heads * memory.cell_width
        self.controller = nn.LSTMCell(d_input + reads_size, d_controller)
        self.memory = DNCMemory(d_controller, memory)
        self.controller_to_output = nn.Linear(d_controller, d_output)  # W_y
        self.reads_to_output = nn.Linear(reads_size, d_output, bias=False)  # W_r

    def forward(
        self, inputs: torch.Tensor, return_trace: bool = False
    ) -> tuple[torch.Tensor, DNCMemoryTrace | None]:
        batch_size, n_steps, _ = inputs.shape
        state = self.memory.initial_state(batch_size, inputs.device, inputs.dtype)
        hidden = inputs.new_zeros(batch_size, self.controller.hidden_size)
        cell = inputs.new_zeros(batch_size, self.controller.hidden_size)
        outputs: list[torch.Tensor] = []
        traces: list[DNCMemoryTrace] = []
        if self.compile_steps and not return_trace and n_steps > 0:
            # the first step runs eagerly: its all-zero state has no gradient history, unlike every later
            # step's, and compiling both would double the compiled graphs (each costs 30-50 s)
            hidden, cell, state, output, _ = self.step(inputs[:, 0], hidden, cell, state)
            outputs.append(output)
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                for t in range(1, n_steps):
                    # the compiled step recomputes the memory's cell statistics rather than taking the
                    # cached ones, whose reuse rests on tensor identity (``DNCMemoryState.memory_statistics``)
                    hidden, cell, state, output = _compiled_step(
                        self, inputs[:, t], hidden, cell, state._replace(memory_statistics=None)
                    )
                    outputs.append(output)
            return torch.stack(outputs, dim=1), None
        for t in range(n_steps):
            hidden, cell, state, output, trace = self.step(inputs[:, t], hidden, cell, state, return_trace)
            outputs.append(output)
            if trace is not None:
                traces.append(trace)
        stacked = torch.stack(outputs, dim=1)
        return stacked, (DNCMemoryTrace.stack(traces) if return_trace and traces else None)

    def step(
        self,
        x_t: torch.Tensor,
        hidden: torch.Tensor,
        cell: torch.Tensor,
        state: DNCMemoryState,
        return_trace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, DNCMemoryState, torch.Tensor, DNCMemoryTrace | None]:
        """One time step: controller, memory write and read, output ``y_t`` (thesis A.1)."""
        previous_reads = state.reads.flatten(1)
        hidden, cell = self.controller(torch.cat([x_t, previous_reads], dim=-1), (hidden, cell))
        reads, state, trace = self.memory(hidden, state, return_trace)
        output = self.controller_to_output(hidden) + self.reads_to_output(reads.flatten(1))
        return hidden, cell, state, output, trace


# inductor in torch 2.13 calls its own deprecated ``torch._prims_common.check`` while compiling the step and
# warns twice per compiled graph: noise in every log of a compiled run, about torch's code, not the caller's
warnings.filterwarnings(
    "ignore", message=r"`torch\._prims_common\.check` is deprecated", category=FutureWarning
)

#: compiled graphs one step function may collect (torch's default, 8, is reached by three DNC variants,
#: training and evaluation, in one process; past it torch silently runs the step eagerly)
RECOMPILE_LIMIT = 64


@torch.compile
def _compiled_step(
    model: DNC, x_t: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, state: DNCMemoryState
) -> tuple[torch.Tensor, torch.Tensor, DNCMemoryState, torch.Tensor]:
    """``model.step`` without traces, compiled once for every model: the model is an argument, so DNCs of
    the same configuration and sizes share compiled graphs (torch treats their parameters as inputs)."""
    hidden, cell, state, output, _ = model.step(x_t, hidden, cell, state)
    return hidden, cell, state, output


@dataclass
class DNCClassifierConfig:
    d_controller: int = 200  # LSTM controller size (Tab. D.3 "d_model")
    d_embedding: int = 0  # 0: same as d_controller
    n_cells: int = 21  # thesis D.3.3
    cell_width: int = 200
    n_read_heads: int = 4  # thesis D.3.3
    masked: bool = False  # M (eq. 2.1)
    dealloc: bool = False  # D (eq. 2.3)
    sharpness: bool = False  # S (eq. 2.5)
    mask_min: float = 0.1  # delta of eq. A.2
    interface_clip: float = 20.0
    dropout: float = 0.5  # Tab. D.3
    compile_steps: bool = False  # torch.compile each time step (DNC module docstring)

    def __post_init__(self) -> None:
        if self.d_controller < 1 or self.d_embedding < 0:
            raise UserError("model.d_controller must be >= 1 and model.d_embedding >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"model.dropout must be in [0, 1); got {self.dropout}")
        self.memory_config()  # validates the memory fields

    def memory_config(self) -> DNCMemoryConfig:
        return DNCMemoryConfig(
            n_cells=self.n_cells,
            cell_width=self.cell_width,
            n_read_heads=self.n_read_heads,
            masked=self.masked,
            dealloc=self.dealloc,
            sharpness=self.sharpness,
            mask_min=self.mask_min,
            interface_clip=self.interface_clip,
        )


class DNCClassifier(nn.Module):
    def __init__(self, spec: TaskSpec, config: DNCClassifierConfig) -> None:
        super().__init__()
        self.config = config
        d_embedding = config.d_embedding or config.d_controller
        self.embedding = nn.Embedding(spec.input_vocab_size, d_embedding)
        self.dnc = DNC(
            d_embedding,
            config.d_controller,
            config.d_controller,
            config.memory_config(),
            config.compile_steps,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.readout = nn.Linear(config.d_controller, spec.n_classes)

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, return_trace: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, DNCMemoryTrace | None]:
        outputs, trace = self.dnc(self.dropout(self.embedding(tokens)), return_trace)
        # the DNC is causal: the output after the last real token does not see the padding
        last = (lengths.to(outputs.device) - 1).clamp(min=0)
        final = outputs[torch.arange(outputs.shape[0], device=outputs.device), last]
        logits = self.readout(self.dropout(final))
        return (logits, trace) if return_trace else logits
