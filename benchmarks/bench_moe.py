"""Benchmark the sigma-MoE layer against the parameter-equal dense MLP (forward + backward, CPU).

Thesis Fig. 7.2 / F.5 measure one MLP and one MoE layer with K = 4 and ``d_ff = G * N_E``; here
N_E = 16, K = 4, G = 128 (25% of the dense MLP's expert FLOPs), d_model = 512, and the dense MLP's width
is parameter-matched (``parameter_matched_dense_width``: 2048 + 8 units compensating for the selection
matrix W_3). The MoE is the full training-mode layer: selection, top-K, entropy regulariser (added to
the backward), grouped expert matmuls. Reported per token count: median wall (and process CPU) time
of forward + backward after warm-up, best of interleaved rounds; the bytes of tensors autograd saves
for backward (activation memory, parameters and input excluded); and the multiply-add share.

Usage: ``python benchmarks/bench_moe.py [--out FILE] [--threads T] [--tokens 256,1024,4096]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn

from recombine.models.layers.auxiliary_loss import pop_auxiliary_loss
from recombine.models.layers.sigma_moe import SigmaMoE, SigmaMoEConfig, parameter_matched_dense_width
from timing import environment, fwd_bwd_ms, saved_bytes, write_json

D_MODEL = 512
N_EXPERTS = 16
K = 4
EXPERT_SIZE = 128
N_LAYERS = 16  # only scales the initialisation


def dense_mlp(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(D_MODEL, width, bias=False), nn.ReLU(), nn.Linear(width, D_MODEL, bias=False)
    )


def moe_forward(layer: SigmaMoE) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        out = layer(x)
        regularizer = pop_auxiliary_loss(layer)
        return out if regularizer is None else out + regularizer  # regulariser joins the backward

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=str, default=None, help="write results as JSON to this file")
    parser.add_argument("--tokens", type=str, default="256,1024,4096", help="comma-separated token counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best is kept")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    width = parameter_matched_dense_width(D_MODEL, N_EXPERTS, EXPERT_SIZE)
    dense = dense_mlp(width)
    moe = SigmaMoE(
        D_MODEL, N_EXPERTS * EXPERT_SIZE, N_LAYERS, SigmaMoEConfig(n_experts=N_EXPERTS, k=K)
    ).train()
    dense_params, moe_params = list(dense.parameters()), list(moe.parameters())
    dense_madds = 2 * D_MODEL * width  # per token, forward
    moe_madds = 2 * D_MODEL * K * EXPERT_SIZE + N_EXPERTS * D_MODEL  # experts + selection
    results: dict[str, object] = {
        **environment(machine=False),
        "device": "cpu",
        "dtype": "float32",
        "d_model": D_MODEL,
        "n_experts": N_EXPERTS,
        "k": K,
        "expert_size": EXPERT_SIZE,
        "dense_width": width,
        "dense_params": sum(p.numel() for p in dense_params),
        "moe_params": sum(p.numel() for p in moe_params),
        "moe_expert_flop_share": K / N_EXPERTS,
        "moe_flop_share_with_selection": round(moe_madds / dense_madds, 4),
        "per_tokens": {},
    }
    print(f"dense width {width}, params dense {results['dense_params']} / moe {results['moe_params']}")
    print(f"{'tokens':>6} {'dense ms':>9} {'moe ms':>8} {'speedup':>7} {'cpu speedup':>11} {'mem ratio':>9}")
    gen = torch.Generator().manual_seed(1)
    forward = moe_forward(moe)
    for n_tokens in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(n_tokens, D_MODEL, generator=gen).requires_grad_()
        grad_out = torch.randn(n_tokens, D_MODEL, generator=gen)
        dense_runs, moe_runs = [], []
        for _ in range(args.rounds):  # interleaved, so load drifts affect both alike
            dense_runs.append(fwd_bwd_ms(dense, [x], grad_out, args.warmup, args.repeats, dense_params))
            moe_runs.append(fwd_bwd_ms(forward, [x], grad_out, args.warmup, args.repeats, moe_params))
        d_ms, m_ms = min(r[0] for r in dense_runs), min(r[0] for r in moe_runs)
        d_cpu, m_cpu = min(r[1] for r in dense_runs), min(r[1] for r in moe_runs)
        # activation memory: parameters and the input are not counted
        d_bytes = saved_bytes(dense, [x], exclude=[x, *dense_params])
        m_bytes = saved_bytes(forward, [x], exclude=[x, *moe_params])
        row = {
            "dense_ms": round(d_ms, 3),
            "moe_ms": round(m_ms, 3),
            "speedup": round(d_ms / m_ms, 3),
            "dense_cpu_ms": round(d_cpu, 3),
            "moe_cpu_ms": round(m_cpu, 3),
            "cpu_speedup": round(d_cpu / m_cpu, 3),
            "dense_saved_bytes": d_bytes,
            "moe_saved_bytes": m_bytes,
            "memory_ratio": round(m_bytes / d_bytes, 3),
        }
        results["per_tokens"][str(n_tokens)] = row  # type: ignore[index]
        print(
            f"{n_tokens:>6} {d_ms:>9.2f} {m_ms:>8.2f} {row['speedup']:>7.2f} {row['cpu_speedup']:>11.2f} "
            f"{row['memory_ratio']:>9.2f}"
        )

    if args.out:
        write_json(args.out, results)


if __name__ == "__main__":
    main()
