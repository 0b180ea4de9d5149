"""Thesis Tab. 5.3: who generalizes to deeper simple-arithmetic expressions?

Nested mod-10 ``+``/``*`` expressions (task ``arithmetic``, thesis 5.2.2, D.3.2), trained on depths 0-5
and tested on depths 7-8 as in Tab. 5.3 (D.3.2 says 7; the task's default). Paper: the NDR reaches
0.98, every baseline fits the IID data but stays at 0.47-0.82 on deeper problems.

Paper setting (Tab. D.4): gated models d_model 256, d_ff 1024, 4 heads, 15 layers, batch 512, 100k
steps; baselines 200k steps. CPU scale: see ``SCALE_NOTE`` and docs/reproductions/ndr-arithmetic.md.
"""

from __future__ import annotations

from recombine.experiments.ndr_ctl import (
    CPU_PLAIN,
    CPU_TRAIN,
    CPU_TRANSFORMER,
    EXTRA_TEST_STEPS,
    PLAIN_TRAIN,
    RELEASED_NDR_INIT,
)
from recombine.experiments.reproduction import PaperNumber, Reproduction, Variant

# Thesis Tab. D.4: the gated models have 4 heads and 15 layers (one step per operation, D.3.1); the
# ungated ones the CTL setting of Tab. D.3 (d_model 128, 4 heads, 11 layers, lr 1.5e-4, wd 0.0025),
# which is ndr_ctl's CPU_PLAIN / PLAIN_TRAIN at d_model 64.
GATED = {**CPU_TRANSFORMER, "n_heads": 4, "n_layers": 15, "test_layers": 15 + EXTRA_TEST_STEPS}
# Tab. D.4: LSTM 200 and BiLSTM 400 units, 2 layers, dropout 0.5. The authors' bidirectional encoder
# splits its units between the directions (CTL++ code, and E.1.2: "256 units (128 per direction)"), so
# the BiLSTM's 400 are 200 per direction: our d_model (per direction) 200. Both at the thesis's size.
LSTM = {"d_model": 200, "n_layers": 2, "dropout": 0.5}
BILSTM = {"d_model": 200, "n_layers": 2, "dropout": 0.5}

VARIANTS = (
    Variant("NDR", "ndr", {**GATED, **RELEASED_NDR_INIT}),
    Variant("Transformer", "transformer", CPU_PLAIN, PLAIN_TRAIN),
    Variant("+rel", "transformer_rel", CPU_PLAIN, PLAIN_TRAIN),
    Variant("+abs/rel+gate", "transformer_absrel_gate", GATED),
    Variant("LSTM", "lstm", LSTM),
    Variant("BiLSTM", "bilstm", BILSTM),
)

COLUMN = "depth-7-8"

# Thesis Tab. 5.3, "Test (7-8)" after 200k steps (the NDR: 100k), mean ± std over 5 seeds. The table
# has no "+rel+gate" or "+geom." row.
PAPER = {
    ("NDR", COLUMN): PaperNumber(0.98, 0.01),
    ("Transformer", COLUMN): PaperNumber(0.47, 0.01),
    ("+rel", COLUMN): PaperNumber(0.77, 0.04),
    ("+abs/rel+gate", COLUMN): PaperNumber(0.80, 0.16),
    ("LSTM", COLUMN): PaperNumber(0.74, 0.02),
    ("BiLSTM", COLUMN): PaperNumber(0.82, 0.06),
}

SCALE_NOTE = (
    "CPU scale: NDR and +abs/rel+gate d_model 64, 4 heads, d_ff 128, 15 layers, evaluated with "
    f"{EXTRA_TEST_STEPS} extra shared-layer steps, the NDR from the released layer's initialisation; "
    "Transformer and +rel d_model 64, 4 heads, d_ff 128, 11 layers, lr 1.5e-4, weight decay 0.0025; "
    "LSTM and BiLSTM 200 units per direction, 2 layers, "
    "dropout 0.5 (as the thesis); Transformers dropout 0.1; all: batch 64, AdamW (lr 1e-3, weight "
    "decay 0.01 unless stated), clip 1, 10k steps; train depths 0-5 (100k examples), test depths 7-8. "
    "Paper (Tab. D.4): d_model 256 (gated) / 128, batch 512 / 256, 100k (gated) / 200k steps."
)

NDR_ARITHMETIC = Reproduction(
    name="ndr-arithmetic",
    description="depth generalization on simple arithmetic (thesis Tab. 5.3)",
    source="Csordás thesis, Tab. 5.3 (Test 7-8 column)",
    task="arithmetic",
    columns={COLUMN: {"test_ood_depths": [7, 8]}},
    variants=VARIANTS,
    train={
        "steps": 10000,
        **CPU_TRAIN,
        "grad_clip": 1.0,  # thesis D.3.3: 1 for simple arithmetic and ListOps
        "eval_every": 500,
    },
    quick_train={"steps": 200, "eval_every": 100},
    quick_variants=("NDR", "LSTM"),
    report_split="test_ood",
    iid_split="valid_iid",
    paper=PAPER,
    scale_note=SCALE_NOTE,
    depth_axis="depth (operations)",
)
