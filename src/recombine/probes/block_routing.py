"""Routing inspection of an SMFR (Block-Operations paper, A.2.4 and A.4; CATALOG §3 "routing inspection").

A.4: "To inspect an SMFR model, it is often enough to look at the weights that determine routing decisions:
The softmax values in the Multiplexer, and the gating weight in the FNNR. It can be helpful to have a set of
example inputs for which you expect different routing behavior and to compare the routing weights for
these." Both come from :attr:`recombine.models.smfr.BlockModelOutput.layers`: per MFNNR, the Multiplexer's
weights ``w [batch, N, M]`` (rows sum to 1 over the M inputs) and the FNNR's gates ``g [batch, N]``.

On block-permuted images (:mod:`recombine.tasks.block_permuted_images`) A.2.4 graphs three indicators over
training. The paper describes them in words; our definitions:

* **attention sharpness**, "How much does each attention mechanism pay attention to only a single input
  vs. all of them?": ``1 - mean_{b,n} H(w_bn) / log M`` with ``H`` the entropy (nats) of one output block's
  routing distribution; 1 = every output block copies exactly one input, 0 = every output block averages all
  inputs uniformly. Per Multiplexer; :func:`max_routing_weight` (mean largest weight, ``1/M`` .. 1) beside it.
* **permutation difference**, "If we apply the inverse of the permutation used in a training batch to the
  data after the first attention layer, do we get similar distributions for each permutation? This measures
  roughly how much the network learns to undo the permutation." The first Multiplexer's output block ``n``
  is ``y_n = sum_m w_nm x_m``; undoing the permutation on the input side expresses it in the *original*
  blocks, ``y_n = sum_k a_nk x^orig_k`` with ``a_nk = w_{n, pos(k)}`` (``pos(k)``: the position of original
  block ``k`` under the example's permutation; the indicator block keeps its place). We average ``a`` over
  the examples of each permutation and take the total-variation distance ``1/2 sum_k |a^p_nk - a^q_nk|``
  between two permutations' averages, averaged over the output blocks and over all pairs of permutations
  present: 0 = the first layer routes original blocks the same way whatever the permutation (it undid the
  permutation, or ignores the order, e.g. uniform averaging, hence sharpness beside it); 1 = disjoint.
  (Applying the inverse to the layer's *outputs* instead would score a layer that passes blocks through
  unchanged as 0, the opposite of what the text says the measure shows.)
* **attention fairness**, "Does the network pay equal amounts of attention to each of the four input
  blocks, or does it drop some of them?": per example, the share of the first Multiplexer's attention each
  image block receives, ``s_k = mean_n w_{n, k}`` renormalised over the image blocks (the indicator block is
  left out and reported as ``indicator_share``); fairness = ``mean_b H(s_b) / log K`` over the ``K`` image
  blocks: 1 = every block gets the same share, 0 = one block gets everything. Per example, so a layer that
  always reads position 0 scores 0 although over a balanced batch every original block lands there equally
  often. ``block_share`` (mean share per *original* block) shows which block is dropped ("the outer two
  blocks were sometimes ignored", A.2.4).

Figures (matplotlib, Agg, PNG): :func:`save_routing_figure` (the routing weights and gates of every layer on
chosen example inputs) and :func:`save_indicator_figure` (the indicators over training).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from recombine.models.smfr import BlockModelOutput


def _array(values: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) over the last axis, with ``0 log 0 = 0``."""
    safe = np.where(p > 0, p, 1.0)
    return -(p * np.log(safe)).sum(-1)


def attention_sharpness(weights: np.ndarray | torch.Tensor) -> float:
    """``1 - mean_{b,n} H(w_bn) / log M`` for routing weights ``[batch, N, M]`` (1 one-hot, 0 uniform)."""
    w = _array(weights)
    if w.shape[-1] == 1:
        return 1.0
    return float(1.0 - _entropy(w).mean() / math.log(w.shape[-1]))


def max_routing_weight(weights: np.ndarray | torch.Tensor) -> float:
    """Mean over examples and output blocks of the largest routing weight (``1/M`` uniform, 1 one-hot)."""
    return float(_array(weights).max(-1).mean())


