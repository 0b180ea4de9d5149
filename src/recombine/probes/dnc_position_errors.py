"""``recombine probe dnc-errors DIR``: where in the answer the runs of a DNC reproduction go wrong.

Thesis Fig. 2.3a: on long repeated copy the DNC's output "is blurry. The problem is especially apparent
starting from t = 50" (sec. 2.3): following temporal links through a link matrix that every write blurs
gets worse the longer a sequence runs (sec. 2.2, "Sharpness enhancement"), and the reused cells of a memory
smaller than the sequence alias without de-allocation wiping them. A run's bit error on its evaluation set
averages that over every answer step. This probe splits it by **answer position**: the k-th step of a
sequence whose output is scored (its ``loss_mask``), so for repeated copy the k-th word of the repeats.

Every run of the directory (kept, or still training: its latest checkpoint; as ``recombine probe dnc-trace``
finds them, :func:`~recombine.probes.dnc_stored_trace.stored_runs`) answers the same ``sequences`` sequences
of its task (:func:`probe_batch`: fresh samples from a generator of their own, seeded by ``seed``; not held
out from training). The result per run: wrong bits and scored bits per answer position, whose sums give the
run's bit error on those sequences. Position k averages over the sequences with more than k answer steps
only, so late positions rest on few (and long) sequences: the table gives, per bin of positions, how many
sequences reach it, and the figure leaves out bins that fewer than ``min_sequences`` reach.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recombine.errors import UserError
from recombine.probes.dnc_stored_trace import FIGURE_SUFFIXES, StoredDNCRun
from recombine.runs.text_table import aligned_columns

if TYPE_CHECKING:
    import torch

    from recombine.tasks.memory_tasks import MemoryTaskBatch, MemoryTaskConfig

#: evaluated this many sequences at a time (the DNC's activations grow with batch x length x cells)
CHUNK = 64


@dataclass(frozen=True)
class PositionErrors:
    """One run's errors by answer position ``k`` (the k-th scored step of a sequence, from 0)."""

    run: StoredDNCRun  # a checkpointed run's ``at_step``: the step of the weights evaluated
    wrong: np.ndarray  # [P] wrong output bits at position k, over all sequences
    bits: np.ndarray  # [P] output bits scored at position k (sequences that reach it x output bits)
    outputs: int  # output bits per step

    @property
    def bit_error(self) -> float:
        return float(self.wrong.sum() / max(self.bits.sum(), 1))

    @property
    def sequences(self) -> np.ndarray:
        """[P] how many sequences have an answer step at position k."""
        return self.bits // self.outputs

    def binned(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(first position of each bin, bit error in it) for bins of ``width`` positions."""
        starts = np.arange(0, len(self.bits), width)
        wrong = np.add.reduceat(self.wrong, starts)
        bits = np.add.reduceat(self.bits, starts)
        return starts, wrong / np.maximum(bits, 1)


def answer_position_errors(
    logits: torch.Tensor, batch: MemoryTaskBatch, n_positions: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(wrong bits, scored bits) per answer position, for ``logits [B, T, Y]`` of ``batch``, with the
    evaluation's bit error's thresholding (:func:`~recombine.experiments.dnc_memory.wrong_answer_bits`);
    ``n_positions`` entries (default: the most answer steps of a sequence of ``batch``)."""
    from recombine.experiments.dnc_memory import wrong_answer_bits

    wrong = wrong_answer_bits(logits, batch).sum(-1)  # [B, T] wrong bits per step
    scored = batch.loss_mask.astype(bool)
    position = np.cumsum(scored, axis=1) - 1  # [B, T] index among the sequence's scored steps
    if n_positions is None:
        n_positions = int(scored.sum(1).max(initial=0))
    wrong_by_position = np.zeros(n_positions, dtype=np.int64)
    np.add.at(wrong_by_position, position[scored], wrong[scored])
    bits_by_position = np.bincount(position[scored], minlength=n_positions) * batch.targets.shape[-1]
    return wrong_by_position, bits_by_position


def probe_batch(task: MemoryTaskConfig, sequences: int, seed: int) -> MemoryTaskBatch:
    """The sequences every run of ``task`` answers: the same for every run, fresh samples from a generator of
    their own (``[seed, 5]``; a run's evaluation set is drawn from ``[train seed, 1]``), not held out: a
    sequence may also occur in a run's training batches or evaluation set."""
    from recombine.tasks.memory_tasks import sample_batch

    return sample_batch(task, sequences, np.random.default_rng([seed, 5]))


def position_errors(
    directory: str | Path, sequences: int = 256, seed: int = 0, progress: bool = False
) -> list[PositionErrors]:
    """Every stored run of ``directory`` (kept or checkpointed) on :func:`probe_batch`; ``progress``: a bar
    over the runs on a terminal."""
    import torch
    from tqdm import tqdm

    from recombine.experiments.dnc_memory import model_inputs
    from recombine.probes.dnc_stored_trace import load_checkpoint_model, load_model, stored_runs

    if sequences < 1:
        raise UserError(f"--sequences must be >= 1; got {sequences}")
    if seed < 0:
        raise UserError(f"--sequence-seed must be >= 0; got {seed}")
    results = []
    runs = stored_runs(directory)
    for run in tqdm(runs, desc="probing runs", disable=not (progress and sys.stderr.isatty()), leave=False):
        try:
            if run.at_step is not None:  # as the checkpoint stands now
                model, step = load_checkpoint_model(directory, run)
                run = dataclasses.replace(run, at_step=step)
            else:
                model = load_model(directory, run)
        except UserError as error:  # finished (checkpoint removed) or rewritten while probing: said, skipped
            print(f"{error}; left out", file=sys.stderr)
            continue
        batch = probe_batch(run.task, sequences, seed)
        n_positions = int(batch.loss_mask.sum(1).max())
        wrong_total, bits_total = np.zeros(n_positions, dtype=np.int64), np.zeros(n_positions, dtype=np.int64)
        for start in range(0, sequences, CHUNK):
            chunk = _rows(batch, slice(start, start + CHUNK))
            with torch.no_grad():
                logits, _ = model(model_inputs(chunk.inputs))
            wrong, bits = answer_position_errors(logits, chunk, n_positions)
            wrong_total += wrong
            bits_total += bits
        results.append(PositionErrors(run, wrong_total, bits_total, batch.targets.shape[-1]))
    if not results:
        raise UserError(f"no run of {directory} could be read")
    return results


def save_position_error_figure(
    results: list[PositionErrors], path: Path, width: int, min_sequences: int = 10
) -> Path:
    """Bit error per bin of ``width`` answer positions, one line per run (colour: variant, style: seed),
    without the bins whose first position fewer than ``min_sequences`` sequences reach."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r.run.model.variant for r in results))
    seeds = sorted({r.run.train.seed for r in results})
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    labels = _labels(results)
    for result, label in zip(results, labels, strict=True):
        starts, error = result.binned(width)
        middles = (starts + np.minimum(starts + width, len(result.bits)) - 1) / 2  # a last bin may be short
        shown = result.sequences[starts] >= min_sequences
        colour = f"C{variants.index(result.run.model.variant) % 10}"
        style = styles[seeds.index(result.run.train.seed) % len(styles)]
        ax.plot(middles[shown], error[shown], colour, ls=style, marker=".", lw=1.0, label=label)
    ax.set_xlabel(
        f"answer position (k-th scored output step; bins of {width}, reached by >= {min_sequences})"
    )
    ax.set_ylabel("bit error")
    ax.set_ylim(bottom=0)
    handles, labels_shown = ax.get_legend_handles_labels()
    fig.legend(handles, labels_shown, fontsize=7, ncol=len(variants), loc="lower center")  # below the curves
    legend_rows = -(-len(handles) // len(variants))
    fig.tight_layout(rect=(0.0, min(0.4, 0.01 + 0.045 * legend_rows), 1.0, 1.0))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_position_errors(results: list[PositionErrors], width: int) -> str:
    """A line per run: its bit error on the probe's sequences, then per bin of ``width`` positions; a last
    line per task: how many sequences reach each bin's first position."""
    n_positions = max(len(r.bits) for r in results)
    starts = range(0, n_positions, width)
    header = ["run", "bit error", *[f"{s}-{min(s + width, n_positions) - 1}" for s in starts]]
    rows = []
    for result, label in zip(results, _labels(results), strict=True):
        _, binned = result.binned(width)
        cells = [f"{e:.3f}" for e in binned] + ["-"] * (len(starts) - len(binned))
        rows.append([label, f"{result.bit_error:.4f}", *cells])
    for task in dict.fromkeys(r.run.task for r in results):
        reached = next(r for r in results if r.run.task == task).sequences
        counts = [str(reached[s]) if s < len(reached) else "0" for s in starts]
        which = (
            "sequences" if len({r.run.task for r in results}) == 1 else f"sequences ({type(task).__name__})"
        )
        rows.append([which, str(reached[0]), *counts])
    return aligned_columns([header, *rows])


def probe_position_errors(
    directory: str | Path,
    out: str | Path | None = None,
    sequences: int = 256,
    seed: int = 0,
    width: int = 16,
    min_sequences: int = 10,
) -> tuple[list[PositionErrors], Path]:
    """:func:`position_errors` and its figure (default ``DIR/probes/position_errors.png``)."""
    if width < 1 or min_sequences < 1:
        raise UserError(f"--bin and --min-sequences must be >= 1; got {width} and {min_sequences}")
    if out is not None and Path(out).suffix.lower() not in FIGURE_SUFFIXES:
        raise UserError(f"--out must end in one of {', '.join(FIGURE_SUFFIXES)}; got {out}")
    results = position_errors(directory, sequences, seed, progress=True)
    path = Path(out) if out is not None else Path(directory) / "probes" / "position_errors.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return results, save_position_error_figure(results, path, width, min_sequences)


def _labels(results: list[PositionErrors]) -> list[str]:
    """``<variant> seed <S> (<steps>)`` per run; with the run's name where two would read the same."""
    labels = []
    for result in results:
        run = result.run
        step = f"step {run.at_step}" if run.at_step is not None else f"{run.train.steps} steps"
        labels.append(f"{run.model.variant} seed {run.train.seed} ({step})")
    return [
        label if labels.count(label) == 1 else f"{label} {result.run.name}"
        for label, result in zip(labels, results, strict=True)
    ]


def _rows(batch: MemoryTaskBatch, rows: slice) -> MemoryTaskBatch:
    """Sequences ``rows`` of ``batch``, padded to the longest of them only."""
    steps = int(batch.lengths[rows].max())
    return dataclasses.replace(
        batch,
        inputs=batch.inputs[rows, :steps],
        targets=batch.targets[rows, :steps],
        loss_mask=batch.loss_mask[rows, :steps],
        lengths=batch.lengths[rows],
    )
