"""Compatibility of learned symbol representations across CTL++ functions (thesis 6.3.1, Fig. 6.3, App. E.2).

Thesis 6.3.1 ("Analysis"): every CTL++ function is a bijection, so for an *output* symbol ``s'`` and a
function ``f`` there is exactly one input ``s`` with ``f(s) = s'``. Feeding the single application
``f s`` and taking "the vector of the layer beneath the final classification layer" (E.2.2: "the layer right
below the final classification layer") gives the representation ``r_f(s')`` of ``s'`` *at the output of*
``f``. For each ``s'`` the cosine similarities ``cos(r_f(s'), r_g(s'))`` over all pairs of functions form the
matrix of Fig. 6.3 / E.5-E.7; a model that generalises across groups learns one representation per symbol
(one block of ones), a failing one learns group-specific clusters ``C_1``, ``C_2``.

Here the representation is the input of the model's ``readout`` layer, captured with a forward pre-hook,
so the probe works for every classifier with a linear ``readout`` (Transformer/NDR: the final-layer state
of the read-out column; (Bi)LSTM, DNC: the final hidden state). The functions of each matrix are ordered
by agglomerative clustering of the cosine distance ``1 - cos`` (average linkage, optimal leaf order), and
cut into ``n_clusters`` flat clusters, numbered ``C_1, C_2, ...`` in the order they appear on the diagonal.

Quantitative analysis (thesis App. E.2.1, Fig. E.2), exactly as defined there: for one output symbol ``s'``,
"the proportion of correct output classifications, by taking the first function from a given cluster and the
second one from a given group, for all pairs of functions for each pair of the form (cluster, group)". For
every ordered pair ``(f_1, f_2)`` the model is fed the two-function composition that yields ``s'`` after
``f_1`` (start ``f_1^{-1}(s')``, target ``f_2(s')``); ``by_cluster[c, g]`` is the accuracy over ``f_1`` in
cluster ``c`` and ``f_2`` in group ``g`` (Fig. E.2a), ``by_group[g_1, g_2]`` the same with groups as
clusters (Fig. E.2b). Pairs with ``f_1 = f_2`` are included ("all pairs of functions").

Summaries that are ours, not the thesis's (one number per run, for tables over seeds): the mean cosine
similarity of distinct functions in the same group and in different groups, and the two-step accuracy of
cross-group and same-group pairs, each averaged over all output symbols.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.cluster.hierarchy import fcluster, leaves_list, linkage
from scipy.spatial.distance import squareform
from torch import nn

from recombine.errors import UserError, choices_hint
from recombine.probes.attention_maps import load_run_model_and_step
from recombine.tasks.base import TaskData

#: scipy linkage methods that accept an arbitrary (non-Euclidean) distance matrix
LINKAGE_METHODS = ("average", "complete", "single", "weighted")


# --- the equations, on arrays -------------------------------------------------------------------------


def cosine_similarity_matrix(representations: np.ndarray) -> np.ndarray:
    """``[n, d] -> [n, n]``: ``cos(r_i, r_j) = r_i . r_j / (|r_i| |r_j|)`` in float64 (thesis 6.3.1)."""
    r = np.asarray(representations, dtype=np.float64)
    norms = np.linalg.norm(r, axis=1, keepdims=True)
    unit = r / np.maximum(norms, 1e-12)
    return np.clip(unit @ unit.T, -1.0, 1.0)


def cluster_by_similarity(
    similarity: np.ndarray, n_clusters: int = 2, method: str = "average", min_distance: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Hierarchical clustering of a cosine-similarity matrix (the ordering of Fig. 6.3).

    Returns ``(order, labels)``: ``order`` the leaf order of the dendrogram over the distance ``1 - cos``
    (optimal leaf ordering), ``labels[i]`` the flat cluster of item ``i``, numbered ``0, 1, ...`` by first
    appearance along ``order`` (so ``C_1`` is the upper-left block). The tree is cut into at most
    ``n_clusters`` clusters, and clusters closer than ``min_distance`` (linkage distance, i.e. ``1 -`` the
    average cross-cluster cosine for average linkage) stay merged: a successful seed has one cluster per
    symbol (thesis 6.3.1), which a forced cut into two would hide. ``min_distance`` is our choice; the thesis
    identifies clusters by eye.
    """
    if method not in LINKAGE_METHODS:
        raise UserError(f"unknown linkage method {method!r}; {choices_hint(method, LINKAGE_METHODS)}")
    if n_clusters < 1:
        raise UserError(f"n_clusters must be >= 1, got {n_clusters}")
    if not 0.0 <= min_distance <= 2.0:
        raise UserError(f"min_distance must be in [0, 2] (a cosine distance), got {min_distance}")
    n = similarity.shape[0]
    if n == 1:
        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    distance = np.clip(1.0 - similarity, 0.0, 2.0)
    distance = (distance + distance.T) / 2
    np.fill_diagonal(distance, 0.0)
    tree = linkage(squareform(distance, checks=False), method=method, optimal_ordering=True)
    order = leaves_list(tree).astype(np.int64)
    by_count = fcluster(tree, t=n_clusters, criterion="maxclust")
    by_distance = fcluster(tree, t=min_distance, criterion="distance")
    # both are cuts of one tree: the one with fewer clusters is the coarser
    raw = by_count if len(set(by_count)) <= len(set(by_distance)) else by_distance
    renumber: dict[int, int] = {}
    for i in order:
        renumber.setdefault(int(raw[i]), len(renumber))
    return order, np.array([renumber[int(c)] for c in raw], dtype=np.int64)