def original_block_weights(
    weights: np.ndarray | torch.Tensor, permutation: np.ndarray, permutations: np.ndarray
) -> np.ndarray:
    """``a[b, n, k] = w[b, n, pos_b(k)]``: the routing weights re-indexed by original block.

    ``permutations [P, K]``: position ``j`` of permutation ``p`` holds original block ``permutations[p, j]``;
    ``permutation [batch]`` the id per example. Inputs beyond the first ``K`` (the indicator) keep their
    place.
    """
    w = _array(weights)
    order = np.asarray(permutations, dtype=np.int64)
    n_image = order.shape[1]
    positions = np.argsort(order, axis=1)[np.asarray(permutation, dtype=np.int64)]  # [b, K]
    index = np.broadcast_to(positions[:, None, :], (*w.shape[:2], n_image))
    image = np.take_along_axis(w[..., :n_image], index, axis=2)
    return np.concatenate([image, w[..., n_image:]], axis=2)


def permutation_difference(
    weights: np.ndarray | torch.Tensor, permutation: np.ndarray, permutations: np.ndarray
) -> float:
    """Mean over pairs of permutations present of the mean over output blocks of the total-variation
    distance between the permutations' average :func:`original_block_weights` (0 = permutation undone)."""
    a = original_block_weights(weights, permutation, permutations)
    permutation = np.asarray(permutation)
    present = np.unique(permutation)
    if len(present) < 2:
        raise ValueError("the permutation difference needs examples of at least two permutations")
    means = np.stack([a[permutation == p].mean(0) for p in present])  # [P', N, M]
    distances = [
        0.5 * np.abs(means[i] - means[j]).sum(-1).mean()
        for i in range(len(present))
        for j in range(i + 1, len(present))
    ]
    return float(np.mean(distances))


def image_block_shares(weights: np.ndarray | torch.Tensor, n_image_blocks: int) -> np.ndarray:
    """``[batch, K]``: each example's attention share per image *position*, renormalised over the ``K``
    image blocks (all zeros for an example that attends only to the indicator)."""
    s = _array(weights)[..., :n_image_blocks].mean(1)
    total = s.sum(-1, keepdims=True)
    return np.divide(s, total, out=np.zeros_like(s), where=total > 0)


def attention_fairness(weights: np.ndarray | torch.Tensor, n_image_blocks: int) -> float:
    """``mean_b H(s_b) / log K`` over the image-block shares ``s_b`` (1 = equal shares, 0 = one block)."""
    if n_image_blocks == 1:
        return 1.0
    return float((_entropy(image_block_shares(weights, n_image_blocks)) / math.log(n_image_blocks)).mean())


@dataclass
class RoutingIndicators:
    """The A.2.4 indicators of one batch; per-layer lists are in layer order (first MFNNR first)."""

    sharpness: list[float]  # per Multiplexer
    max_weight: list[float]  # per Multiplexer
    gate: list[float]  # per FNNR: mean gate (0 = pass the routed block through, 1 = replace it)
    permutation_difference: float  # first Multiplexer
    fairness: float  # first Multiplexer
    block_share: list[float]  # first Multiplexer: mean share per original image block (sums to 1)
    indicator_share: float  # first Multiplexer: share of all attention on the non-image (indicator) inputs

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def routing_indicators(
    output: BlockModelOutput, permutation: np.ndarray, permutations: np.ndarray
) -> RoutingIndicators:
    """The indicators of an SMFR's output on a batch whose examples carry ``permutation`` ids."""
    if not output.layers:
        raise ValueError("routing indicators need an SMFR output (this model returned no routing layers)")
    n_image = int(np.asarray(permutations).shape[1])
    first = _array(output.layers[0].multiplexer.weights)
    shares = original_block_weights(first, permutation, permutations).mean(1)  # [b, M]
    return RoutingIndicators(
        sharpness=[attention_sharpness(layer.multiplexer.weights) for layer in output.layers],
        max_weight=[max_routing_weight(layer.multiplexer.weights) for layer in output.layers],
        gate=[float(_array(layer.fnnr.gate).mean()) for layer in output.layers],
        permutation_difference=permutation_difference(first, permutation, permutations),
        fairness=attention_fairness(first, n_image),
        block_share=(shares[:, :n_image].mean(0) / max(shares[:, :n_image].mean(0).sum(), 1e-300)).tolist(),
        indicator_share=float(shares[:, n_image:].sum(-1).mean()),
    )


