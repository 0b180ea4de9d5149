"""A run's whole configuration: task, model, training, seed.

Sources, later ones winning: registry defaults (with preset defaults) < a YAML recipe < dotted
command-line overrides (``train.steps=3000 model.d_model=128``). ``task=ctl`` and ``model=ndr`` are
shorthands for ``task.name=ctl`` and ``model.name=ndr``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from recombine import models, tasks
from recombine.config_validation import build_config, validate_into
from recombine.errors import UserError, choices_hint

SCHEDULES = ("constant", "noam", "cosine")
SAMPLINGS = ("uniform", "depth_balanced")


@dataclass
class TrainConfig:
    steps: int = 3000
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 5.0
    schedule: str = "constant"
    warmup_steps: int = 0
    eval_every: int = 500
    eval_batch_size: int = 1024
    log_every: int = 50
    threads: int = 0  # 0: PyTorch's default
    sampling: str = "uniform"  # "depth_balanced": uniform over depths (groups), then within the depth
    label_smoothing: float = 0.0  # cross-entropy label smoothing (Szegedy et al., 2016); 0 = off
    # the first curriculum_steps steps draw only training examples of these groups (train/curriculum.py)
    curriculum_depths: list[int] = field(default_factory=list)
    curriculum_steps: int = 0
    # start the model from another run's weights (train/warm_start.py): its directory, and which checkpoint
    init_from: str = ""
    init_checkpoint: str = "last"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise UserError(
                f"unknown train.schedule {self.schedule!r}; {choices_hint(self.schedule, SCHEDULES)}"
            )
        if self.sampling not in SAMPLINGS:
            hint = choices_hint(self.sampling, SAMPLINGS)
            raise UserError(f"unknown train.sampling {self.sampling!r}; {hint}")
        for name in ("steps", "batch_size", "eval_every", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise UserError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise UserError(f"train.lr must be > 0, got {self.lr}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.init_checkpoint not in ("last", "best"):
            hint = choices_hint(self.init_checkpoint, ("last", "best"))
            raise UserError(f"unknown train.init_checkpoint {self.init_checkpoint!r}; {hint}")
        if self.init_checkpoint != "last" and not self.init_from:
            raise UserError(
                "train.init_checkpoint goes with train.init_from=RUN (the run whose weights to start from)"
            )
        if self.curriculum_steps < 0:
            raise UserError(f"train.curriculum_steps must be >= 0, got {self.curriculum_steps}")
        if bool(self.curriculum_steps) != bool(self.curriculum_depths):
            raise UserError(
                "train.curriculum_depths and train.curriculum_steps go together, e.g. "
                "train.curriculum_depths=[1] train.curriculum_steps=15000"
            )


@dataclass
class RunConfig:
    task_name: str
    task: Any
    model_name: str
    model: Any
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "task": {"name": self.task_name, **asdict(self.task)},
            "model": {"name": self.model_name, **asdict(self.model)},
            "train": asdict(self.train),
        }


TOP_LEVEL = ("task", "model", "train", "seed")


def _normalise(values: dict[str, Any]) -> dict[str, Any]:
    values = dict(values)
    for section in ("task", "model"):
        if isinstance(values.get(section), str):
            values[section] = {"name": values[section]}
    return values


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["task=ctl", "train.steps=10"]`` -> nested dict, values typed by YAML rules."""
    rewritten = []
    for item in overrides:
        if "=" not in item:
            raise UserError(f"override {item!r} is not of the form key=value (e.g. train.steps=3000)")
        key, value = item.split("=", 1)
        if key in ("task", "model"):
            key = f"{key}.name"
        rewritten.append(f"{key}={value}")
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist(rewritten))  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise UserError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None


def load_recipe(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"recipe {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UserError(f"recipe {path} must be a mapping with keys {', '.join(TOP_LEVEL)}")
    return _normalise(data)


def merge(*layers: dict[str, Any]) -> dict[str, Any]:
    merged = OmegaConf.merge(*(OmegaConf.create(_normalise(layer)) for layer in layers))
    return OmegaConf.to_container(merged)  # type: ignore[return-value]


def resolve(values: dict[str, Any]) -> RunConfig:
    """Validate a nested dict into a typed :class:`RunConfig` (one-line UserError on problems)."""
    values = _normalise(values)
    for key in values:
        if key not in TOP_LEVEL:
            raise UserError(f"unknown config section {key!r}; {choices_hint(key, TOP_LEVEL)}")
    sections: dict[str, dict[str, Any]] = {}
    for section in ("task", "model", "train"):
        part = values.get(section) or {}
        if not isinstance(part, dict):
            raise UserError(f"config section {section!r} must be a mapping, got {part!r}")
        sections[section] = dict(part)
    task_name = sections["task"].pop("name", None)
    model_name = sections["model"].pop("name", None)
    if not task_name:
        raise UserError(f"no task given (add task=NAME); valid choices: {', '.join(tasks.names())}")
    if not model_name:
        raise UserError(f"no model given (add model=NAME); valid choices: {', '.join(models.names())}")
    task_entry, model_entry = tasks.TASKS.get(str(task_name)), models.MODELS.get(str(model_name))
    seed = values.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    return RunConfig(
        task_name=task_entry.name,
        task=build_config(task_entry, sections["task"], "task"),
        model_name=model_entry.name,
        model=build_config(model_entry, sections["model"], "model"),
        train=validate_into(TrainConfig(), sections["train"], "train"),
        seed=seed,
    )


def extend_steps(config: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """Allow ``train.steps`` (only) to grow when continuing a run.

    With a constant or Noam schedule the learning rate at a step does not depend on the total, and
    the batch and dropout RNG streams simply continue, so a run extended from N to M steps is the
    same run as one trained for M steps from the start.
    """
    if not overrides:
        return config
    steps = overrides.get("train", {}).get("steps") if isinstance(overrides.get("train"), dict) else None
    if set(overrides) != {"train"} or set(overrides["train"]) != {"steps"} or not isinstance(steps, int):
        raise UserError("--resume takes only train.steps=N (to extend a run); other fields come from the run")
    if config.train.schedule == "cosine":
        raise UserError("a cosine schedule depends on train.steps: extending it would change the run")
    if steps < config.train.steps:
        raise UserError(f"train.steps={steps} is below the run's {config.train.steps} steps")
    config.train.steps = steps
    return config
