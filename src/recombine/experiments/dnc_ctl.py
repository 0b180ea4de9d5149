"""Thesis Tab. 5.1, DNC row: the improved DNC on compositional table lookup, forward and backward.

The DNC reads the CTL input left to right, like the LSTM, so it should generalize to longer problems in
the forward direction (the order of computation) and fail backward (thesis 5.2.1: "The LSTM and DNC
perform well in the forward variant ... but fail on the backward variant"). The authors' CTL DNC has
de-allocation and link sharpness on (DNC-DS). Same task, splits, training loop and report as ``ndr-ctl``
(:mod:`recombine.experiments.ndr_ctl`), so the rows can be read side by side.
"""

from __future__ import annotations

from recombine.experiments.ndr_ctl import NDR_CTL
from recombine.experiments.reproduction import PaperNumber, Reproduction, Variant

# Thesis Tab. D.3: controller 200, dropout 0.5, batch 256, lr 1e-3. CPU scale: 21 cells of width 64
# instead of 200 (the cell width sets the size of the interface and of every memory pass).
_DNC = {"d_controller": 200, "n_cells": 21, "cell_width": 64, "n_read_heads": 4, "dropout": 0.5}

DNC_CTL = Reproduction(
    name="dnc-ctl",
    description="the improved DNC on longer compositional table lookup problems (thesis Tab. 5.1, DNC row)",
    source="Csordás thesis, Tab. 5.1 (DNC row, Longer columns)",
    task=NDR_CTL.task,
    columns=NDR_CTL.columns,
    variants=(Variant("DNC", "dnc", {**_DNC, "dealloc": True, "sharpness": True}),),
    train=NDR_CTL.train,
    quick_train={"steps": 200, "eval_every": 100},
    report_split=NDR_CTL.report_split,
    iid_split=NDR_CTL.iid_split,
    paper={("DNC", "forward"): PaperNumber(1.00, 0.00), ("DNC", "backward"): PaperNumber(0.18, 0.02)},
    scale_note=(
        "CPU scale: DNC-DS (de-allocation and link sharpness, as the authors' CTL DNC), LSTM controller 200, "
        "21 memory cells of width 64 (thesis: 200), 4 read heads, dropout 0.5; batch 64, AdamW lr 1e-3, "
        "weight decay 0.01, clip 5, 10k steps, depth-balanced sampling (as ndr-ctl). "
        "Paper (Tab. D.3): batch 256, 200k steps."
    ),
)
