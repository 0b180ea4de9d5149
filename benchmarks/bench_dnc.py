"""Benchmark the (improved) DNC (thesis ch. 2, A.1): one training step per variant, and the share of
that step spent in each memory operation.

* ``steps``: one AdamW step (forward, backward, update) of the DNC classifier at the thesis' CTL sizes
  (Tab. D.3 / D.3.3: controller 200, 21 cells of width 200, 4 read heads) on ``--batch`` random token
  sequences of ``--length`` tokens (CTL inputs have 11), median wall time after one warm-up step.
* ``operations``: every piece of one memory step (eqs. A.1-A.12) timed on its own, forward + backward,
  on random states of the same shapes (median over ``--repeats``), times the number of time steps, and
  its share of the measured step time of that variant. The shares do not sum to 1: the optimizer,
  autograd bookkeeping and the embedding/readout are not listed.

Usage: ``python benchmarks/bench_dnc.py [--threads 1] [--out benchmarks/results/dnc.json]``.
Old-vs-new cannot run side by side (the old memory step is gone); the docs quote both measurements.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

from recombine.models.dnc import DNCClassifier, DNCClassifierConfig
from recombine.models.layers.dnc_memory import (
    DNCMemory,
    DNCMemoryConfig,
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
    write_weighting,
)
from recombine.tasks.base import TaskSpec
from timing import environment, median_times, write_json

VARIANTS = {"dnc": (False, False, False), "dnc_ds": (False, True, True), "dnc_mds": (True, True, True)}


def training_step_time(variant: str, batch: int, length: int, repeats: int) -> float:
    masked, dealloc, sharpness = VARIANTS[variant]
    spec = TaskSpec(kind="classify", input_vocab_size=16, n_classes=8, max_input_length=length)
    torch.manual_seed(0)
    model = DNCClassifier(spec, DNCClassifierConfig(masked=masked, dealloc=dealloc, sharpness=sharpness))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 16, (batch, length))
    lengths = torch.full((batch,), length)
    labels = torch.randint(0, 8, (batch,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(tokens, lengths), labels).backward()
        optimizer.step()

    wall, _ = median_times(step, repeats)  # after one warm-up step
    return wall


def operation_times(variant: str, batch: int, repeats: int) -> dict[str, float]:
    """Forward + backward seconds of each piece of one memory step at the CTL sizes."""
    masked, dealloc, sharpness = VARIANTS[variant]
    config = DNCMemoryConfig(masked=masked, dealloc=dealloc, sharpness=sharpness)
    n, w, r, d = config.n_cells, config.cell_width, config.n_read_heads, 200
    torch.manual_seed(0)

    def leaf(*shape: int, positive: bool = False) -> torch.Tensor:
        x = torch.rand(batch, *shape) if positive else torch.randn(batch, *shape)
        return x.requires_grad_()

    def simplex(*shape: int) -> torch.Tensor:
        return torch.softmax(torch.randn(batch, *shape), -1).requires_grad_()

    memory_module = DNCMemory(d, config)
    controller = torch.nn.LSTMCell(d + r * w, d)
    memory, previous_reads = leaf(n, w), simplex(r, n)
    mask_w = leaf(1, w, positive=True) if masked else None
    mask_r = leaf(r, w, positive=True) if masked else None
    link, precedence, written = simplex(n, n), simplex(n), simplex(n)
    sharp = leaf(r, positive=True)
    statistics = cell_statistics(memory, masked).detach().requires_grad_()
    cases: dict[str, Callable[[], torch.Tensor]] = {
        "controller (LSTM cell)": lambda: controller(leaf(d + r * w), (leaf(d), leaf(d)))[0],
        "interface (linear, split, squash)": lambda: torch.cat(
            [
                v.reshape(batch, -1)
                for v in vars(memory_module.parse_interface(memory_module.interface(leaf(d)))).values()
                if v is not None
            ],
            -1,
        ),
        "cell statistics (once per memory state)": lambda: cell_statistics(memory, masked),
        "content weighting, write head": lambda: content_weighting(
            memory, leaf(1, w), leaf(1), mask_w, statistics=statistics
        ),
        "content weighting, read heads": lambda: content_weighting(
            memory, leaf(r, w), leaf(r), mask_r, statistics=statistics
        ),
        "retention, usage, allocation": lambda: allocation_weighting(
            update_usage(
                simplex(n), written.detach(), retention_vector(leaf(r, positive=True), previous_reads)
            )
        ),
        "write weighting": lambda: write_weighting(simplex(n), simplex(n), leaf(), leaf()),
        "memory update": lambda: update_memory(
            memory, written, leaf(w, positive=True), leaf(w), leaf(n, positive=True) if dealloc else None
        ),
        "links and precedence": lambda: (
            update_link(link, precedence, written) + update_precedence(precedence, written).unsqueeze(-1)
        ),
        "link distributions (+ sharpening)": lambda: _link_distributions(
            link, previous_reads, sharp, sharpness
        ),
        "read weighting and reads": lambda: torch.matmul(
            read_weighting(simplex(r, n), simplex(r, n), simplex(r, n), simplex(r, 3)), memory
        ),
    }
    times = {}
    for name, forward in cases.items():

        def run(forward: Callable[[], torch.Tensor] = forward) -> None:
            forward().sum().backward()

        times[name], _ = median_times(run, repeats)
    return times


def _link_distributions(
    link: torch.Tensor, reads: torch.Tensor, sharpness: torch.Tensor, sharpen_on: bool
) -> torch.Tensor:
    forward = torch.matmul(reads, link.transpose(-1, -2))  # as in DNCMemory.step
    backward = torch.matmul(reads, link)
    if sharpen_on:
        forward, backward = sharpen(forward, sharpness), sharpen(backward, sharpness)
    return forward + backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default="benchmarks/results/dnc.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results: dict[str, object] = {
        **environment(),
        "batch": args.batch,
        "length": args.length,
        "variants": {},
    }
    for variant in args.variants.split(","):
        step = training_step_time(variant, args.batch, args.length, args.repeats)
        operations = operation_times(variant, args.batch, args.repeats)
        results["variants"][variant] = {  # type: ignore[index]
            "step_seconds": step,
            "operations": {
                name: {"seconds_per_sequence": t * args.length, "share_of_step": t * args.length / step}
                for name, t in operations.items()
            },
        }
        print(f"{variant}: {step:.3f} s/step")  # noqa: T201 (a script, not the library)
        for name, t in operations.items():
            print(f"  {name:40s} {t * args.length:.3f} s  {t * args.length / step:6.1%}")  # noqa: T201
    write_json(args.out, results)


if __name__ == "__main__":
    main()