def pair_accuracy(
    correct: np.ndarray, first_labels: np.ndarray, second_labels: np.ndarray, n_first: int, n_second: int
) -> np.ndarray:
    """Thesis E.2.1: ``out[a, b]`` = mean of ``correct[f_1, f_2]`` over ``first_labels[f_1] = a`` and
    ``second_labels[f_2] = b`` (NaN for an empty cell). ``correct`` is ``[F, F]``: first function x second."""
    first_onehot = np.eye(n_first)[first_labels]  # [F, n_first]
    second_onehot = np.eye(n_second)[second_labels]  # [F, n_second]
    hits = first_onehot.T @ correct.astype(np.float64) @ second_onehot
    pairs = np.outer(first_onehot.sum(0), second_onehot.sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, hits / np.maximum(pairs, 1), np.nan)


# --- results --------------------------------------------------------------------------------------------


@dataclass
class SymbolCompatibility:
    """Fig. 6.3 and Fig. E.2 for one output symbol ``s'``; function axes in the task's function order."""

    symbol: str
    similarity: np.ndarray  # [F, F] cos(r_f(s'), r_g(s'))
    order: np.ndarray  # [F] function indices in dendrogram leaf order (the figure's axis order)
    clusters: np.ndarray  # [F] flat cluster of each function, 0 = C_1
    correct: np.ndarray  # [F, F] bool: f_2(f_1(f_1^-1(s'))) classified correctly (first x second)
    by_cluster: np.ndarray  # [n_clusters, n_groups] Fig. E.2a
    by_group: np.ndarray  # [n_groups, n_groups] Fig. E.2b

    @property
    def n_clusters(self) -> int:
        return int(self.clusters.max()) + 1


@dataclass
class RepresentationCompatibility:
    """The probe's result for every output symbol of a CTL++ run."""

    function_names: list[str]
    group_names: list[str]
    function_groups: np.ndarray  # [F] index into group_names
    symbols: list[SymbolCompatibility]
    linkage_method: str = "average"
    notes: dict[str, Any] = field(default_factory=dict)

    def pair_mask(self, same_group: bool) -> np.ndarray:
        """``[F, F]`` bool: the pairs of functions from the same (or from different) groups."""
        same = self.function_groups[:, None] == self.function_groups[None, :]
        return same if same_group else ~same

    def mean_similarity(self, same_group: bool) -> float:
        """Mean cosine similarity of distinct functions in the same (or in different) groups, over symbols."""
        mask = self.pair_mask(same_group) & ~np.eye(len(self.function_names), dtype=bool)
        return float(np.mean([s.similarity[mask].mean() for s in self.symbols]))

    def pair_accuracy(self, same_group: bool) -> float:
        """Two-step accuracy over all pairs ``(f_1, f_2)`` from the same (or from different) groups."""
        mask = self.pair_mask(same_group)
        return float(np.mean([s.correct[mask].mean() for s in self.symbols]))

    def summary(self) -> dict[str, float]:
        return {
            "similarity_within_groups": self.mean_similarity(same_group=True),
            "similarity_across_groups": self.mean_similarity(same_group=False),
            "accuracy_within_groups": self.pair_accuracy(same_group=True),
            "accuracy_across_groups": self.pair_accuracy(same_group=False),
            "mean_clusters": float(np.mean([s.n_clusters for s in self.symbols])),
        }

    def to_json(self) -> dict[str, Any]:
        def cells(matrix: np.ndarray) -> list[list[float | None]]:
            return [[None if np.isnan(v) else float(v) for v in row] for row in matrix]

        return {
            "functions": self.function_names,
            "groups": {
                g: [f for f, i in zip(self.function_names, self.function_groups, strict=True) if i == k]
                for k, g in enumerate(self.group_names)
            },
            "linkage": self.linkage_method,
            "summary": self.summary(),
            "notes": self.notes,
            "symbols": {
                s.symbol: {
                    "order": [self.function_names[i] for i in s.order],
                    "clusters": {
                        f"C_{c + 1}": [self.function_names[i] for i in s.order if s.clusters[i] == c]
                        for c in range(s.n_clusters)
                    },
                    "accuracy_by_cluster": cells(s.by_cluster),
                    "accuracy_by_group": cells(s.by_group),
                    "similarity": np.round(s.similarity, 4).tolist(),
                }
                for s in self.symbols
            },
        }

    def summary_table(self) -> str:
        """Markdown: one row per symbol (clusters found, E.2b cells, mean cross-group similarity)."""
        groups = self.group_names
        cross = self.pair_mask(same_group=False)
        head = ["symbol", "clusters", *(f"acc {a}->{b}" for a in groups for b in groups), "cos across groups"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in self.symbols:
            accuracies = [f"{s.by_group[i, j]:.2f}" for i in range(len(groups)) for j in range(len(groups))]
            row = [s.symbol, str(s.n_clusters), *accuracies, f"{s.similarity[cross].mean():.2f}"]
            lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines)


