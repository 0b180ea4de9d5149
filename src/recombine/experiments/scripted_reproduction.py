"""A reproduction run by its own experiment function instead of the ``recombine train`` grid.

Some of the seeds' tables do not fit the grid of :mod:`recombine.experiments.reproduction` (a model
variant x task column x seed, each an ordinary classification or seq2seq run): the SMFR experiments
switch datasets mid-training, GDRC measures learning speed, the LM comparison times its rows after
training. Each of these lives in an experiment module with a config dataclass (with a ``seeds`` list)
and a function ``run(out_dir, config)`` that trains every trial and writes ``report.md`` and
``results.json`` into ``out_dir``. A :class:`ScriptedReproduction` names such a pair, so that
``recombine reproduce NAME [--seeds N] [--quick] [key=value ...]`` runs it like any other reproduction.
The resolved config is stored as ``OUT/experiment.yaml`` next to the report; ``recombine report OUT``
prints that report again.

As a recipe (``recipes/NAME.yaml``, run by ``recombine sweep``)::

    name: smfr-algo-long               # names the default output directory
    experiment: smfr-algo              # required: a registered scripted reproduction
    seeds: 5                           # optional: seeds 0..N-1 (default: the experiment's own)
    config: {base: {steps: 20000}}     # optional: overrides of the experiment's config
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from recombine.config_validation import validate_into
from recombine.errors import UserError
from recombine.runs.directory_lock import exclusive_use

#: the resolved config of a scripted reproduction, in its output directory
CONFIG_FILE = "experiment.yaml"
#: written when the experiment has finished and its report is complete
DONE_FILE = "experiment.done"


@dataclass(frozen=True)
class ScriptedReproduction:
    name: str
    description: str
    source: str
    config_class: type  # a dataclass; must have a ``seeds: list[int]`` field
    run: Callable[[Path, Any], Any]  # run(out_dir, config): trains, writes report.md and results.json
    defaults: dict[str, Any] = field(default_factory=dict)  # the published run's settings
    quick: dict[str, Any] = field(default_factory=dict)  # overrides for --quick (a pipeline check)
    # whether a finished run of the same config may be returned instead of running again (False for an
    # analysis of other directories, whose contents can change under the same config)
    reuse_finished: Callable[[Any], bool] = lambda config: True

    def __post_init__(self) -> None:
        names = {f.name for f in dataclasses.fields(self.config_class)}
        if "seeds" not in names:
            raise TypeError(f"{self.config_class.__name__} has no 'seeds' field")

    def to_recipe(self) -> dict[str, Any]:
        """This reproduction as a recipe (``recipes/NAME.yaml``; read back by :func:`scripted_recipe`)."""
        return {"name": self.name, "experiment": self.name, "config": dict(self.defaults)}

    def default_config(self) -> Any:
        return self.config_class()

    def resolve_config(self, seeds: int | None, quick: bool, overrides: dict[str, Any]) -> Any:
        """``defaults``, then --quick's overrides, then ``--seeds`` (seeds 0..N-1), then the user's."""
        layers: list[dict[str, Any]] = [self.defaults, self.quick if quick else {}]
        if seeds is not None:
            if seeds < 1:
                raise UserError("--seeds must be >= 1")
            layers.append({"seeds": list(range(seeds))})
        merged = OmegaConf.merge(*(OmegaConf.create(layer) for layer in [*layers, overrides]))
        config = validate_into(self.default_config(), OmegaConf.to_container(merged), self.name)
        if not config.seeds:
            raise UserError(f"{self.name}: seeds is empty; give at least one seed (e.g. --seeds 3)")
        return config


def run_scripted(
    reproduction: ScriptedReproduction,
    out: Path,
    seeds: int | None = None,
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
) -> Path:
    """Resolve the config, store it as ``out/experiment.yaml``, run the experiment; the report's path.

    A directory that already holds a finished run of the same config is not run again (its report is
    returned); delete it to start over. Any other earlier report there is removed before the run, so
    a report on disk always belongs to the config next to it.
    """
    config = reproduction.resolve_config(seeds, quick, overrides or {})
    config_text = OmegaConf.to_yaml(OmegaConf.structured(config))
    report = out / "report.md"
    if (
        reproduction.reuse_finished(config)
        and is_complete(out)
        and (out / CONFIG_FILE).read_text() == config_text
    ):
        on_event(f"{out} already holds a finished run of this config; delete it to run again")
        return report
    with exclusive_use(out):  # one process runs a reproduction directory at a time
        for stale in (report, out / "results.json", out / DONE_FILE):
            stale.unlink(missing_ok=True)
        (out / CONFIG_FILE).write_text(config_text)
        reproduction.run(out, config)
        if not report.exists():
            raise RuntimeError(f"reproduction {reproduction.name} wrote no report.md into {out}")
        results_path = out / "results.json"
        if results_path.exists():  # name the reproduction for `recombine report --index`
            results = json.loads(results_path.read_text())
            if isinstance(results, dict):
                results.setdefault("reproduction", reproduction.name)
                results.setdefault("source", reproduction.source)
                results_path.write_text(json.dumps(results, indent=2, allow_nan=True))
        (out / DONE_FILE).write_text(time.strftime("%Y-%m-%dT%H:%M:%S") + "\n")
    return report


def is_complete(out: Path) -> bool:
    """Whether ``out`` holds a scripted reproduction that ran to the end."""
    return (out / DONE_FILE).is_file() and (out / CONFIG_FILE).is_file() and (out / "report.md").is_file()


RECIPE_KEYS = ("name", "experiment", "seeds", "config", "description")


@dataclass(frozen=True)
class ScriptedRecipe:
    """A recipe naming a scripted reproduction, with its config overrides."""

    name: str
    reproduction: ScriptedReproduction
    config: dict[str, Any]  # overrides, applied after the reproduction's own defaults
    seeds: int | None = None

    def run(
        self,
        out: Path,
        seeds: int | None = None,
        quick: bool = False,
        on_event: Callable[[str], None] = lambda message: None,
    ) -> Path:
        """Run it; the recipe's ``config`` replaces the reproduction's defaults where both set a field."""
        chosen = seeds if seeds is not None else self.seeds
        return run_scripted(self.reproduction, out, chosen, quick, self.config, on_event)


def scripted_recipe(data: dict[str, Any], registry: dict[str, Any], origin: str = "recipe") -> ScriptedRecipe:
    """Read a recipe with an ``experiment`` key; ``registry`` maps names to reproductions."""
    unknown = sorted(set(data) - set(RECIPE_KEYS))
    if unknown:
        raise UserError(f"{origin}: unknown key {unknown[0]!r}; valid keys: {', '.join(RECIPE_KEYS)}")
    experiment = data["experiment"]
    known = {name: r for name, r in registry.items() if isinstance(r, ScriptedReproduction)}
    if experiment not in known:
        raise UserError(
            f"{origin}: experiment {experiment!r} is not a scripted reproduction; "
            f"valid choices: {', '.join(sorted(known))}"
        )
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise UserError(f"{origin}: config must be a mapping of overrides, got {type(config).__name__}")
    seeds = data.get("seeds")
    if seeds is not None and (not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1):
        raise UserError(f"{origin}: seeds must be an integer >= 1, got {seeds!r}")
    reproduction = known[experiment]
    reproduction.resolve_config(seeds, False, config)  # checks the overrides now, not after hours
    return ScriptedRecipe(str(data.get("name", experiment)), reproduction, config, seeds)
