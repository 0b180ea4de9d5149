"""A one-stage curriculum: the first training steps draw only examples of chosen groups (depths).

``train.curriculum_depths=[1] train.curriculum_steps=15000`` trains the first 15,000 steps on the training
examples whose task-defined group is 1 (ListOps: the dependency depth, arithmetic: the tree depth, CTL and
PCFG SET: the number of functions, SCAN: the output length), then on the whole training split, sampled as
``train.sampling`` says throughout. The thesis trains without a curriculum; this is a CPU-scale aid.

Why: on ListOps at the CPU scale, sum modulo 10 (``SM``) is learned on depth-1 problems alone (after ~5k
steps for the LSTM, ~14.5k for the d_model-64 NDR) but not within the 10k-30k steps of the full mixture,
where an SM over plain digits is about one example in a hundred. The full set's depth-1 problems are only
~5 % SM, though: an 8k-step depth-1 curriculum did not teach the LSTM SM
(docs/reproductions/ndr-listops.md#sum-modulo-10-alone-2026-11-27). Which split a step draws from depends
only on the step, so a run stays deterministic and resumes identically across the switch.
"""

from __future__ import annotations

import numpy as np

from recombine.errors import UserError
from recombine.tasks.base import ClassificationSplit, Split


def split_groups(split: Split) -> np.ndarray:
    """The task-defined group of every example (a classification split's depth, a seq2seq split's group)."""
    return split.depth if isinstance(split, ClassificationSplit) else split.group


def curriculum_split(split: Split, depths: list[int]) -> Split:
    """The examples of ``split`` whose group is in ``depths`` (a UserError naming the groups there are when
    one of ``depths`` has no example)."""
    groups = split_groups(split)
    present = sorted({int(g) for g in np.unique(groups)} - {-1})
    missing = [depth for depth in depths if depth not in present]
    if missing:
        raise UserError(
            f"train.curriculum_depths {missing} has no training example; the training split's groups "
            f"are {present if present else 'none (this task has no groups)'}"
        )
    return split.take(np.flatnonzero(np.isin(groups, depths)))