# --- the probe on a model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CTLPPTables:
    table: np.ndarray  # [F, S] table[f, s] = f(s)
    function_ids: np.ndarray  # [F] input-vocabulary ids of the functions
    symbol_ids: np.ndarray  # [S] input-vocabulary ids of the symbols
    output_ids: np.ndarray  # [S] output-vocabulary ids of the symbols
    function_names: list[str]
    symbol_names: list[str]
    group_names: list[str]
    function_groups: np.ndarray  # [F]
    backward: bool


def _ctlpp_tables(task: TaskData) -> _CTLPPTables:
    meta = task.metadata
    if not all(key in meta for key in ("functions", "function_names", "symbols", "groups", "direction")):
        raise UserError(
            f"representation compatibility needs a CTL++ run (task=ctlpp); this run's task is {task.name!r}"
        )
    names: list[str] = list(meta["function_names"])  # type: ignore[call-overload]
    symbols: list[str] = list(meta["symbols"])  # type: ignore[call-overload]
    groups: dict[str, list[str]] = meta["groups"]  # type: ignore[assignment]
    position = {name: i for i, name in enumerate(names)}
    function_groups = np.full(len(names), -1, dtype=np.int64)
    for k, members in enumerate(groups.values()):
        function_groups[[position[f] for f in members]] = k
    return _CTLPPTables(
        table=np.asarray(meta["functions"], dtype=np.int64),
        function_ids=np.array([task.input_vocab.index(f) for f in names], dtype=np.int64),
        symbol_ids=np.array([task.input_vocab.index(s) for s in symbols], dtype=np.int64),
        output_ids=np.array([task.output_vocab.index(s) for s in symbols], dtype=np.int64),
        function_names=names,
        symbol_names=symbols,
        group_names=list(groups),
        function_groups=function_groups,
        backward=meta["direction"] == "backward",
    )


def _problem_ids(tables: _CTLPPTables, starts: np.ndarray, funcs: np.ndarray) -> np.ndarray:
    """``[n, 1 + L]`` input ids of problems (start symbol, functions in application order), presented in
    the task's direction (backward: ``f_L .. f_1 s``)."""
    ids = np.concatenate([tables.symbol_ids[starts][:, None], tables.function_ids[funcs]], axis=1)
    return ids[:, ::-1].copy() if tables.backward else ids


def _readout_layer(model: nn.Module) -> nn.Module:
    readout = getattr(model, "readout", None)
    if not isinstance(readout, nn.Linear):
        raise UserError(
            f"{type(model).__name__} has no linear `readout` layer; the probe reads its input "
            "(thesis E.2.2: the layer right below the final classification layer)"
        )
    return readout


