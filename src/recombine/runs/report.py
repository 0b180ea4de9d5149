"""Reports from stored runs: a reproduction's table (ours beside the paper's) or one run's summary."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch

from recombine.errors import UserError
from recombine.experiments import get as get_reproduction
from recombine.runs.aggregate import SeedSummary
from recombine.runs.figures import learning_curves
from recombine.runs.store import RunDir


def collect(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``manifest.json`` and the results of its runs; returns (manifest, results.json data)."""
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"{out} is neither a run directory nor a reproduction directory (no manifest.json)")
    manifest = json.loads(manifest_path.read_text())
    reproduction = get_reproduction(manifest["reproduction"])
    rows: dict[str, dict[str, Any]] = {}
    missing = []
    for entry in manifest["runs"]:
        result = RunDir(out / entry["run"]).read_result()
        if result is None or result.get("status") != "completed":
            missing.append(entry["run"])
            continue
        cell = rows.setdefault(entry["variant"], {}).setdefault(
            entry["column"], {"ood": [], "iid": [], "wall_time_s": [], "best_step": [], "runs": []}
        )
        cell["ood"].append(result["selected"][reproduction.report_split])
        cell["iid"].append(result["selected"].get(reproduction.iid_split, float("nan")))
        cell["wall_time_s"].append(result.get("wall_time_s", float("nan")))
        cell["best_step"].append(result["best_step"])
        cell["runs"].append(entry["run"])

    table: dict[str, Any] = {}
    for variant in reproduction.variants:
        for column in reproduction.columns:
            cell = rows.get(variant.label, {}).get(column)
            paper = reproduction.paper.get((variant.label, column))
            entry: dict[str, Any] = {
                "paper": None if paper is None else {"mean": paper.mean, "std": paper.std}
            }
            if cell:
                entry.update(
                    ood=SeedSummary.of(cell["ood"], reproduction.success_threshold).to_dict(),
                    iid=SeedSummary.of(cell["iid"], reproduction.success_threshold).to_dict(),
                    wall_time_s=cell["wall_time_s"],
                    best_step=cell["best_step"],
                    runs=cell["runs"],
                )
            table.setdefault(variant.label, {})[column] = entry
    results = {
        "reproduction": reproduction.name,
        "source": reproduction.source,
        "quick": manifest["quick"],
        "report_split": reproduction.report_split,
        "iid_split": reproduction.iid_split,
        "success_threshold": reproduction.success_threshold,
        "table": table,
        "missing_runs": missing,
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
    }
    return manifest, results


def render_reproduction(out: Path) -> str:
    """Write ``OUT/report.md`` and ``OUT/results.json``; return the Markdown."""
    manifest, results = collect(out)
    reproduction = get_reproduction(manifest["reproduction"])
    columns = list(reproduction.columns)
    lines = [
        f"# {reproduction.name}: {reproduction.description}",
        "",
        f"Source: {reproduction.source}. Seeds: {manifest['seeds']}"
        + (" (quick mode: not the documented scale)" if manifest["quick"] else "")
        + f". Cells: mean ± std over seeds (seeds with accuracy >= {reproduction.success_threshold}"
        " / seeds), model selected by accuracy on valid_ood.",
        "",
    ]
    if reproduction.scale_note:
        lines += [reproduction.scale_note, ""]
    header = ["model"]
    for column in columns:
        header += [f"{column} {reproduction.report_split} (ours)", f"{column} (paper)"]
    for column in columns:
        header += [f"{column} {reproduction.iid_split} (ours)"]
    header += ["s / seed"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    in_grid = {entry["variant"] for entry in manifest["runs"]}
    for variant in reproduction.variants:
        row = [variant.label]
        times: list[float] = []
        for column in columns:
            cell = results["table"][variant.label][column]
            row.append(_fmt(cell.get("ood")) if variant.label in in_grid else "not run")
            row.append(
                "–" if cell["paper"] is None else f"{cell['paper']['mean']:.2f} ± {cell['paper']['std']:.2f}"
            )
            times += cell.get("wall_time_s", [])
        for column in columns:
            row.append(_fmt(results["table"][variant.label][column].get("iid")))
        row.append(f"{sum(times) / len(times):.0f}" if times else "–")
        lines.append("| " + " | ".join(row) + " |")
    if results["missing_runs"]:
        lines += [
            "",
            f"Missing or unfinished runs ({len(results['missing_runs'])}): "
            + ", ".join(results["missing_runs"]),
        ]
    figure = learning_curves(out, manifest, reproduction.report_split, out / "curves.png")
    if figure is not None:
        lines += [
            "",
            f"![{reproduction.report_split} accuracy during training, mean over seeds (band: min-max)]"
            f"({figure.name})",
        ]
    env = results["environment"]
    lines += ["", f"torch {env['torch']}, Python {env['python']}, {env['machine']}."]
    markdown = "\n".join(lines) + "\n"
    (out / "report.md").write_text(markdown)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return markdown


def _fmt(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "–"
    hits = round(summary["success_rate"] * summary["n"])
    return f"{summary['mean']:.2f} ± {summary['std']:.2f} ({hits}/{summary['n']})"


def render_run(path: Path) -> str:
    run = RunDir(path)
    config = run.read_config()
    result = run.read_result()
    lines = [
        f"# run {path.name}",
        "",
        f"task {config['task']['name']}, model {config['model']['name']}, "
        f"seed {config['seed']}, {config['train']['steps']} steps",
        "",
    ]
    if result is None:
        evals = [r for r in run.read_metrics() if r.get("kind") == "eval"]
        lines.append(
            f"unfinished: {len(evals)} evaluations so far (resume with `recombine train --resume {path}`)"
        )
        return "\n".join(lines) + "\n"
    lines.append(f"status: {result['status']}")
    if result["status"] == "completed":
        lines += [
            f"selected step {result['best_step']} by {result['selection_split']} accuracy",
            "",
            "| split | selected | last |",
            "|---|---|---|",
        ]
        for split, value in result["selected"].items():
            lines.append(f"| {split} | {value:.4f} | {result['last'][split]:.4f} |")
    return "\n".join(lines) + "\n"


def render(path: Path) -> str:
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if (path / "config.yaml").is_file():
        return render_run(path)
    return render_reproduction(path)
