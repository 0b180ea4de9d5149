"""DNC memory-trace figures (thesis Figs. 2.3a, 2.4): files are written and every heatmap shows the
trace's own numbers for the chosen sequence and head, with time on the x axis."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.models.dnc import DNC
from recombine.models.layers.dnc_memory import DNCMemoryConfig, DNCMemoryTrace
from recombine.probes.dnc_traces import (
    draw_link_comparison,
    draw_memory_trace,
    save_link_comparison,
    save_memory_trace,
    trace_arrays,
)

matplotlib.use("Agg")

Traced = tuple[torch.Tensor, torch.Tensor, DNCMemoryTrace]


@pytest.fixture(scope="module")
def traced() -> Traced:
    torch.manual_seed(0)
    config = DNCMemoryConfig(n_cells=5, cell_width=4, n_read_heads=2, sharpness=True)
    dnc = DNC(d_input=3, d_output=2, d_controller=8, memory=config)
    inputs = torch.randn(3, 7, 3)
    with torch.no_grad():
        logits, trace = dnc(inputs, return_trace=True)
    assert trace is not None
    return inputs, logits, trace


def _images_by_title(fig: matplotlib.figure.Figure) -> dict[str, np.ndarray]:
    return {
        ax.get_title(loc="left") or ax.get_title(): np.asarray(ax.images[0].get_array())
        for ax in fig.axes
        if ax.images
    }


def test_trace_panels_are_the_trace_of_the_chosen_sequence_and_head(traced: Traced, tmp_path: Path) -> None:
    inputs, logits, trace = traced
    index, length, head = 1, 6, 1
    bits = (inputs[index].numpy() > 0).astype(np.float32)
    targets = np.ones((7, 2), dtype=np.float32)
    arrays = trace_arrays(
        trace, index, length, inputs=bits, targets=targets, outputs=torch.sigmoid(logits[index]).numpy()
    )
    fig = draw_memory_trace(arrays, head=head)
    images = _images_by_title(fig)
    expected = {
        "inputs": bits[:length].T,
        "targets": targets[:length].T,
        "outputs": torch.sigmoid(logits[index, :length]).numpy().T,
        "write weighting": trace.write_weighting[index, :length].numpy().T,
        f"read weighting (head {head})": trace.read_weightings[index, :length, head].numpy().T,
        f"forward links (head {head})": trace.forward[index, :length, head].numpy().T,
        f"read modes (head {head})": trace.read_modes[index, :length, head].numpy().T,
    }
    assert set(images) == set(expected)
    for title, values in expected.items():
        np.testing.assert_allclose(images[title], values, err_msg=title)
    # what the panels show are distributions: read modes sum to 1 per step, links and weightings to <= 1
    np.testing.assert_allclose(images[f"read modes (head {head})"].sum(0), 1.0, rtol=1e-5)
    assert np.all(images[f"forward links (head {head})"].sum(0) <= 1 + 1e-5)
    assert np.all(images["write weighting"].sum(0) <= 1 + 1e-5)
    matplotlib.pyplot.close(fig)
    path = save_memory_trace(arrays, tmp_path / "sub" / "trace.png", head=head, title="t")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_link_comparison_puts_time_down_the_rows_per_model(traced: Traced, tmp_path: Path) -> None:
    _, _, trace = traced
    traces = {"a": trace_arrays(trace, 0), "b": trace_arrays(trace, 2)}
    fig = draw_link_comparison(traces, head=0)
    images = _images_by_title(fig)
    for name, index in (("a", 0), ("b", 2)):
        np.testing.assert_allclose(
            images[f"{name}: forward links (head 0)"], trace.forward[index, :, 0].numpy()
        )
        np.testing.assert_allclose(
            images[f"{name}: read modes (head 0)"], trace.read_modes[index, :, 0].numpy()
        )
    matplotlib.pyplot.close(fig)
    assert save_link_comparison(traces, tmp_path / "links.png").stat().st_size > 0


def test_bad_index_length_or_head_name_the_valid_range(traced: Traced) -> None:
    _, _, trace = traced
    with pytest.raises(UserError, match=r"\[0, 2\]"):
        trace_arrays(trace, 3)
    with pytest.raises(UserError, match=r"\[1, 7\]"):
        trace_arrays(trace, 0, length=8)
    with pytest.raises(UserError, match=r"\[0, 1\]"):
        draw_memory_trace(trace_arrays(trace, 0), head=2)


def test_masked_dnc_trace_adds_the_read_mask_panel_of_the_head(tmp_path: Path) -> None:
    """Fig. 2.2b: with masked content addressing (M) the figure shows the head's read mask over time, each
    value in (delta, 1) (eq. A.2); an unmasked DNC's figure has no such panel (checked in the test above)."""
    torch.manual_seed(1)
    config = DNCMemoryConfig(n_cells=5, cell_width=4, n_read_heads=2, masked=True, mask_min=0.1)
    dnc = DNC(d_input=3, d_output=2, d_controller=8, memory=config)
    with torch.no_grad():
        _, trace = dnc(torch.randn(2, 6, 3), return_trace=True)
    assert trace is not None and trace.read_masks is not None
    head = 1
    arrays = trace_arrays(trace, 1, length=5)
    fig = draw_memory_trace(arrays, head=head)
    mask = _images_by_title(fig)[f"read mask (head {head})"]
    np.testing.assert_allclose(mask, trace.read_masks[1, :5, head].numpy().T)
    assert mask.shape == (4, 5)  # channels x time steps
    assert np.all((mask > 0.1) & (mask < 1.0))
    matplotlib.pyplot.close(fig)
    assert save_memory_trace(arrays, tmp_path / "masked.png", head=head).stat().st_size > 0
