"""``recombine reproduce masks-addmul --quick``, FNN and LSTM: the report's numbers are results.json's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recombine.cli import main
from recombine.probes.mask_analysis_addmul import THESIS_TABLE_B_1, io_vs_hidden_sharing, layer_roles
from recombine.probes.mask_analysis_common import format_mean_std


def _row(report: str, prefix: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(prefix))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_quick_reproduction_writes_a_report_whose_numbers_are_those_of_results_json(tmp_path: Path) -> None:
    out = tmp_path / "masks-addmul"
    assert main(["reproduce", "masks-addmul", "--quick", "--seeds", "2", "--out", str(out)]) == 0
    assert {"report.md", "results.json", "sharing.png", "experiment.yaml"} <= {p.name for p in out.iterdir()}
    results = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    assert results["reproduction"] == "masks-addmul" and results["seeds"] == [0, 1]
    assert list(results["architectures"]) == ["fnn", "lstm"]
    for architecture, stored in results["architectures"].items():
        stats = stored["mean_std"]
        per_seed = [stored["per_seed"][s] for s in ("0", "1")]
        values = [s["accuracy"]["add"]["mul"] for s in per_seed]
        assert stats["accuracy"]["add"]["mul"] == pytest.approx([np.mean(values), np.std(values, ddof=1)])
        for mask in ("none", "full", "add", "~add", "mul", "~mul"):
            row = _row(report, f"| {architecture} | {mask} |")
            reference = THESIS_TABLE_B_1[architecture].get(mask)
            assert row[2] == format_mean_std(stats["accuracy"][mask]["add"])
            assert row[4] == format_mean_std(stats["accuracy"][mask]["mul"])
            assert row[3] == (format_mean_std(reference["add"], 1.0) if reference else "-")
        layers = list(stats["sharing"])
        assert layers[0] in ("layers.0.weight", "lstm.weight_ih_l0") and layers[-1] == "output.weight"
        for layer, role in layer_roles(layers).items():
            row = _row(report, f"| {architecture} | `{layer}` |")
            assert row[2] == role
            assert row[3:7] == [
                format_mean_std(stats["sharing"][layer][k])
                for k in ("iou", "iomin", "shared_of_add", "shared_of_mul")
            ]
        io, hidden = io_vs_hidden_sharing(stats["sharing"])
        summary = _row(report, f"| {architecture} | {format_mean_std(stats['iou'])} |")
        assert summary[5].startswith(f"{100 * io:.0f} % vs {100 * hidden:.0f} %")
        performed = _row(report, f"| {architecture} | add | mul |")
        assert performed[3:] == [
            format_mean_std(stats["performed"]["add"]["mul"][k]) for k in ("add", "mul", "none")
        ]
    assert (out / "sharing.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["reproduce", "masks-addmul", "--quick", "--out", str(out), "architectures=[cnn]"]) == 2
