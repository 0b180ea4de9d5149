"""Architecture grids of the Block-Operations paper (BLOCK A.2, A.2.1, A.2.3) and their aggregation per
architecture family and model-size bucket (BLOCK Tab. 4, Tab. 7).

"We used grid-search to generate different architectures. For FNNs we varied the number and size of
intermediate layers. For SMFRs we varied the number of MFNNR modules (depth) and the number of blocks in
each layer of neurons between the MFNNR modules (width). [...] We also varied the size of the FNNs inside
the MFNNR modules, but only to a lesser extent. For Transformers we varied the number of heads, the
internal dimensions, and the depth of the encoder and decoder." (BLOCK A.2)

:class:`BlockArchitectureGrid` holds one list per grid axis; :meth:`BlockArchitectureGrid.expand` turns
it into :class:`~recombine.experiments.block_digit_training.BlockArchitecture` s, the product of the
lists per family (an empty list disables its family). Two readings of ours:

* **Depth 0**: "A depth of zero means that only a single MFNNR is used to map the input blocks to the
  output blocks directly" (A.2), so the width has no effect there; a depth-0 SMFR is expanded once per
  (contained-FNN depth, routing), not once per width (the copies would be the same model trained with
  the same seed).
* **Transformer "internal dimensions"** (A.2.3: 400, 1200, 2000) are read as the feed-forward width
  ``d_ff``; ``d_model`` is not stated, we use one ``transformer_d_model`` (32 by default) for the whole
  grid, which puts our encoder-only models at 31k-807k parameters (paper: "roughly 20k to 500k").

Model-size buckets (:func:`size_bucket`) are those of A.2.1: "HIGH refers to all models with at least
200,000 parameters, LOW refers to models with less than 50,000 parameters, and MID refers to the rest."
The paper states them for Tab. 4 (add/mul); we use the same ones for Tab. 7 (ALGO), whose "model size
category" is not defined separately. :func:`aggregate_by_family_and_bucket` averages one number per
trial within each (family, bucket[, group]) cell, as in Tab. 4 and Tab. 7 ("averages over all models").
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recombine.errors import UserError, choices_hint
from recombine.experiments.block_digit_training import BlockArchitecture
from recombine.models.layers.multiplexer import ROUTING_KINDS
from recombine.models.smfr import BlockShape, build_block_model, count_parameters

#: BLOCK A.2.1: "HIGH refers to all models with at least 200,000 parameters"
HIGH_MIN_PARAMETERS = 200_000
#: BLOCK A.2.1: "LOW refers to models with less than 50,000 parameters, and MID refers to the rest"
LOW_BELOW_PARAMETERS = 50_000
#: the buckets in the column order of BLOCK Tab. 4 (HIGH, MID, LOW) and the row order of Tab. 7
SIZE_BUCKETS = ("high", "mid", "low")
#: family (``BlockArchitecture.family``) -> how reports name it
FAMILY_NAMES = {
    "fnn": "FNN",
    "transformer": "Transformer",
    "smfr_softmax": "SMFR softmax",
    "smfr_gumbel": "SMFR gumbel",
}


def size_bucket(n_parameters: int) -> str:
    """``"high"`` (>= 200,000 parameters), ``"low"`` (< 50,000) or ``"mid"`` (the rest); BLOCK A.2.1."""
    if n_parameters >= HIGH_MIN_PARAMETERS:
        return "high"
    if n_parameters < LOW_BELOW_PARAMETERS:
        return "low"
    return "mid"


def _positive(name: str, values: list[int]) -> None:
    if any(v < 1 for v in values):
        raise UserError(f"grid.{name} must hold integers >= 1, got {values}")
    if len(set(values)) != len(values):
        raise UserError(f"grid.{name} has repeated values: {values}")


@dataclass
class BlockArchitectureGrid:
    """One list per grid axis of BLOCK A.2; the product of a family's lists is its architectures.

    An empty list disables its family (e.g. ``transformer_heads=[]``: no Transformers)."""

    fnn_widths: list[int] = field(default_factory=list)  # hidden units per layer
    fnn_depths: list[int] = field(default_factory=list)  # hidden layers
    smfr_widths: list[int] = field(default_factory=list)  # blocks per intermediate layer
    smfr_depths: list[int] = field(default_factory=list)  # intermediate layers (depth + 1 MFNNRs)
    smfr_fnn_depths: list[int] = field(default_factory=list)  # hidden layers of each contained FNN
    smfr_routings: list[str] = field(default_factory=list)  # "softmax" / "gumbel" (A.2.1 "attention type")
    transformer_heads: list[int] = field(default_factory=list)
    transformer_dims: list[int] = field(default_factory=list)  # "internal dimensions", read as d_ff
    transformer_layers: list[int] = field(default_factory=list)
    transformer_d_model: int = 32  # not stated in the paper (module docstring)

    def __post_init__(self) -> None:
        for name in ("fnn_widths", "fnn_depths", "smfr_widths", "smfr_fnn_depths"):
            _positive(name, getattr(self, name))
        for name in ("transformer_heads", "transformer_dims", "transformer_layers"):
            _positive(name, getattr(self, name))
        if any(d < 0 for d in self.smfr_depths) or len(set(self.smfr_depths)) != len(self.smfr_depths):
            raise UserError(f"grid.smfr_depths must hold distinct integers >= 0, got {self.smfr_depths}")
        for routing in self.smfr_routings:
            if routing not in ROUTING_KINDS:
                raise UserError(
                    f"grid.smfr_routings: {routing!r} is not valid; {choices_hint(routing, ROUTING_KINDS)}"
                )
        if len(set(self.smfr_routings)) != len(self.smfr_routings):
            raise UserError(f"grid.smfr_routings has repeated values: {self.smfr_routings}")
        bad_heads = [h for h in self.transformer_heads if self.transformer_d_model % h]
        if self.transformer_d_model < 1 or bad_heads:
            raise UserError(
                f"grid.transformer_d_model={self.transformer_d_model} must be >= 1 and divisible by every "
                f"entry of transformer_heads (not by {bad_heads})"
            )

    # -- the paper's grids ----------------------------------------------------------------------------

    @classmethod
    def paper_interference(cls) -> BlockArchitectureGrid:
        """BLOCK A.2.1 (add/mul interference): FNN widths 100/200/300 x depths 2/3/4; SMFR stack widths
        1-7 x stack depths 1-3 x contained-FNN depths 1-3 x softmax / straight-through Gumbel-softmax.
        9 FNNs and 126 SMFRs, 14k-283k parameters (paper: "roughly 13k to 280k")."""
        return cls(
            fnn_widths=[100, 200, 300],
            fnn_depths=[2, 3, 4],
            smfr_widths=list(range(1, 8)),
            smfr_depths=[1, 2, 3],
            smfr_fnn_depths=[1, 2, 3],
            smfr_routings=["softmax", "gumbel"],
        )

    @classmethod
    def paper_algo(cls) -> BlockArchitectureGrid:
        """BLOCK A.2.3 (ALGO): FNN widths 100/200/300 x depths 2-6; Transformer heads 1/4/8 x internal
        dimensions 400/1200/2000 x 1-6 layers; SMFR stack widths 6/8/10 x stack depths 0-10 x
        contained-FNN depths 1-3 (softmax: A.2.3 lists no attention type). 15 FNNs, 54 Transformers,
        93 SMFRs (depth 0 once per contained-FNN depth)."""
        return cls(
            fnn_widths=[100, 200, 300],
            fnn_depths=[2, 3, 4, 5, 6],
            smfr_widths=[6, 8, 10],
            smfr_depths=list(range(11)),
            smfr_fnn_depths=[1, 2, 3],
            smfr_routings=["softmax"],
            transformer_heads=[1, 4, 8],
            transformer_dims=[400, 1200, 2000],
            transformer_layers=[1, 2, 3, 4, 5, 6],
        )

    @classmethod
    def algo_cpu_subset(cls) -> BlockArchitectureGrid:
        """The CPU-scale subset of :meth:`paper_algo` that ``recombine reproduce smfr-algo-grid`` trains:
        6 FNNs and 6 SMFRs with models in every size bucket, 2 small Transformers (LOW and MID; a HIGH
        one, >= 200k parameters, costs ~1,100 s alone); measured costs in docs/reproductions/smfr-grids.md.
        """
        return cls(
            fnn_widths=[100, 300],
            fnn_depths=[2, 4, 6],
            smfr_widths=[8],
            smfr_depths=[0, 1, 3],
            smfr_fnn_depths=[1, 2],
            smfr_routings=["softmax"],
            transformer_heads=[4],
            transformer_dims=[400],
            transformer_layers=[1, 2],
        )

    @classmethod
    def interference_cpu_subset(cls) -> BlockArchitectureGrid:
        """The CPU-scale subset of :meth:`paper_interference` that ``recombine reproduce
        smfr-interference-grid`` trains: all 9 FNNs and 24 of the 126 SMFRs (widths 2, 4, 7, the
        smallest and largest depth and contained-FNN depth, both routings), with models in every size
        bucket of every family; measured costs in docs/reproductions/smfr-grids.md."""
        return cls(
            fnn_widths=[100, 200, 300],
            fnn_depths=[2, 3, 4],
            smfr_widths=[2, 4, 7],
            smfr_depths=[1, 3],
            smfr_fnn_depths=[1, 3],
            smfr_routings=["softmax", "gumbel"],
        )

    # -- expansion ------------------------------------------------------------------------------------

    def expand(self, shape: BlockShape | None = None) -> list[BlockArchitecture]:
        """Every architecture of the grid: FNNs, then SMFRs, then Transformers.

        Labels: ``"FNN 3x200"`` (depth x width), ``"SMFR softmax d1 w6 f1"`` (stack depth, width,
        contained-FNN depth; ``"SMFR softmax d0 f1"`` at depth 0), ``"Transformer h4 d400 l2"`` (heads,
        d_ff, layers). With ``shape`` every architecture is built once, so a misfit fails here, naming it.
        """
        architectures = [
            BlockArchitecture(f"FNN {depth}x{width}", "fnn", {"width": width, "depth": depth})
            for width in self.fnn_widths
            for depth in self.fnn_depths
        ]
        for routing in self.smfr_routings:
            for depth in self.smfr_depths:
                widths: list[int | None] = [None] if depth == 0 else list(self.smfr_widths)
                if not self.smfr_widths:
                    widths = []
                for width in widths:
                    for fnn_depth in self.smfr_fnn_depths:
                        config: dict[str, Any] = {"depth": depth, "fnn_depth": fnn_depth, "routing": routing}
                        label = f"SMFR {routing} d{depth}"
                        if width is not None:
                            config["width"] = width
                            label += f" w{width}"
                        architectures.append(BlockArchitecture(f"{label} f{fnn_depth}", "smfr", config))
        architectures += [
            BlockArchitecture(
                f"Transformer h{heads} d{dims} l{layers}",
                "transformer",
                {"d_model": self.transformer_d_model, "n_heads": heads, "d_ff": dims, "n_layers": layers},
            )
            for heads in self.transformer_heads
            for dims in self.transformer_dims
            for layers in self.transformer_layers
        ]
        if shape is not None:
            for architecture in architectures:
                try:
                    build_block_model(architecture.model, shape, **architecture.model_config)
                except UserError as e:
                    raise UserError(f"grid architecture {architecture.label!r}: {e}") from None
        return architectures


def parameter_count(architecture: BlockArchitecture, shape: BlockShape) -> int:
    """The number of parameters of ``architecture`` built for ``shape`` (builds it once)."""
    return count_parameters(build_block_model(architecture.model, shape, **architecture.model_config))


@dataclass(frozen=True)
class GridValue:
    """One number of one trial: its family, model size and, optionally, a group (e.g. the threshold)."""

    family: str
    n_parameters: int
    value: float
    group: Hashable | None = None


@dataclass(frozen=True)
class BucketMean:
    """The mean of a cell of BLOCK Tab. 4 / Tab. 7 and the number of values behind it."""

    mean: float
    n: int

    def format(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} (n={self.n})"


def aggregate_by_family_and_bucket(
    values: Iterable[GridValue],
) -> dict[tuple[Any, ...], BucketMean]:
    """Mean and count per ``(family, bucket)``, or per ``(family, bucket, group)`` when the values carry
    a group (all or none of them must). Buckets from :func:`size_bucket`; empty cells are absent."""
    cells: dict[tuple[Any, ...], list[float]] = {}
    grouped: set[bool] = set()
    for v in values:
        grouped.add(v.group is not None)
        key: tuple[Any, ...] = (v.family, size_bucket(v.n_parameters))
        if v.group is not None:
            key += (v.group,)
        cells.setdefault(key, []).append(v.value)
    if len(grouped) > 1:
        raise ValueError("either every value has a group or none has")
    return {key: BucketMean(statistics.fmean(vs), len(vs)) for key, vs in cells.items()}


def format_cell(cell: BucketMean | None, digits: int = 3) -> str:
    """A table cell: ``"0.412 (n=3)"``, or ``"–, n=0"`` for a bucket without models."""
    return cell.format(digits) if cell is not None else "–, n=0"


#: finished trials of a grid run, one JSON object a line (:class:`TrialLog`)
TRIALS_FILE = "trials.jsonl"


def write_results_atomically(path: Path, data: dict[str, Any]) -> None:
    """``json.dumps(data)`` to ``path`` through a temporary file: a crash never leaves a half-written one."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def trial_key(settings: dict[str, Any]) -> str:
    """The identity of a trial: every setting that changes its result (model, config, seed, training)."""
    return json.dumps(settings, sort_keys=True, default=str)


