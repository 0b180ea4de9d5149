"""``recombine probe dnc-trace DIR``: the memory trace of any stored run of a DNC reproduction.

The DNC reproductions (``dnc-repeat-copy``, ``dnc-assoc-recall``) draw one trace figure per variant, of
their first seed on the first evaluation sequence. Every finished run keeps its weights
(``DIR/trials/*.pt``) and its full settings (the key of its line in ``DIR/trials.jsonl``: task, model,
training; :class:`~recombine.experiments.dnc_memory.StoredTrials`), so any other seed, variant or
evaluation sequence can be drawn afterwards without training: bit maps, write/read weightings, forward
links, read modes (thesis Figs. 2.3a, 2.4) and, for masked models, the read mask (Fig. 2.2b). Where a
directory holds several runs of one variant and seed (other steps or other settings), ``--steps`` or
``--run`` (the run's file name, as the error lists them) picks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recombine.errors import UserError, choices_hint
from recombine.probes.dnc_traces import MemoryTraceArrays, save_memory_trace

if TYPE_CHECKING:  # the experiments package imports the probes
    from recombine.experiments.dnc_memory import DNCSequenceConfig, MemoryTrainConfig, StoredTrials
    from recombine.models.dnc import DNC
    from recombine.tasks.memory_tasks import MemoryTaskConfig

#: the figure formats ``--out`` may name
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


@dataclass(frozen=True)
class StoredDNCRun:
    """One finished run of a DNC reproduction directory and the name of its weights file."""

    task: MemoryTaskConfig
    model: DNCSequenceConfig
    train: MemoryTrainConfig
    name: str  # the weights file's stem: <variant>-seed<S>-<digest>

    @property
    def label(self) -> str:
        return f"{self.name} ({self.train.steps} steps)"


def _store(directory: str | Path) -> StoredTrials:
    from recombine.experiments.block_architecture_grid import TRIALS_FILE
    from recombine.experiments.dnc_memory import StoredTrials

    store = StoredTrials(Path(directory))
    if not store.log.path.is_file():
        raise UserError(
            f"{directory} holds no {TRIALS_FILE}: not the output directory of a DNC reproduction "
            "(recombine reproduce dnc-repeat-copy / dnc-assoc-recall --out DIR)"
        )
    return store


def stored_runs(directory: str | Path) -> list[StoredDNCRun]:
    """Every finished run recorded in ``directory/trials.jsonl``, by variant, seed and steps."""
    store = _store(directory)
    runs = [
        StoredDNCRun(task, model, train, store.run_name(task, model, train))
        for task, model, train in store.finished()
    ]
    if not runs:
        raise UserError(f"{store.log.path} records no finished DNC run of this version of recombine")
    return sorted(runs, key=lambda run: (run.model.variant, run.train.seed, run.train.steps, run.name))


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
    """The trained model of ``run``, read back through the reproduction's own store."""
    from recombine.experiments.dnc_memory import UnreadableStoredRun

    try:
        stored = _store(directory).read(run.task, run.model, run.train)
    except UnreadableStoredRun as error:
        raise UserError(f"the weights of {run.name}: {error}") from None
    if stored is None:  # listed a moment ago: the log changed under us
        raise UserError(f"{run.name} is no longer recorded in {directory}")
    return stored.model


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
    title = (
        f"{run.model.variant} seed {run.train.seed}, {run.train.steps} steps, evaluation sequence {example}"
    )
    return save_memory_trace(arrays, path, head=head, title=title)
