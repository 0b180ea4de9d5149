"""Named reproductions of the seeds' tables: ``recombine reproduce NAME``.

Two kinds: grids of ordinary runs (:class:`Reproduction`, e.g. ``ndr-ctl``) and experiments with their
own training loop (:class:`ScriptedReproduction`, e.g. ``smfr-algo``).
"""

from __future__ import annotations

import dataclasses

from recombine.errors import UserError, choices_hint
from recombine.experiments.block_architecture_grid import BlockArchitectureGrid
from recombine.experiments.ctlpp_ar import CTLPP_AR
from recombine.experiments.ctlpp_s import CTLPP_S
from recombine.experiments.dnc_ctl import DNC_CTL
from recombine.experiments.dnc_key_value import DNC_KEY_VALUE
from recombine.experiments.dnc_memory import DNC_ASSOC_RECALL, DNC_REPEAT_COPY
from recombine.experiments.gdrc_images import GDRCImagesConfig, run_gdrc_images
from recombine.experiments.gdrc_scan import GDRC_SCAN
from recombine.experiments.gdrc_toy import GDRCToyRunConfig, run_gdrc_toy
from recombine.experiments.hnet_goals import HNET_GOALS
from recombine.experiments.hnet_hyperteacher import HNET_HYPERTEACHER
from recombine.experiments.hnet_preferences import HNET_PREFERENCES
from recombine.experiments.hnet_teacher import HNET_TEACHER
from recombine.experiments.moe_lm import MoELMRunConfig, run_moe_lm
from recombine.experiments.ndr_arithmetic import NDR_ARITHMETIC
from recombine.experiments.ndr_ctl import NDR_CTL
from recombine.experiments.ndr_depth import NDR_DEPTH
from recombine.experiments.ndr_listops import NDR_LISTOPS
from recombine.experiments.reproduction import Reproduction
from recombine.experiments.scan_length import SCAN_LENGTH
from recombine.experiments.scripted_reproduction import ScriptedReproduction
from recombine.experiments.selection import SELECTION
from recombine.experiments.sim_diffusion import SIM_DIFFUSION
from recombine.experiments.sim_seeds import SIM_LINEAR, SIM_MLP
from recombine.experiments.smfr_algo import SMFRAlgoSeedsConfig, run_algo_seeds
from recombine.experiments.smfr_algo_grid import SMFRAlgoGridConfig, run_algo_grid
from recombine.experiments.smfr_bpmnist import SMFR_BPMNIST
from recombine.experiments.smfr_double_add import SMFRDoubleAddConfig, run_double_addition
from recombine.experiments.smfr_interference import SMFRInterferenceConfig, run_interference
from recombine.experiments.smfr_interference_grid import SMFRInterferenceGridConfig, run_interference_grid
from recombine.experiments.trafo_datasets import TRAFO_DATASETS
from recombine.probes.mask_analysis_addmul import MaskAddMulReproductionConfig, run_masks_addmul
from recombine.probes.mask_analysis_cnn import MaskCNNReproductionConfig, run_masks_cnn
from recombine.probes.mask_analysis_double_add import MaskDoubleAddReproductionConfig, run_masks_double_add
from recombine.probes.mask_analysis_math import MasksMathConfig, run_masks_math
from recombine.probes.mask_analysis_scan import MasksScanConfig, run_masks_scan
from recombine.probes.mask_analysis_transfer import MasksTransferConfig, run_masks_transfer

