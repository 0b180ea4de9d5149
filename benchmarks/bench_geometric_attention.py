"""Benchmark geometric attention weights against softmax attention (forward + backward).

Compares, at identical shapes, ``geometric_attention_weights(logits) @ v`` with ``softmax(logits) @ v``,
for both implementations of the geometric weights (``compiled``: the numba kernels used on CPU tensors;
``torch``: gather / cumsum / gather, used on other devices):
median wall (and process CPU) time of forward + backward after warm-up, best of a few interleaved
rounds; the bytes of tensors saved for backward during one forward (the activation memory each method
keeps); on CUDA also the peak memory of one forward + backward.

The logits are standard normal. The compiled kernels stop walking a query's keys once the product of
``1 - P`` falls below the flush threshold (every farther weight is flushed to 0), at N = 256 after about
30 keys on such logits. ``full_rows`` times the compiled path once more on ``logits - 5`` (P around 0.01),
where no row stops early: its worst case, against the same softmax time.

Usage: ``python benchmarks/bench_geometric_attention.py [--out FILE] [--threads T] [--device DEV]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from recombine.models.layers.geometric_attention import geometric_attention_weights
from timing import environment, fwd_bwd_ms, saved_bytes, write_json

# (N, batch); both methods always run at the same shapes.
SHAPES = [(16, 64), (64, 64), (256, 64)]
HEADS = 4
D_HEAD = 32


def geometric(logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return geometric_attention_weights(logits) @ v  # the default: compiled on CPU


def geometric_torch(logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return geometric_attention_weights(logits, implementation="torch") @ v


def softmax(logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, dim=-1) @ v


def peak_bytes(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    logits: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
) -> int | None:
    """CUDA only: peak memory above the inputs during one forward + backward (None on CPU)."""
    if logits.device.type != "cuda":
        return None
    torch.cuda.synchronize(logits.device)
    base = torch.cuda.memory_allocated(logits.device)
    torch.cuda.reset_peak_memory_stats(logits.device)
    torch.autograd.backward(fn(logits, v), grad_out, inputs=[logits, v])
    torch.cuda.synchronize(logits.device)
    logits.grad = None
    v.grad = None
    return torch.cuda.max_memory_allocated(logits.device) - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=str, default=None, help="write results as JSON to this file")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best is kept")
    parser.add_argument("--device", type=str, default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    results: dict[str, object] = {
        **environment(machine=False),
        "device": str(device),
        "dtype": "float32",
        "heads": HEADS,
        "d_head": D_HEAD,
        "per_n": {},
    }
    header = (
        f"{'N':>5} {'batch':>5} {'geom ms':>8} {'sm ms':>7} {'ratio':>6} {'geom cpu':>8} {'sm cpu':>7} "
        f"{'cpu ratio':>9} {'geom MB':>8} {'sm MB':>7} {'mem ratio':>9} {'full rows':>9} {'torch ratio':>11}"
    )
    print(header)
    for n, batch in SHAPES:
        logits = torch.randn(batch, HEADS, n, n, generator=gen).to(device).requires_grad_()
        v = torch.randn(batch, HEADS, n, D_HEAD, generator=gen).to(device).requires_grad_()
        grad_out = torch.randn(batch, HEADS, n, D_HEAD, generator=gen).to(device)

        full_rows_logits = (logits.detach() - 5.0).requires_grad_()  # no row stops early (see above)

        # Interleave the methods so drifts in machine load affect all alike; keep the best round.
        methods = {
            "geometric": (geometric, logits),
            "geometric_full_rows": (geometric, full_rows_logits),
            "geometric_torch": (geometric_torch, logits),
            "softmax": (softmax, logits),
        }
        if device.type != "cpu":  # there the default already is the torch implementation
            del methods["geometric_torch"], methods["geometric_full_rows"]
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, (fn, inputs) in methods.items():
                timings[name].append(fwd_bwd_ms(fn, [inputs, v], grad_out, args.warmup, args.repeats))
        ms = {name: min(t[0] for t in ts) for name, ts in timings.items()}
        cpu_ms = {name: min(t[1] for t in ts) for name, ts in timings.items()}
        g_ms, s_ms, g_cpu, s_cpu = ms["geometric"], ms["softmax"], cpu_ms["geometric"], cpu_ms["softmax"]
        # Saved-for-backward bytes. ``v`` is not counted (both methods save it for ``A @ v``); ``logits``
        # is (in a model it is an intermediate that would otherwise be freed after the forward); ``A``
        # saved by both the weights op and the matmul counts once.
        g_bytes = saved_bytes(geometric, [logits, v], exclude=[v])
        s_bytes = saved_bytes(softmax, [logits, v], exclude=[v])
        g_peak, s_peak = peak_bytes(geometric, logits, v, grad_out), peak_bytes(softmax, logits, v, grad_out)
        row = {
            "batch": batch,
            "geometric_ms": round(g_ms, 3),
            "softmax_ms": round(s_ms, 3),
            "ratio": round(g_ms / s_ms, 3),
            "geometric_cpu_ms": round(g_cpu, 3),
            "softmax_cpu_ms": round(s_cpu, 3),
            "cpu_ratio": round(g_cpu / s_cpu, 3),
            "geometric_saved_bytes": g_bytes,
            "softmax_saved_bytes": s_bytes,
            "memory_ratio": round(g_bytes / s_bytes, 3),
        }
        if "geometric_torch" in ms:
            row |= {
                "geometric_full_rows_ms": round(ms["geometric_full_rows"], 3),
                "full_rows_ratio": round(ms["geometric_full_rows"] / s_ms, 3),
                "geometric_torch_ms": round(ms["geometric_torch"], 3),
                "torch_ratio": round(ms["geometric_torch"] / s_ms, 3),
            }
        if g_peak is not None and s_peak is not None:
            row |= {"geometric_peak_bytes": g_peak, "softmax_peak_bytes": s_peak}
        results["per_n"][str(n)] = row  # type: ignore[index]
        print(
            f"{n:>5} {batch:>5} {g_ms:>8.2f} {s_ms:>7.2f} {row['ratio']:>6.2f} {g_cpu:>8.2f} {s_cpu:>7.2f} "
            f"{row['cpu_ratio']:>9.2f} "
            f"{g_bytes / 2**20:>8.2f} {s_bytes / 2**20:>7.2f} {row['memory_ratio']:>9.2f} "
            f"{row.get('full_rows_ratio', float('nan')):>9.2f} {row.get('torch_ratio', float('nan')):>11.2f}"
        )

    if args.out:
        write_json(args.out, results)


if __name__ == "__main__":
    main()
