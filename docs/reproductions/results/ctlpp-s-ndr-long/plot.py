"""Draw ndr_vs_bilstm_16.png (or the path given) from the archived records: ``python plot.py [OUT.png]``."""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
GRID = HERE.parent / "ctlpp-s" / "runs"


def test_ood_curve(metrics: Path) -> tuple[list[int], list[float]]:
    with metrics.open() as lines:
        evaluations = [json.loads(line) for line in lines if '"eval"' in line]
    return [e["step"] for e in evaluations], [e["splits"]["test_ood"]["accuracy"] for e in evaluations]


CURVES = [
    ("NDR 16/6, extended to 60k", HERE / "fn16-sym6" / "metrics.jsonl", "C0-"),
    ("BiLSTM 16/6", GRID / "BiLSTM--fn16-sym6--seed1" / "metrics.jsonl", "C1-"),
    ("NDR 16/5, extended to 60k", HERE / "fn16-sym5" / "metrics.jsonl", "C0--"),
    ("BiLSTM 16/5", GRID / "BiLSTM--fn16-sym5--seed1" / "metrics.jsonl", "C1--"),
]

fig, ax = plt.subplots(figsize=(6.4, 3.8))
for label, metrics, style in CURVES:
    steps, accuracy = test_ood_curve(metrics)
    ax.plot(steps, accuracy, style, label=label)
ax.axvline(30000, color="0.6", lw=0.8)
ax.text(30500, 0.05, "recipe's 30k", fontsize=8, color="0.4")
ax.set_xlabel("step")
ax.set_ylabel("test_ood accuracy")
ax.set_ylim(0, 1.02)
ax.set_title("CTL++ 'S', 16 shared functions, 6 / 5 shared symbols (seed 1)", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else HERE / "ndr_vs_bilstm_16.png", dpi=110)
