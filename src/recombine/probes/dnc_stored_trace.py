"""``recombine probe dnc-trace DIR``: the memory trace of any stored run of a DNC reproduction.

The DNC reproductions (``dnc-repeat-copy``, ``dnc-assoc-recall``, ``dnc-key-value``) draw one trace figure
per variant, of their first seed on the first evaluation sequence. Every finished run keeps its weights
(``DIR/trials/*.pt``) and its full settings (the key of its line in ``DIR/trials.jsonl``: task, model,
training; :class:`~recombine.experiments.dnc_memory.StoredTrials`), so any other seed, variant or
evaluation sequence can be drawn afterwards without training: bit maps, write/read weightings, forward
links, read modes (thesis Figs. 2.3a, 2.4) and, for masked models, the read mask (Fig. 2.2b). Where a
directory holds several runs of one variant and seed (other steps or other settings), ``--steps`` or
``--run`` (the run's file name, as the error lists them) picks one.

Runs still training are listed too: each keeps its last evaluation's weights in ``DIR/trials/partial/``
(:mod:`~recombine.experiments.dnc_trial_checkpoint`), and the settings of those the directory's
``experiment.yaml`` names are known, so a run of hours can be looked at midway.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recombine.config_validation import validate_into
from recombine.errors import UserError, choices_hint, first_line
from recombine.probes.dnc_traces import MemoryTraceArrays, save_memory_trace

if TYPE_CHECKING:  # the experiments package imports the probes
    from recombine.experiments.dnc_memory import (
        DNCComparisonConfig,
        DNCSequenceConfig,
        MemoryTrainConfig,
        StoredTrials,
    )
    from recombine.models.dnc import DNC
    from recombine.tasks.memory_tasks import MemoryTaskConfig

#: the figure formats ``--out`` may name
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


@dataclass(frozen=True)
class StoredDNCRun:
    """One finished run of a DNC reproduction directory, or one still training, and its file's name."""

    task: MemoryTaskConfig
    model: DNCSequenceConfig
    train: MemoryTrainConfig
    name: str  # the weights file's stem: <variant>-seed<S>-<digest>
    at_step: int | None = None  # a run still training: the step of its checkpoint

    @property
    def label(self) -> str:
        if self.at_step is not None:
            return f"{self.name} ({self.train.steps} steps, in progress: step {self.at_step})"
        return f"{self.name} ({self.train.steps} steps)"


def _store(directory: str | Path) -> StoredTrials:
    from recombine.experiments.block_architecture_grid import TRIALS_FILE
    from recombine.experiments.dnc_memory import StoredTrials

    store = StoredTrials(Path(directory))
    if not store.log.path.is_file() and not (store.out_dir / "trials" / "partial").is_dir():
        raise UserError(
            f"{directory} holds no {TRIALS_FILE}: not the output directory of a DNC reproduction "
            "(recombine reproduce dnc-repeat-copy / dnc-assoc-recall / dnc-key-value --out DIR)"
        )
    return store


def stored_runs(directory: str | Path) -> list[StoredDNCRun]:
    """Every finished run recorded in ``directory/trials.jsonl`` and every run still training there
    (:func:`runs_in_progress`), by variant, seed and steps."""
    store = _store(directory)
    finished = store.finished() if store.log.path.is_file() else []
    runs = [
        StoredDNCRun(task, model, train, store.run_name(task, model, train))
        for task, model, train in finished
    ]
    runs += runs_in_progress(directory)
    if not runs:
        raise UserError(f"{directory} holds no finished or training DNC run of this version of recombine")
    return sorted(runs, key=lambda run: (run.model.variant, run.train.seed, run.train.steps, run.name))


