"""Sweep recipes: a grid in YAML (``recombine sweep RECIPE.yaml``), read into a :class:`Reproduction`.

A recipe is the YAML form of a reproduction (``Reproduction.to_recipe`` writes one)::

    name: ndr-ctl                      # required; also names the default output directory
    description: ...                   # optional texts for the report
    source: ...
    task: ctl                          # required: the task of every cell
    columns:                           # required: column label -> task overrides
      forward: {direction: forward}
      backward: {direction: backward}
    variants:                          # required: the table's rows
      - label: NDR
        model: {name: ndr, d_model: 64}
        train: {lr: 1.0e-3}            # optional: train overrides of this row
    seeds: 3                           # seeds 1..N (default 3)
    train: {steps: 10000, ...}         # train settings of every cell
    column_train:                      # optional: train overrides per column
      backward: {steps: 35000}
    quick_train: {steps: 600}          # what --quick overrides
    quick_variants: [NDR]              # rows run by --quick (default: all)
    report_split: test_ood             # the table's split (default test_ood)
    iid_split: valid_iid               # the IID column (default valid_iid)
    success_threshold: 0.95            # a seed succeeds at or above this accuracy
    paper:                             # optional: the paper's mean and std per row and column
      NDR: {forward: {mean: 1.0, std: 0.0}}      # (+ success_rate: 0.32 where the paper gives one)
    scale_note: ...
    heatmap: {y: shared_functions, x: shared_symbols}   # optional: columns form a grid over two
                                                        # task keys; the report draws heat maps
    row_axis: n_layers                 # optional: a model key every variant sets to a number; the
                                       # report plots accuracy against it
    depth_axis: number of functions    # optional: what the task's per-example group is; the report
                                       # breaks accuracy down by it, per split

A recipe with an ``experiment`` key instead names a scripted reproduction (an experiment with its own
training loop) and overrides of its config; see :mod:`recombine.experiments.scripted_reproduction`.

The recipe's structure is checked when it is read (one-line :class:`UserError` naming the valid
keys); the config of each cell is checked by its trial, so a cell with an invalid config fails as a
trial and the rest of the sweep still runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from recombine.errors import UserError, choices_hint
from recombine.experiments.reproduction import PaperNumber, Reproduction, Variant
from recombine.experiments.scripted_reproduction import ScriptedRecipe, ScriptedReproduction, scripted_recipe

REQUIRED = ("name", "task", "columns", "variants")
OPTIONAL = (
    "description",
    "source",
    "seeds",
    "train",
    "quick_train",
    "quick_variants",
    "report_split",
    "iid_split",
    "success_threshold",
    "paper",
    "scale_note",
    "column_train",
    "heatmap",
    "row_axis",
    "depth_axis",
)
VARIANT_KEYS = ("label", "model", "train")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a mapping, got {value!r}")
    return value


def _variant(data: Any, index: int) -> Variant:
    if not isinstance(data, dict):
        raise UserError(f"variants[{index}] must be a mapping with keys {', '.join(VARIANT_KEYS)}")
    for key in data:
        if key not in VARIANT_KEYS:
            raise UserError(f"unknown key {key!r} in variants[{index}]; {choices_hint(key, VARIANT_KEYS)}")
    model = data.get("model")
    model = {"name": model} if isinstance(model, str) else dict(_mapping(model, f"variants[{index}].model"))
    name = model.pop("name", None)
    if not name:
        raise UserError(f"variants[{index}] has no model name (model: {{name: ndr, ...}})")
    label = str(data.get("label", name))
    return Variant(label, str(name), model, dict(_mapping(data.get("train"), f"variants[{index}].train")))


def reproduction_from_recipe(data: Any, origin: str = "recipe") -> Reproduction:
    """Validate a parsed recipe (see the module docstring) into a :class:`Reproduction`."""
    if not isinstance(data, dict):
        raise UserError(f"{origin} must be a mapping with keys {', '.join(REQUIRED)}")
    if "variants" not in data and "model" in data:
        raise UserError(f"{origin} is a train recipe (use `recombine train {origin}`), not a sweep recipe")
    for key in data:
        if key not in REQUIRED + OPTIONAL:
            raise UserError(
                f"unknown recipe key {key!r} in {origin}; {choices_hint(key, REQUIRED + OPTIONAL)}"
            )
    for key in REQUIRED:
        if not data.get(key):
            raise UserError(f"{origin} has no {key!r}; a sweep recipe needs {', '.join(REQUIRED)}")
    if not isinstance(data["variants"], list):
        raise UserError(f"variants in {origin} must be a list of {{label, model, train}}")
    columns = {
        str(label): dict(_mapping(overrides, f"columns.{label}"))
        for label, overrides in _mapping(data["columns"], "columns").items()
    }
    column_train = {
        str(label): dict(_mapping(overrides, f"column_train.{label}"))
        for label, overrides in _mapping(data.get("column_train"), "column_train").items()
    }
    for label in column_train:
        if label not in columns:
            raise UserError(f"column_train column {label!r} is not a column; {choices_hint(label, columns)}")
    variants = tuple(_variant(v, i) for i, v in enumerate(data["variants"]))
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        raise UserError(f"variant labels in {origin} must be unique, got {', '.join(labels)}")
    seeds = data.get("seeds", 3)
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise UserError(f"seeds in {origin} must be an integer >= 1, got {seeds!r}")
    threshold = data.get("success_threshold", 0.95)
    if not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
        raise UserError(f"success_threshold in {origin} must be a number in [0, 1], got {threshold!r}")
    paper: dict[tuple[str, str], PaperNumber] = {}
    for label, row in _mapping(data.get("paper"), "paper").items():
        if label not in labels:
            raise UserError(f"paper row {label!r} is not a variant; {choices_hint(str(label), labels)}")
        for column, number in _mapping(row, f"paper.{label}").items():
            if column not in columns:
                raise UserError(
                    f"paper column {column!r} is not a column; {choices_hint(str(column), columns)}"
                )
            number = _mapping(number, f"paper.{label}.{column}")
            if not {"mean", "std"} <= set(number) <= {"mean", "std", "success_rate"}:
                raise UserError(
                    f"paper.{label}.{column} must be {{mean: M, std: S}} (+ success_rate), got {number!r}"
                )
            success = number.get("success_rate")
            paper[(label, column)] = PaperNumber(
                float(number["mean"]), float(number["std"]), None if success is None else float(success)
            )
    quick_variants = tuple(str(label) for label in data.get("quick_variants") or ())
    for label in quick_variants:
        if label not in labels:
            raise UserError(f"quick_variants entry {label!r} is not a variant; {choices_hint(label, labels)}")
    return Reproduction(
        name=str(data["name"]),
        description=str(data.get("description", "")),
        source=str(data.get("source", "")),
        task=str(data["task"]),
        columns=columns,
        variants=variants,
        train=dict(_mapping(data.get("train"), "train")),
        quick_train=dict(_mapping(data.get("quick_train"), "quick_train")),
        report_split=str(data.get("report_split", "test_ood")),
        iid_split=str(data.get("iid_split", "valid_iid")),
        paper=paper,
        success_threshold=float(threshold),
        scale_note=str(data.get("scale_note", "")),
        quick_variants=quick_variants,
        seeds=seeds,
        column_train=column_train,
        heatmap=_heatmap(data.get("heatmap"), columns, origin),
        row_axis=_row_axis(data.get("row_axis")),
        depth_axis=_depth_axis(data.get("depth_axis"), origin),
    )


def _row_axis(value: Any) -> str | None:
    """``row_axis: KEY``: a model key that every variant sets to its own number (checked by
    :class:`Reproduction`)."""
    return None if value is None else str(value)


def _depth_axis(value: Any, origin: str) -> str | None:
    """``depth_axis: LABEL``: what the task's per-example group is, as the report names it."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(
            f"depth_axis in {origin} must be a non-empty label (e.g. 'dependency depth'), got {value!r}"
        )
    return value


