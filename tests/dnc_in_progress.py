"""A tiny ``dnc-repeat-copy`` reproduction stopped part-way: one run kept, one killed after its first
checkpoint, as a reproduction spanning sessions leaves its output directory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from recombine.experiments.dnc_memory import (
    DNC_REPEAT_COPY,
    DNCRepeatCopyConfig,
    StoredTrials,
    model_and_train_configs,
    train_memory_task,
)
from recombine.experiments.scripted_reproduction import run_scripted
from tiny_dnc import TINY_DNC_REPRODUCTION

SETTINGS = {**TINY_DNC_REPRODUCTION, "steps": 6, "eval_every": 3, "variants": ["dnc_ds"], "seeds": [0]}


def stopped_reproduction(out: Path) -> Path:
    """``out`` with DNC-DS seed 0 kept (6 steps) and seed 1 of the same settings killed after its step-3
    checkpoint, which is left where the reproduction would resume it; the checkpoint's path."""
    run_scripted(DNC_REPEAT_COPY, out, overrides=SETTINGS)
    # the reproduction started again with seeds 0 and 1 and killed while training seed 1
    stored_config = out / "experiment.yaml"
    stored_config.write_text(stored_config.read_text().replace("seeds:\n- 0\n", "seeds:\n- 0\n- 1\n"))
    assert yaml.safe_load(stored_config.read_text())["seeds"] == [0, 1]
    config = DNCRepeatCopyConfig(**SETTINGS)
    model, train = model_and_train_configs(config)
    model = dataclasses.replace(model, variant="dnc_ds")
    second = dataclasses.replace(train, seed=1)
    checkpoint = StoredTrials(out).partial_path(config.task(), model, second)
    train_memory_task(config.task(), model, second, checkpoint=checkpoint)  # leaves its step-3 checkpoint
    for written_at_the_end in ("report.md", "results.json", "experiment.done"):  # seed 0's, gone on restart
        (out / written_at_the_end).unlink()
    return checkpoint