def runs_in_progress(directory: str | Path) -> list[StoredDNCRun]:
    """The runs of ``directory/experiment.yaml``'s reproduction that have a checkpoint and are not kept.

    A checkpoint's file name ends in the digest of its run's settings, so it is matched against the runs the
    reproduction's config names (each variant and seed), under every DNC reproduction's config class: only
    the exact settings give the same name. A checkpoint that matches no run of that config, or cannot be
    read, and an ``experiment.yaml`` that cannot be read are said on stderr, one line each."""
    import yaml

    from recombine.experiments.dnc_trial_checkpoint import load_training_state
    from recombine.experiments.scripted_reproduction import CONFIG_FILE

    store = _store(directory)
    partial = {path.stem: path for path in (store.out_dir / "trials" / "partial").glob("*.pt")}
    config_file = store.out_dir / CONFIG_FILE
    if not partial:
        return []
    try:
        values = yaml.safe_load(config_file.read_text())
        if not isinstance(values, dict):
            raise ValueError("not a mapping of settings")
        candidates = _runs_of_config(values, config_file.name, store)
    except (OSError, ValueError, yaml.YAMLError) as error:
        print(
            f"{config_file} cannot be read ({first_line(error)}): runs still training are not listed",
            file=sys.stderr,
        )
        return []
    kept = set(store.log.finished()) if store.log.path.is_file() else set()
    runs = []
    for name, path in sorted(partial.items()):
        run = candidates.get(name)
        state = load_training_state(path) if run is not None else None
        if run is None or state is None:
            why = "matches no run of experiment.yaml" if run is None else "cannot be read"
            print(f"checkpoint {path} {why}: not listed", file=sys.stderr)
        elif store.key(run.task, run.model, run.train) not in kept:  # else left over after keeping the run
            runs.append(dataclasses.replace(run, at_step=state.step))
    return runs


def _runs_of_config(values: dict[str, object], where: str, store: StoredTrials) -> dict[str, StoredDNCRun]:
    """Every run (variant x seed) of ``values`` read as each DNC reproduction's config, by run name."""
    runs: dict[str, StoredDNCRun] = {}
    for config in dnc_reproduction_configs(values, where):
        runs.update(runs_of_config(config, store))
    return runs


def dnc_reproduction_configs(values: dict[str, object], where: str) -> list[DNCComparisonConfig]:
    """``values`` (an ``experiment.yaml``) read as each DNC reproduction's config class that accepts it."""
    from recombine.experiments import REPRODUCTIONS
    from recombine.experiments.dnc_memory import DNCComparisonConfig, model_and_train_configs
    from recombine.experiments.scripted_reproduction import ScriptedReproduction

    config_classes = {
        r.config_class
        for r in REPRODUCTIONS.values()
        if isinstance(r, ScriptedReproduction) and issubclass(r.config_class, DNCComparisonConfig)
    }
    configs = []
    for config_class in sorted(config_classes, key=lambda cls: cls.__name__):
        try:
            config = validate_into(config_class(), values, where)
            config.task()  # validates the task's settings
            model_and_train_configs(config)  # and the model's and the training's
        except UserError:  # another reproduction's config, or settings this class refuses
            continue
        configs.append(config)
    return configs


def runs_of_config(config: DNCComparisonConfig, store: StoredTrials) -> dict[str, StoredDNCRun]:
    """The runs (variant x seed, in the config's order) of one DNC reproduction's config, by run name."""
    from recombine.experiments.dnc_memory import model_and_train_configs

    task, (model, train) = config.task(), model_and_train_configs(config)
    runs = {}
    for variant in config.variants:
        for seed in config.seeds:
            run_model = dataclasses.replace(model, variant=variant)
            run_train = dataclasses.replace(train, seed=seed)
            name = store.run_name(task, run_model, run_train)
            runs[name] = StoredDNCRun(task, run_model, run_train, name)
    return runs


def select_run(
    runs: list[StoredDNCRun],
    variant: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    name: str | None = None,
) -> StoredDNCRun:
    """The one run matching the given fields (None: any); a clear error naming what there is otherwise."""
    variants = sorted({run.model.variant for run in runs})
    if variant is not None and variant not in variants:
        raise UserError(f"no stored run of variant {variant!r}; {choices_hint(variant, variants)}")
    matching = [
        run
        for run in runs
        if (variant is None or run.model.variant == variant)
        and (seed is None or run.train.seed == seed)
        and (steps is None or run.train.steps == steps)
        and (name is None or run.name == Path(name).stem)
    ]
    if not matching:
        raise UserError(f"no stored run matches; stored: {'; '.join(run.label for run in runs)}")
    if len(matching) > 1:
        which = "; ".join(run.label for run in matching)
        raise UserError(
            f"{len(matching)} stored runs match ({which}); choose with --variant, --seed, --steps or --run"
        )
    return matching[0]