@torch.no_grad()
def _forward(model: nn.Module, ids: np.ndarray, batch_size: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """``(predicted output ids [n], readout inputs [n, d])`` of equal-length inputs, in eval mode."""
    captured: list[torch.Tensor] = []
    handle = _readout_layer(model).register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    was_training = model.training
    model.eval()
    predictions = []
    try:
        for start in range(0, len(ids), batch_size):
            chunk = torch.as_tensor(ids[start : start + batch_size])
            logits = model(chunk, torch.full((len(chunk),), chunk.shape[1], dtype=torch.long))
            predictions.append(logits.argmax(-1))
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(predictions).numpy(), torch.cat(captured).double().numpy()


def symbol_representations(model: nn.Module, task: TaskData) -> np.ndarray:
    """``[S, F, d]``: ``out[s', f]`` = readout input for ``f s`` with ``f(s) = s'`` (thesis 6.3.1)."""
    tables = _ctlpp_tables(task)
    n_functions, n_symbols = tables.table.shape
    inverse = np.argsort(tables.table, axis=1)  # inverse[f, s'] = s with f(s) = s'
    outputs, funcs = np.meshgrid(np.arange(n_symbols), np.arange(n_functions), indexing="ij")
    starts = inverse[funcs.ravel(), outputs.ravel()]
    _, representations = _forward(model, _problem_ids(tables, starts, funcs.ravel()[:, None]))
    return representations.reshape(n_symbols, n_functions, -1)


def two_step_correct(model: nn.Module, task: TaskData) -> np.ndarray:
    """``[S, F, F]`` bool: ``out[s', f_1, f_2]`` = the model classifies ``f_2(f_1(s))`` correctly, where
    ``s = f_1^{-1}(s')`` (thesis E.2.1: first function, then second)."""
    tables = _ctlpp_tables(task)
    n_functions, n_symbols = tables.table.shape
    inverse = np.argsort(tables.table, axis=1)
    grid = np.meshgrid(np.arange(n_symbols), np.arange(n_functions), np.arange(n_functions), indexing="ij")
    outputs, first, second = (axis.ravel() for axis in grid)
    starts = inverse[first, outputs]
    predictions, _ = _forward(model, _problem_ids(tables, starts, np.stack([first, second], axis=1)))
    targets = tables.output_ids[tables.table[second, outputs]]
    return (predictions == targets).reshape(n_symbols, n_functions, n_functions)


def compatibility_from_model(
    model: nn.Module, task: TaskData, n_clusters: int = 2, method: str = "average", min_distance: float = 0.1
) -> RepresentationCompatibility:
    """Fig. 6.3 matrices, their clustering and the E.2.1 accuracies for every output symbol."""
    tables = _ctlpp_tables(task)
    representations = symbol_representations(model, task)
    correct = two_step_correct(model, task)
    n_groups = len(tables.group_names)
    results = []
    for k, symbol in enumerate(tables.symbol_names):
        similarity = cosine_similarity_matrix(representations[k])
        order, clusters = cluster_by_similarity(similarity, n_clusters, method, min_distance)
        n_found = int(clusters.max()) + 1
        results.append(
            SymbolCompatibility(
                symbol=symbol,
                similarity=similarity,
                order=order,
                clusters=clusters,
                correct=correct[k],
                by_cluster=pair_accuracy(correct[k], clusters, tables.function_groups, n_found, n_groups),
                by_group=pair_accuracy(
                    correct[k], tables.function_groups, tables.function_groups, n_groups, n_groups
                ),
            )
        )
    return RepresentationCompatibility(
        function_names=tables.function_names,
        group_names=tables.group_names,
        function_groups=tables.function_groups,
        symbols=results,
        linkage_method=method,
        notes={
            "representation": f"input of {type(model).__name__}.readout for the single application 'f s'",
            "min_distance": min_distance,
        },
    )


def representation_compatibility(
    run_dir: str | Path,
    checkpoint: str = "best",
    n_clusters: int = 2,
    method: str = "average",
    min_distance: float = 0.1,
) -> RepresentationCompatibility:
    """The probe on a trained CTL++ run directory (``best`` or ``last`` checkpoint)."""
    model, task, step = load_run_model_and_step(run_dir, checkpoint)
    result = compatibility_from_model(model, task, n_clusters, method, min_distance)
    result.notes["run"] = str(run_dir)
    result.notes["checkpoint"] = checkpoint
    result.notes["step"] = step
    result.notes["variant"] = task.metadata.get("variant")
    return result


# --- figures and files ----------------------------------------------------------------------------------

#: group colours: G_a red and G_b blue as in thesis Figs. E.5-E.7, then matplotlib's tab10 order
_GROUP_COLOURS = {"a": "tab:red", "b": "tab:blue"}
_OTHER_COLOURS = ("tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _group_colours(group_names: list[str]) -> list[str]:
    others = iter(_OTHER_COLOURS * (1 + len(group_names) // len(_OTHER_COLOURS)))
    return [_GROUP_COLOURS.get(g) or next(others) for g in group_names]


def save_figure(
    result: RepresentationCompatibility, path: str | Path, symbols: list[str] | None = None, title: str = ""
) -> Path:
    """Fig. 6.3 / E.5-E.7: the clustered cosine-similarity matrix of each symbol (default: all), tick labels
    coloured by function group (G_a red, G_b blue), flat clusters outlined on the diagonal; one colour
    scale from the lowest similarity shown to 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    by_name = {s.symbol: s for s in result.symbols}
    unknown = [s for s in symbols or [] if s not in by_name]
    if unknown:
        raise UserError(f"unknown symbol {unknown[0]!r}; valid choices: {', '.join(by_name)}")
    chosen = [by_name[s] for s in symbols] if symbols else result.symbols
    colours = _group_colours(result.group_names)
    lowest = min(float(entry.similarity.min()) for entry in chosen)  # one colour scale for all panels
    if lowest >= 1.0:
        lowest = 0.0
    n_cols = min(4, len(chosen))
    n_rows = -(-len(chosen) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.6 * n_cols, 3.6 * n_rows + 0.5), squeeze=False)
    image = None
    for ax, entry in zip(axes.flat, chosen, strict=False):
        order = entry.order
        image = ax.imshow(entry.similarity[np.ix_(order, order)], vmin=lowest, vmax=1, cmap="viridis")
        labels = [result.function_names[i] for i in order]
        positions = np.arange(len(order))
        ax.set_xticks(positions, labels, fontsize=5, rotation=90 if max(map(len, labels)) > 1 else 0)
        ax.set_yticks(positions, labels, fontsize=5)
        for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
            for tick, f in zip(ticks, order, strict=True):
                tick.set_color(colours[int(result.function_groups[f])])
        sorted_clusters = entry.clusters[order]
        for c in range(entry.n_clusters):
            members = np.flatnonzero(sorted_clusters == c)
            corner = (members[0] - 0.5, members[0] - 0.5)  # a flat cluster is contiguous in leaf order
            ax.add_patch(
                Rectangle(corner, len(members), len(members), fill=False, edgecolor="red", linewidth=1.2)
            )
            ax.text(members[0], members[0] - 0.8, f"C_{c + 1}", fontsize=6)
        ax.set_title(f"symbol '{entry.symbol}'", fontsize=9)
    for ax in list(axes.flat)[len(chosen) :]:
        ax.axis("off")
    legend = ", ".join(
        f"G_{g}: {c.removeprefix('tab:')}" for g, c in zip(result.group_names, colours, strict=True)
    )
    caption = f"{title} cosine similarity of a symbol's representation after each function ({legend})"
    fig.suptitle(caption.strip(), fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.02)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def least_compatible_symbol(result: RepresentationCompatibility) -> str:
    """The symbol with the lowest cross-group two-step accuracy (the most telling Fig. E.2)."""
    cross = result.pair_mask(same_group=False)
    return min(result.symbols, key=lambda s: s.correct[cross].mean()).symbol


def save_compatibility_figure(
    result: RepresentationCompatibility, path: str | Path, symbol: str | None = None
) -> Path:
    """Fig. E.2 for one symbol (default: :func:`least_compatible_symbol`): two-step accuracy with the first
    function from a cluster (a) or group (b) (rows) and the second from a group (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = symbol if symbol is not None else least_compatible_symbol(result)
    by_name = {s.symbol: s for s in result.symbols}
    if name not in by_name:
        raise UserError(f"unknown symbol {name!r}; valid choices: {', '.join(by_name)}")
    entry = by_name[name]
    groups = [f"G_{g}" for g in result.group_names]
    clusters = [f"C_{c + 1}" for c in range(entry.n_clusters)]
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for ax, matrix, rows, caption in (
        (axes[0], entry.by_cluster, clusters, "(a) first function from a cluster"),
        (axes[1], entry.by_group, groups, "(b) first function from a group"),
    ):
        ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
        for (i, j), value in np.ndenumerate(matrix):
            text = "-" if np.isnan(value) else f"{value:.2f}"
            ax.text(
                j, i, text, ha="center", va="center", color="white" if value < 0.6 else "black", fontsize=8
            )
        ax.set_xticks(range(len(groups)), groups)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel("second function")
        ax.set_title(caption, fontsize=9)
    fig.suptitle(f"accuracy after two function applications, symbol '{name}'", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: RepresentationCompatibility, out_dir: str | Path) -> list[Path]:
    """``compatibility.json``, ``similarity.png`` (Fig. 6.3 for all symbols) and ``compatibility.png``
    (Fig. E.2 for the least compatible symbol) into ``out_dir``."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "compatibility.json"
    data.write_text(json.dumps(result.to_json(), indent=1))
    return [
        data,
        save_figure(result, out / "similarity.png"),
        save_compatibility_figure(result, out / "compatibility.png"),
    ]
