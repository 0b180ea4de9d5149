"""A CTL++ variant-R NDR run small enough to train in seconds, for the representation probe tests."""

from __future__ import annotations

TINY_CTLPP = [
    "task=ctlpp",
    "task.variant=R",
    "task.n_functions=8",
    "task.max_length=3",
    "task.n_train=400",
    "task.n_test_iid=30",
    "task.n_valid_ood=30",
    "task.n_test_ood=30",
    "model=ndr",
    "model.d_model=16",
    "model.n_heads=2",
    "model.d_ff=32",
    "model.n_layers=3",
    "train.steps=20",
    "train.batch_size=16",
    "train.eval_every=20",
    "train.log_every=10",
    "train.threads=1",
    "seed=1",
]