@torch.no_grad()
def measure_routing(
    model: nn.Module, blocks: torch.Tensor, permutation: np.ndarray, permutations: np.ndarray
) -> tuple[RoutingIndicators, BlockModelOutput]:
    """Run ``model`` in eval mode on ``blocks`` and compute its :class:`RoutingIndicators`."""
    was_training = model.training
    model.eval()
    output = model(blocks)
    model.train(was_training)
    return routing_indicators(output, permutation, permutations), output


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def routing_arrays(output: BlockModelOutput) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per MFNNR, the Multiplexer weights ``[batch, N, M]`` and the FNNR gates ``[batch, N]`` as arrays."""
    return (
        [_array(layer.multiplexer.weights) for layer in output.layers],
        [_array(layer.fnnr.gate) for layer in output.layers],
    )


def save_routing_figure(
    weights: Sequence[np.ndarray],
    gates: Sequence[np.ndarray],
    path: Path,
    titles: Sequence[str],
    images: np.ndarray | None = None,
    input_labels: Sequence[str] | None = None,
    suptitle: str = "",
) -> Path:
    """One row per example: the input image as the model sees it (if ``images [b, H, W]`` is given), then
    per MFNNR the Multiplexer's routing weights (output blocks x input blocks, values written in) with each
    output block's FNNR gate in its row label (BLOCK A.4). ``weights`` and ``gates`` as returned by
    :func:`routing_arrays`, one entry per layer."""
    plt = _pyplot()
    n_examples, n_layers = len(titles), len(weights)
    extra = int(images is not None)
    fig, axes = plt.subplots(
        n_examples,
        n_layers + extra,
        figsize=(2.0 * extra + 3.2 * n_layers, 1.9 * n_examples + 0.6),
        squeeze=False,
    )
    for row, title in enumerate(titles):
        if images is not None:
            ax = axes[row, 0]
            ax.imshow(images[row], cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(title, fontsize=8)
        for layer_index in range(n_layers):
            w = np.asarray(weights[layer_index][row], dtype=np.float64)  # [N, M]
            g = np.asarray(gates[layer_index][row], dtype=np.float64)  # [N]
            ax = axes[row, extra + layer_index]
            ax.imshow(w, cmap="viridis", vmin=0, vmax=1, aspect="auto")
            for (n, m), value in np.ndenumerate(w):
                colour = "k" if value > 0.5 else "w"
                ax.text(m, n, f"{value:.2f}", ha="center", va="center", fontsize=6, color=colour)
            n_out, n_in = w.shape
            labels = (
                list(input_labels) if layer_index == 0 and input_labels else [str(m) for m in range(n_in)]
            )
            ax.set_xticks(range(n_in), labels[:n_in], fontsize=6)
            ax.set_yticks(range(n_out), [f"out {n}, g={g[n]:.2f}" for n in range(n_out)], fontsize=6)
            if row == 0:
                ax.set_title(f"MFNNR {layer_index + 1}: routing weights, gates g", fontsize=8)
            if not extra and layer_index == 0:
                ax.set_ylabel(title, fontsize=7)
    if suptitle:
        fig.suptitle(suptitle, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


@dataclass
class IndicatorCurve:
    """The indicators of one run at its evaluation steps (one line in :func:`save_indicator_figure`)."""

    label: str
    steps: list[int]
    indicators: list[RoutingIndicators]


def save_indicator_figure(curves: Sequence[IndicatorCurve], path: Path, suptitle: str = "") -> Path:
    """Attention sharpness (first Multiplexer solid, mean over all dashed), permutation difference and
    fairness of the first Multiplexer over training, one line per run (BLOCK A.2.4)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colours = plt.get_cmap("tab10")
    for i, curve in enumerate(curves):
        colour = colours(i % 10)
        first = [x.sharpness[0] for x in curve.indicators]
        mean = [float(np.mean(x.sharpness)) for x in curve.indicators]
        axes[0].plot(curve.steps, first, color=colour, lw=1.5, label=curve.label)
        axes[0].plot(curve.steps, mean, color=colour, lw=1, ls="--")
        axes[1].plot(curve.steps, [x.permutation_difference for x in curve.indicators], color=colour, lw=1.5)
        axes[2].plot(curve.steps, [x.fairness for x in curve.indicators], color=colour, lw=1.5)
    titles = (
        "attention sharpness (first layer; dashed: all layers)",
        "permutation difference (first layer; 0 = undone)",
        "attention fairness (first layer; 1 = equal shares)",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    if curves:
        axes[0].legend(fontsize=7)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = [
    "IndicatorCurve",
    "RoutingIndicators",
    "attention_fairness",
    "attention_sharpness",
    "image_block_shares",
    "max_routing_weight",
    "measure_routing",
    "original_block_weights",
    "permutation_difference",
    "routing_arrays",
    "routing_indicators",
    "save_indicator_figure",
    "save_routing_figure",
]
