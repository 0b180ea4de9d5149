"""Aggregation over seeds: mean, standard deviation, success rate.

The paper tables report mean ± std over seeds; the success rate (fraction of seeds at or above a
threshold) is printed beside it so a single lucky seed is never mistaken for the result.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SeedSummary:
    values: tuple[float, ...]
    mean: float
    std: float
    success_rate: float
    threshold: float

    @classmethod
    def of(cls, values: list[float], threshold: float) -> SeedSummary:
        if not values:
            raise ValueError("no values to summarise")
        if any(math.isnan(v) for v in values):  # a split some run did not evaluate: nothing to summarise
            return cls(tuple(values), math.nan, math.nan, math.nan, threshold)
        # sample std (ddof=1) like the papers' seed tables; 0 for a single seed
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        success = sum(v >= threshold for v in values) / len(values)
        return cls(tuple(values), statistics.fmean(values), std, success, threshold)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["values"] = list(self.values)
        data["n"] = len(self.values)
        return data

    def format(self) -> str:
        hits = round(self.success_rate * len(self.values))
        return f"{self.mean:.2f} ± {self.std:.2f} ({hits}/{len(self.values)})"