SCRIPTED = [
    ScriptedReproduction(
        "smfr-algo",
        "SMFR vs FNN vs Transformer on ALGO, OOD iteration counts (BLOCK Tab. 2)",
        "BLOCK 5.3, Tab. 2",
        SMFRAlgoSeedsConfig,
        run_algo_seeds,
        defaults={"base": {"steps": 40000, "eval_every": 2000}},
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
        "smfr-algo-grid",
        "ALGO over a CPU subset of the A.2.3 architecture grid, per family and model size "
        "(BLOCK Tab. 7, Tab. 2)",
        "BLOCK A.2.3, Tab. 7, Tab. 2, Fig. 4",
        SMFRAlgoGridConfig,
        run_algo_grid,
        defaults={
            "grid": dataclasses.asdict(BlockArchitectureGrid.algo_cpu_subset()),
            "base": {"steps": 20000, "eval_every": 2000},
        },
        quick={
            "grid": {  # FNN 1x300 / 2x300 / 4x300: one model per size bucket
                "fnn_widths": [300],
                "fnn_depths": [1, 2, 4],
                "smfr_widths": [2],
                "smfr_depths": [0, 1],
                "smfr_fnn_depths": [1],
                "smfr_routings": ["softmax"],
                "transformer_heads": [1],
                "transformer_dims": [16],
                "transformer_layers": [1],
                "transformer_d_model": 8,
            },
            "base": {"steps": 20, "eval_every": 10, "task": {"n_train": 256, "n_eval": 32}},
        },
    ),
    ScriptedReproduction(
        "smfr-interference-grid",
        "add/mul interference over a CPU subset of the A.2.1 architecture grid, per family and model size "
        "(BLOCK Tab. 4, Tab. 5)",
        "BLOCK A.2.1, Tab. 4, Tab. 5",
        SMFRInterferenceGridConfig,
        run_interference_grid,
        defaults={"grid": dataclasses.asdict(BlockArchitectureGrid.interference_cpu_subset())},
        quick={
            "grid": {  # FNN 1x300 / 2x300 / 4x300: one model per size bucket
                "fnn_widths": [300],
                "fnn_depths": [1, 2, 4],
                "smfr_widths": [1],
                "smfr_depths": [1],
                "smfr_fnn_depths": [1],
                "smfr_routings": ["softmax", "gumbel"],
            },
            "max_preparation_steps": 150,
            "interference_steps": 20,
            "training": {"lr": 0.01},  # reaches most thresholds within 150 steps
        },
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
    ScriptedReproduction(
        "masks-addmul",
        "weight masks on add/mul, FNN and LSTM: add and mul share the I/O layers more than hidden ones",
        "Csordás thesis 3.2.1, Fig. 3.1, 3.2, Tab. B.1",
        MaskAddMulReproductionConfig,
        run_masks_addmul,
        quick={
            "analysis": {
                "train_steps": 100,
                "mask": {"steps": 20},
                "model": {"hidden_sizes": [64, 64]},
                "lstm": {"hidden_size": 32},
                "task": {"n_train": 2000, "n_test": 200},
            }
        },
    ),
    ScriptedReproduction(
        "masks-transfer",
        "weight masks on permuted images, masks and weights trained together: little transfer between tasks, "
        "the output layer fills up first (Fig. 3.4, B.7)",
        "Csordás thesis 3.2.3, Fig. 3.4 and B.7",
        MasksTransferConfig,
        run_masks_transfer,
        quick={
            "analysis": {
                "steps_per_task": 20,
                "batch_size": 32,
                "model": {"hidden_sizes": [32, 32, 8]},
                "task": {"n_tasks": 3, "max_train": 400, "max_test": 200},
            }
        },
    ),
    ScriptedReproduction(
        "masks-cnn",
        "CNN class removal under weight masks: the removed class drops, the others barely (Fig. 3.7)",
        "Csordás thesis 3.4, Fig. 3.7, B.3.8",
        MaskCNNReproductionConfig,
        run_masks_cnn,
        quick={
            "analysis": {
                "train_steps": 100,
                "mask": {"steps": 20},
                "model": {"channels": [8, 8, 16, 16]},
                "removed_classes": [0, 1],
            }
        },
    ),
    ScriptedReproduction(
        "masks-scan",
        "weight masks on SCAN, LSTM and Transformer pretrained on the IID split: a mask trained on a "
        "split's train set fails its test set (Fig. 3.5)",
        "Csordás thesis 3.3, Fig. 3.5, B.3.7",
        MasksScanConfig,
        run_masks_scan,
        quick={
            "seeds": [0],
            "train_steps": 50,
            "mask_steps": 10,
            "batch_size": 32,
            "n_test": 100,
            "n_train_eval": 100,
            "lstm": {"embedding_size": 8, "encoder_size": 16, "decoder_size": 64},
            "transformer": {"d_model": 32, "d_ff": 64, "n_encoder_layers": 1, "n_decoder_layers": 1},
        },
    ),
    ScriptedReproduction(
        "masks-math",
        "weight masks on Mathematics modules, Transformer trained on all difficulties: a mask trained on the "
        "easy questions loses accuracy on the hard ones (Fig. 3.6)",
        "Csordás thesis 3.3, Fig. 3.6, B.3.7, Tab. B.3",
        MasksMathConfig,
        run_masks_math,
        quick={
            "seeds": [0],
            "train_steps": 200,
            "mask_steps": 100,
            "batch_size": 64,
            "n_train": 3000,
            "n_eval": 100,
            "transformer": {"d_model": 64, "d_ff": 128},
        },
    ),
    GDRC_SCAN,
    SIM_LINEAR,
    SIM_MLP,
    SIM_DIFFUSION,
    DNC_REPEAT_COPY,
    DNC_ASSOC_RECALL,
    DNC_KEY_VALUE,
    SMFR_BPMNIST,
    HNET_TEACHER,
    HNET_HYPERTEACHER,
    HNET_PREFERENCES,
    HNET_GOALS,
    SELECTION,
]

REPRODUCTIONS: dict[str, Reproduction | ScriptedReproduction] = {
    r.name: r
    for r in [
        NDR_CTL,
        DNC_CTL,
        NDR_DEPTH,
        NDR_ARITHMETIC,
        NDR_LISTOPS,
        CTLPP_AR,
        CTLPP_S,
        SCAN_LENGTH,
        TRAFO_DATASETS,
        *SCRIPTED,
    ]
}


def get(name: str) -> Reproduction | ScriptedReproduction:
    try:
        return REPRODUCTIONS[name]
    except KeyError:
        raise UserError(f"unknown reproduction {name!r}; {choices_hint(name, REPRODUCTIONS)}") from None


__all__ = ["REPRODUCTIONS", "Reproduction", "ScriptedReproduction", "get"]