def _heatmap(value: Any, columns: dict[str, dict[str, Any]], origin: str) -> tuple[str, str] | None:
    """``heatmap: {y: KEY, x: KEY}``: two task keys set by every column, each column at its own
    (y, x) point of the grid."""
    if value is None:
        return None
    heatmap = _mapping(value, "heatmap")
    if set(heatmap) != {"y", "x"}:
        raise UserError(f"heatmap in {origin} must be {{y: TASK_KEY, x: TASK_KEY}}, got {heatmap!r}")
    y, x = str(heatmap["y"]), str(heatmap["x"])
    points: dict[tuple[str, str], str] = {}
    for column, overrides in columns.items():
        if y not in overrides or x not in overrides:
            raise UserError(f"column {column!r} does not set the heatmap keys {y!r} and {x!r}")
        point = (repr(overrides[y]), repr(overrides[x]))
        if point in points:
            raise UserError(f"columns {points[point]!r} and {column!r} are the same heatmap point {y}, {x}")
        points[point] = column
    return y, x


def load_sweep_recipe(path: str | Path) -> Reproduction | ScriptedRecipe:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"recipe {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UserError(f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if isinstance(data, dict) and "experiment" in data:
        from recombine.experiments import REPRODUCTIONS  # the registry imports this module

        return scripted_recipe(data, REPRODUCTIONS, str(path))
    return reproduction_from_recipe(data, str(path))


def recipe_yaml(reproduction: Reproduction | ScriptedReproduction, header: str = "") -> str:
    """The recipe of ``reproduction`` as YAML text (``header`` becomes leading comment lines)."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    body = yaml.safe_dump(reproduction.to_recipe(), sort_keys=False, allow_unicode=True, width=100)
    return comments + body
