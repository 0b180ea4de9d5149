"""A one-column CTL grid recipe at the scale of :data:`conftest.TINY_RUN`, for sweep and device tests."""

from __future__ import annotations

from typing import Any

from conftest import TINY_RUN
from recombine.run_config import parse_overrides


def tiny_recipe(variants: list[dict[str, Any]], seeds: int = 1) -> dict[str, Any]:
    """A one-column CTL recipe at the scale of conftest.TINY_RUN."""
    tiny = parse_overrides(TINY_RUN)
    task = {key: value for key, value in tiny["task"].items() if key != "name"}
    model = {key: value for key, value in tiny["model"].items() if key != "name"}
    return {
        "name": "tiny",
        "task": "ctl",
        "columns": {"fwd": task},
        "variants": [
            {"label": v["label"], "model": {"name": "ndr", **model, **v.get("model", {})}}
            | ({"train": v["train"]} if "train" in v else {})
            for v in variants
        ],
        "seeds": seeds,
        "train": tiny["train"],
        "paper": {variants[0]["label"]: {"fwd": {"mean": 0.5, "std": 0.25}}},
        "success_threshold": 0.1,
    }