class TrialLog:
    """The finished trials of a grid run, so that a re-run into the same directory resumes.

    Each finished trial is appended to ``path`` as one line ``{"key": ..., "record": ...}`` and flushed
    to disk at once; a crash loses at most the trial in progress. A line cut short by a crash is
    skipped when reading. ``key`` (:func:`trial_key`) holds every setting of the trial, so a trial of
    another config (other steps, another seed) is never taken for a finished one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def finished(self) -> dict[str, dict[str, Any]]:
        """key -> record of every complete line (the last one where a key repeats)."""
        records: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            return records
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
                records[entry["key"]] = entry["record"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        return records

    def add(self, key: str, record: dict[str, Any]) -> None:
        line = json.dumps({"key": key, "record": record}) + "\n"
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a line cut short by a crash: start a new one
                    line = "\n" + line
        with self.path.open("a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


__all__ = [
    "FAMILY_NAMES",
    "HIGH_MIN_PARAMETERS",
    "LOW_BELOW_PARAMETERS",
    "SIZE_BUCKETS",
    "TRIALS_FILE",
    "BlockArchitectureGrid",
    "BucketMean",
    "GridValue",
    "TrialLog",
    "aggregate_by_family_and_bucket",
    "format_cell",
    "parameter_count",
    "size_bucket",
    "trial_key",
]
