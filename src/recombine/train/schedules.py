"""Learning-rate schedules as multipliers of the base rate (for ``torch.optim.lr_scheduler.LambdaLR``)."""

from __future__ import annotations

import math
from collections.abc import Callable


def lr_multiplier(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """``constant`` (optional linear warm-up), ``noam`` (Vaswani et al. 2017: warm-up then
    inverse square root, normalised to 1 at the end of warm-up), ``cosine`` (warm-up, then decay to 0)."""
    warmup = max(warmup_steps, 0)

    def constant(step: int) -> float:
        return min(1.0, (step + 1) / warmup) if warmup else 1.0

    def noam(step: int) -> float:
        step = step + 1
        w = max(warmup, 1)
        return min(step / w, math.sqrt(w / step))

    def cosine(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return {"constant": constant, "noam": noam, "cosine": cosine}[schedule]
