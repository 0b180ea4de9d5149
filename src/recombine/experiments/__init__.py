"""Named reproductions of the seeds' tables: ``recombine reproduce NAME``.

Two kinds: grids of ordinary runs (:class:`Reproduction`, e.g. ``ndr-ctl``) and experiments with their
own training loop (:class:`ScriptedReproduction`, e.g. ``smfr-algo``).
"""

from __future__ import annotations

from recombine.errors import UserError, choices_hint
from recombine.experiments.dnc_ctl import DNC_CTL
from recombine.experiments.dnc_memory import DNC_ASSOC_RECALL, DNC_REPEAT_COPY
from recombine.experiments.gdrc_images import GDRCImagesConfig, run_gdrc_images
from recombine.experiments.gdrc_scan import GDRC_SCAN
from recombine.experiments.gdrc_toy import GDRCToyRunConfig, run_gdrc_toy
from recombine.experiments.moe_lm import MoELMRunConfig, run_moe_lm
from recombine.experiments.ndr_ctl import NDR_CTL
from recombine.experiments.reproduction import Reproduction
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.experiments.sim_diffusion import SIM_DIFFUSION
from recombine.experiments.sim_seeds import SIM_LINEAR, SIM_MLP
from recombine.experiments.smfr_algo import SMFRAlgoSeedsConfig, run_algo_seeds
from recombine.experiments.smfr_bpmnist import SMFR_BPMNIST
from recombine.experiments.smfr_double_add import SMFRDoubleAddConfig, run_double_addition
from recombine.experiments.smfr_interference import SMFRInterferenceConfig, run_interference
from recombine.probes.mask_analysis_double_add import MaskDoubleAddReproductionConfig, run_masks_double_add

SCRIPTED = [
    ScriptedReproduction(
        "smfr-algo",
        "SMFR vs FNN vs Transformer on ALGO, OOD iteration counts (BLOCK Tab. 2)",
        "BLOCK 5.3, Tab. 2",
        SMFRAlgoSeedsConfig,
        run_algo_seeds,
        defaults={"base": {"steps": 10000, "eval_every": 1000}},
        quick={"base": {"steps": 200, "eval_every": 100}},
    ),
    ScriptedReproduction(
        "smfr-double-add",
        "double addition with a restricted second pair: FNN fails OOD, SMFR can succeed (BLOCK 5.2)",
        "BLOCK 5.2",
        SMFRDoubleAddConfig,
        run_double_addition,
        quick={"steps": 200, "eval_every": 100},
    ),
    ScriptedReproduction(
        "smfr-interference",
        "add/mul negative interference after a dataset switch, SMFR vs FNN (BLOCK Tab. 1)",
        "BLOCK 5.1, Tab. 1",
        SMFRInterferenceConfig,
        run_interference,
        defaults={"max_preparation_steps": 8000},
        quick={"max_preparation_steps": 100, "interference_steps": 50, "check_every": 5},
    ),
    ScriptedReproduction(
        "gdrc-images",
        "image pairs, settings A and B: faster fitting, worse compositional generalization (GDRC Fig. 3a)",
        "GDRC 5.1, Fig. 3a",
        GDRCImagesConfig,
        run_gdrc_images,
        quick={"steps": 50, "eval_every": 25, "n_train": 640, "n_test": 200, "n_eval_train": 200},
    ),
    ScriptedReproduction(
        "gdrc-toy",
        "2-D toy: the decision boundary settles non-compositionally early (GDRC Figs. 5-6)",
        "GDRC 6, Figs. 5-6",
        GDRCToyRunConfig,
        run_gdrc_toy,
        quick={"steps": 64, "snapshot_steps": [0, 16, 64], "grid_size": 21},
    ),
    ScriptedReproduction(
        "moe-lm",
        "sigma-MoE vs the parameter-equal dense LM (+ Switch, S-BASE, top-K, PKM): bpc, FLOP share, speed",
        "Csordás thesis ch. 7, Tab. 7.3/7.4, Fig. 7.3, App. F",
        MoELMRunConfig,
        run_moe_lm,
        defaults={
            "variants": ["dense", "sigma_moe", "switch", "s_base", "topk", "pkm"],
            "seeds": [0, 1, 2],
            "other_rows_seeds": 1,
            "steps": 800,
            "eval_every": 200,
        },
        quick={
            "variants": ["dense", "sigma_moe"],
            "seeds": [0],
            "steps": 20,
            "eval_every": 10,
            "d_model": 32,
            "n_heads": 2,
            "n_layers": 2,
            "n_experts": 8,
            "expert_size": 8,
            "context": 16,
            "batch_size": 4,
            "speed_rounds": 1,
            "speed_steps": 1,
        },
    ),
    ScriptedReproduction(
        "masks-double-add",
        "weight masks on double addition: little sharing, inverted pair-1 masks keep pair 2 (Tab. 3.1)",
        "Csordás thesis 3.2.2, Tab. 3.1 and B.2",
        MaskDoubleAddReproductionConfig,
        run_masks_double_add,
        quick={
            "analysis": {"train_steps": 100, "mask": {"steps": 50}, "task": {"n_train": 2000, "n_test": 200}}
        },
    ),
    GDRC_SCAN,
    SIM_LINEAR,
    SIM_MLP,
    SIM_DIFFUSION,
    DNC_REPEAT_COPY,
    DNC_ASSOC_RECALL,
    SMFR_BPMNIST,
]

REPRODUCTIONS: dict[str, Reproduction | ScriptedReproduction] = {
    r.name: r for r in [NDR_CTL, DNC_CTL, *SCRIPTED]
}


def get(name: str) -> Reproduction | ScriptedReproduction:
    try:
        return REPRODUCTIONS[name]
    except KeyError:
        raise UserError(f"unknown reproduction {name!r}; {choices_hint(name, REPRODUCTIONS)}") from None


__all__ = ["REPRODUCTIONS", "Reproduction", "ScriptedReproduction", "get"]
