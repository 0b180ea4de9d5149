"""Shared fixtures: a private task cache, and a tiny CTL + model config for end-to-end tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECOMBINE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


TINY_RUN = [
    "task=ctl",
    "task.n_train=400",
    "task.n_valid_iid=50",
    "task.n_valid_ood=60",
    "task.n_test_ood=40",
    "model=ndr",
    "model.d_model=16",
    "model.n_heads=2",
    "model.d_ff=32",
    "model.n_layers=3",
    "train.steps=60",
    "train.batch_size=16",
    "train.eval_every=20",
    "train.log_every=10",
    "train.threads=1",
    "seed=3",
]
