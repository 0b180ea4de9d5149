"""Every recipe shipped in ``recipes/`` loads: a train recipe resolves to a valid run config, and so does
every cell of a grid recipe.

Recipes that are not the copy of a registered reproduction (``ndr-ctl-long``, ``ndr-ctl-gpu``,
``ndr-ctl-thesis``, ...) are checked nowhere else; a typo in a model field would otherwise surface only
when someone starts the sweep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recombine import run_config
from recombine.experiments.recipe import ScriptedRecipe, load_sweep_recipe
from recombine.experiments.reproduction import Reproduction

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RECIPE_FILES = sorted(RECIPES.glob("*.yaml"))


def test_recipes_are_found() -> None:
    assert len(RECIPE_FILES) >= 10


def is_train_recipe(path: Path) -> bool:
    data = run_config.load_recipe(path)
    return "model" in data and "variants" not in data


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda path: path.stem)
def test_recipe_loads_and_every_cell_resolves(path: Path) -> None:
    if is_train_recipe(path):
        resolved = run_config.resolve(run_config.load_recipe(path))
        assert resolved.train.steps > 0
        return
    recipe = load_sweep_recipe(path)
    assert isinstance(recipe, (Reproduction, ScriptedRecipe))
    if isinstance(recipe, ScriptedRecipe):
        return
    for quick in (False, True):
        for variant in recipe.select_variants(None, quick=quick):
            for column in recipe.select_columns(None):
                resolved = run_config.resolve(recipe.run_config(variant, column, seed=1, quick=quick))
                assert resolved.seed == 1
