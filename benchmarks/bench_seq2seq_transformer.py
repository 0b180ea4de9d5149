"""Benchmark the seq2seq Transformer on SCAN: training-step time and greedy-decoding throughput.

The authors' SCAN configuration (thesis Tab. C.1): d_model 128, 8 heads, d_ff 256, 3 + 3 layers, batch
256, on the length resplit with cutoff 26 (thesis Tab. 4.1). For each preset: the median wall time of one
training step (forward, backward, gradient clipping, AdamW update) over random training batches, its
median process CPU time (at one thread the step's own work, which other jobs on a loaded machine
inflate much less than the wall time), and the examples per second of batched greedy decoding of the
OOD test split (a fixed number of steps, as an untrained model rarely emits EOS), all variants
interleaved round by round so that ratios stay meaningful on a loaded machine.

Usage: ``python benchmarks/bench_seq2seq_transformer.py [--threads T] [--steps N] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from recombine import models, tasks
from recombine.train.objectives import objective_for
from timing import environment, write_json

PRESETS = [
    "transformer_seq2seq",
    "transformer_seq2seq_universal",
    "transformer_seq2seq_rel",
    "transformer_seq2seq_rel_universal",
]
CONFIG = {"d_model": 128, "n_heads": 8, "d_ff": 256, "n_encoder_layers": 3, "n_decoder_layers": 3}
BATCH = 256
DECODE_BATCH = 512
DECODE_STEPS = 49  # the longest SCAN output (48 actions) + EOS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per preset and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="", help="write the JSON result here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    task = tasks.get("scan", split="length_cutoff_26", seed=0)
    objective = objective_for(task.spec)
    train, test = objective.prepare(task.splits["train"]), objective.prepare(task.splits["test_ood"])
    decode_batch = test.batch(torch.arange(DECODE_BATCH))
    setups = {}
    for name in PRESETS:
        torch.manual_seed(0)
        model = models.build(name, task.spec, **CONFIG)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        setups[name] = (model, optimizer, torch.Generator().manual_seed(0))

    step_s: dict[str, list[float]] = {name: [] for name in PRESETS}
    step_cpu_s: dict[str, list[float]] = {name: [] for name in PRESETS}
    decode_s: dict[str, list[float]] = {name: [] for name in PRESETS}
    for round_ in range(args.rounds):
        for name, (model, optimizer, generator) in setups.items():
            model.train()
            for step in range(args.steps + (2 if round_ == 0 else 0)):  # 2 warm-up steps in the first round
                batch = objective.batch(train, BATCH, generator, balanced=False)
                start, start_cpu = time.perf_counter(), time.process_time()
                loss, _, _ = objective.loss(model, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                optimizer.step()
                if round_ > 0 or step >= 2:
                    step_s[name].append(time.perf_counter() - start)
                    step_cpu_s[name].append(time.process_time() - start_cpu)
            model.eval()
            start = time.perf_counter()
            model.greedy_decode(decode_batch.src, decode_batch.src_len, DECODE_STEPS)
            decode_s[name].append(time.perf_counter() - start)

    result = {
        **environment(),
        "config": {**CONFIG, "batch_size": BATCH, "task": "scan length_cutoff_26"},
        "presets": {
            name: {
                "parameters": sum(p.numel() for p in setups[name][0].parameters()),
                "train_step_s_median": statistics.median(step_s[name]),
                "train_step_s_min": min(step_s[name]),
                "train_step_cpu_s_median": statistics.median(step_cpu_s[name]),
                "decode_examples_per_s": DECODE_BATCH / statistics.median(decode_s[name]),
                "decode_steps": DECODE_STEPS,
            }
            for name in PRESETS
        },
    }
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