def load_model(directory: str | Path, run: StoredDNCRun) -> DNC:
    """The trained model of ``run``, read back through the reproduction's own store (a run still training:
    :func:`load_checkpoint_model`)."""
    from recombine.experiments.dnc_memory import UnreadableStoredRun

    if run.at_step is not None:
        return load_checkpoint_model(directory, run)[0]
    try:
        stored = _store(directory).read(run.task, run.model, run.train)
    except UnreadableStoredRun as error:
        raise UserError(f"the weights of {run.name}: {error}") from None
    if stored is None:  # listed a moment ago: the log changed under us
        raise UserError(f"{run.name} is no longer recorded in {directory}")
    return stored.model


def load_checkpoint_model(directory: str | Path, run: StoredDNCRun) -> tuple[DNC, int]:
    """The weights of ``run``'s checkpoint as it is now (training may have gone on since it was listed) and
    the step they are from."""
    from recombine.experiments.dnc_memory import build_sequence_dnc
    from recombine.experiments.dnc_trial_checkpoint import load_training_state

    state = load_training_state(_store(directory).partial_path(run.task, run.model, run.train))
    if state is None:  # kept and removed, or unreadable, since it was listed
        raise UserError(f"{run.name} has no readable checkpoint any more; it may have finished: run again")
    model = build_sequence_dnc(run.task, run.model)
    try:
        model.load_state_dict(state.model)
    except (RuntimeError, TypeError, AttributeError) as error:
        raise UserError(
            f"the checkpoint of {run.name} does not fit its settings ({first_line(error)})"
        ) from None
    return model.eval(), state.step


def stored_trace(
    directory: str | Path,
    *,
    variant: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    run_name: str | None = None,
    example: int = 0,
) -> tuple[StoredDNCRun, MemoryTraceArrays]:
    """The selected stored run and its trace on sequence ``example`` of its seed's evaluation set."""
    from recombine.experiments.dnc_memory import evaluation_sequence, trace_sequence

    run = select_run(stored_runs(directory), variant, seed, steps, run_name)
    if not 0 <= example < run.train.eval_size:
        raise UserError(f"--example must be in [0, {run.train.eval_size - 1}] (the run's evaluation set)")
    sequence = evaluation_sequence(run.task, run.train.seed, example)
    if run.at_step is not None:  # drawn as it stands now, which may be a later checkpoint than listed
        model, step = load_checkpoint_model(directory, run)
        return dataclasses.replace(run, at_step=step), trace_sequence(model, sequence)
    return run, trace_sequence(load_model(directory, run), sequence)


def draw_stored_trace(
    directory: str | Path,
    out: str | Path | None = None,
    *,
    variant: str | None = None,
    seed: int | None = None,
    steps: int | None = None,
    run_name: str | None = None,
    example: int = 0,
    head: int = 0,
) -> Path:
    """Draw :func:`stored_trace` of read head ``head``; the figure's path (default
    ``DIR/probes/trace_<variant>-seed<S>-<digest>_ex<example>.png``)."""
    if out is not None and Path(out).suffix.lower() not in FIGURE_SUFFIXES:
        raise UserError(f"--out must end in one of {', '.join(FIGURE_SUFFIXES)}; got {out}")
    run, arrays = stored_trace(
        directory, variant=variant, seed=seed, steps=steps, run_name=run_name, example=example
    )
    if not 0 <= head < run.model.n_read_heads:
        raise UserError(f"read head must be in [0, {run.model.n_read_heads - 1}]; got {head}")
    path = Path(out) if out is not None else Path(directory) / "probes" / f"trace_{run.name}_ex{example}.png"
    progress = f"step {run.at_step} of {run.train.steps} (in progress)"
    trained = progress if run.at_step is not None else f"{run.train.steps} steps"
    title = f"{run.model.variant} seed {run.train.seed}, {trained}, evaluation sequence {example}"
    return save_memory_trace(arrays, path, head=head, title=title)
