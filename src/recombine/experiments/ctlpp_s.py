"""Thesis Fig. 6.4 (and Figs. E.3, E.4): CTL++ variant 'S' over its two difficulty parameters.

Variant 'S' (thesis 6.2) trains each path's stage-1 functions only with its own stage-2 functions and the
shared group G_o, and tests the crossed compositions never seen in training. Two parameters set how much
G_o overlaps: its size |G_o| (``task.shared_functions``, the y-axis: 4, 8, 12, 16 of 32 functions) and
the number of symbols each G_o function accepts from both paths (``task.shared_symbols``, the x-axis:
2 ... 6 of 8). Fig. 6.4 is a heat map of the NDR's OOD test accuracy over this 4 x 5 grid (5 seeds per
cell); Figs. E.3 / E.4 the same for the Transformer and the BiLSTM. The claim (6.3.2): accuracy grows
with both kinds of overlap, and 100% needs about half the functions (16/32) and most symbols (6/8) shared.
The figure's cell values are not in the thesis text, so the report has no paper numbers.

One column per (|G_o|, shared symbols) point; the report draws the heat maps
(:mod:`recombine.runs.heatmap`). Models, training and CPU scale are those of ``ctlpp-ar``
(:mod:`recombine.experiments.ctlpp_ar`).
"""

from __future__ import annotations

from recombine.experiments.ctlpp_ar import CPU_SCALE, QUICK_TRAIN, TRAIN, VARIANTS
from recombine.experiments.reproduction import Reproduction

SHARED_FUNCTIONS = (4, 8, 12, 16)  # Fig. 6.4 y-axis
SHARED_SYMBOLS = (2, 3, 4, 5, 6)  # Fig. 6.4 x-axis


def column(shared_functions: int, shared_symbols: int) -> str:
    return f"fn{shared_functions}-sym{shared_symbols}"


COLUMNS = {
    column(f, s): {"variant": "S", "shared_functions": f, "shared_symbols": s}
    for f in SHARED_FUNCTIONS
    for s in SHARED_SYMBOLS
}

CTLPP_S = Reproduction(
    name="ctlpp-s",
    description="CTL++ variant S over shared functions x shared symbols, as heat maps (thesis Fig. 6.4)",
    source="Csordás thesis, Fig. 6.4 (NDR), Figs. E.3 (Transformer), E.4 (BiLSTM)",
    task="ctlpp",
    columns=COLUMNS,
    # Fig. 6.4 first: the NDR is the row --quick runs and the one to run first
    variants=tuple(sorted(VARIANTS, key=lambda v: v.label != "NDR")),
    train=TRAIN,
    quick_train=QUICK_TRAIN,
    quick_variants=("NDR",),
    report_split="test_ood",
    iid_split="test_iid",
    paper={},
    scale_note=CPU_SCALE + ", 5 seeds per cell.",
    seeds=3,
    heatmap=("shared_functions", "shared_symbols"),
)
