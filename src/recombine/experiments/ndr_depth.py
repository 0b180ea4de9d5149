"""Thesis Tab. 5.2: how many layers does the NDR need to generalize to longer CTL problems?

The NDR of ``ndr-ctl`` (:mod:`recombine.experiments.ndr_ctl`) trained and evaluated with 4 ... 14
shared layers on compositional table lookup, forward and backward. Tab. 5.2 gives, per depth, the IID
accuracy and the accuracy on the longer test problems (9-10 functions, the ``test_ood`` split): the
two numbers per row are the *Test* Forward and Backward columns (e.g. 10 layers: 0.75 / 0.62). The claim
(thesis 5.2.1, D.3.1): a problem of 10 operations needs about 12 steps, so every depth fits the IID data
but only the deep models generalize: 14 and 12 layers ~1.00, 10 layers 0.75 / 0.62, 8 and fewer at
chance (~0.13-0.24).

Unlike ``ndr-ctl``, every row is evaluated with its training depth (``test_layers`` = ``n_layers``, as
the authors' layer-ablation sweep), since the number of steps is the quantity under test. Each row is the
ndr-ctl NDR with only ``n_layers`` changed: since 2026-11-28 with the authors' released
initialisation (``weight_init: glorot``) and ``ndr-ctl``'s 35k backward steps (``column_train``);
forward stays at 25k (``STEPS``). (The first report, 2026-11-25, used PyTorch's default
initialisation; the recipe then had 25k / 80k steps, as ``recipes/ndr-ctl-long.yaml``;
docs/reproductions/ndr-depth.md keeps its numbers.) The ``L20`` row (ours, no paper number) shows
whether our small model needs more steps than the thesis's d_model-256 one.
"""

from __future__ import annotations

from recombine.experiments.ndr_ctl import CPU_NDR, NDR_CTL
from recombine.experiments.reproduction import PaperNumber, Reproduction, Variant

LAYERS = (14, 12, 10, 8, 6, 4)  # the rows of Tab. 5.2
EXTRA_LAYERS = (20,)  # ours: beyond the thesis's depths


def _ndr(n_layers: int) -> Variant:
    return Variant(f"L{n_layers}", "ndr", {**CPU_NDR, "n_layers": n_layers, "test_layers": n_layers})


VARIANTS = tuple(_ndr(n) for n in (*EXTRA_LAYERS, *LAYERS))

# Thesis Tab. 5.2, "Test" columns (lengths 9-10), mean ± std over 5 seeds; (forward, backward).
_TEST = {
    14: ((1.00, 0.00), (1.00, 0.00)),
    12: ((1.00, 0.00), (0.99, 0.02)),
    10: ((0.75, 0.04), (0.62, 0.05)),
    8: ((0.23, 0.02), (0.24, 0.03)),
    6: ((0.22, 0.05), (0.15, 0.01)),
    4: ((0.14, 0.01), (0.13, 0.01)),
}
PAPER = {
    (f"L{n}", column): PaperNumber(*number)
    for n, (forward, backward) in _TEST.items()
    for column, number in (("forward", forward), ("backward", backward))
}

# Forward: the first report's 25k, although ndr-ctl's NDR selects its forward checkpoint at 4.5-8.5k:
# evaluated at its own depth, a shallower NDR's valid_ood was still rising at 10k (L12, default init:
# 0.82 / 0.90 / 0.99; test_ood selected up to 10k vs 25k: 0.21 / 0.27 / 0.69 vs 0.54 / 0.55 / 0.63).
# Backward: ndr-ctl's 35k (the released initialisation's budget there, with 6 extra evaluation steps);
# a cell that needs more is extended by re-running with more steps.
STEPS = {"forward": 25000, "backward": NDR_CTL.column_train["backward"]["steps"]}

SCALE_NOTE = (
    "CPU scale: the ndr-ctl NDR (d_model 64, 1 head, d_ff 128, dropout 0.1, the released layer's "
    "initialisation) with 4-14 (and 20) shared layers, each evaluated with its training depth; batch 64, "
    "AdamW lr 1e-3, weight decay 0.01, clip 5, "
    f"{STEPS['forward'] // 1000}k steps forward and {STEPS['backward'] // 1000}k backward, "
    "depth-balanced sampling. Paper (authors' layer-ablation sweep): d_model 256, batch 512, dropout 0.5, "
    "gate dropout 0.1, 30k steps."
)

NDR_DEPTH = Reproduction(
    name="ndr-depth",
    description="NDR layer-count ablation on longer CTL problems (thesis Tab. 5.2)",
    source="Csordás thesis, Tab. 5.2 (Test columns)",
    task=NDR_CTL.task,
    columns=NDR_CTL.columns,
    variants=VARIANTS,
    train={**NDR_CTL.train, "steps": STEPS["forward"], "eval_every": 1000},
    column_train={"backward": {"steps": STEPS["backward"]}},
    quick_train={"steps": 300, "eval_every": 100},
    quick_variants=("L14", "L6"),
    report_split=NDR_CTL.report_split,
    iid_split=NDR_CTL.iid_split,
    paper=PAPER,
    scale_note=SCALE_NOTE,
    row_axis="n_layers",
    depth_axis="number of functions",
)
