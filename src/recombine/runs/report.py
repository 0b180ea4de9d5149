"""Reports from stored runs: a reproduction's or sweep's table (ours beside the paper's) or one run's summary.

The table (mean ± std over seeds, success rate, paper numbers) is built once and rendered as
Markdown (``report.md``) and, on request, as a static offline HTML page (``report.html``, see
:mod:`recombine.runs.html_report`). Failed trials (``RUN/failure.json``) are listed and their cells
say so; interrupted ones (stopped, resumable: ``recombine runs`` status ``interrupted``) are listed apart,
each with how far it got and its best evaluation so far.
"""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import Any

import torch

from recombine.errors import UserError
from recombine.experiments import get as get_reproduction
from recombine.experiments.recipe import reproduction_from_recipe
from recombine.experiments.reproduction import PaperNumber, Reproduction
from recombine.experiments.scripted_reproduction import CONFIG_FILE as SCRIPTED_CONFIG_FILE
from recombine.runs.aggregate import SeedSummary
from recombine.runs.by_depth import depth_figure, depth_tables
from recombine.runs.figures import learning_curves
from recombine.runs.heatmap import heatmap_figure, matrix_tables
from recombine.runs.html_report import render_html, render_markdown_page, render_markdown_report
from recombine.runs.row_axis import row_axis_figure
from recombine.runs.store import RunDir
from recombine.runs.trial_record import read_failure, run_status
from recombine.runs.unfinished import describe_progress, progress_so_far, with_failed_and_interrupted_counts


def manifest_reproduction(manifest: dict[str, Any]) -> Reproduction:
    """The grid's definition: the recipe stored in the manifest, else the named reproduction."""
    if "recipe" in manifest:
        return reproduction_from_recipe(manifest["recipe"], "manifest.json")
    return get_reproduction(manifest["reproduction"])


def run_devices(result: dict[str, Any]) -> list[str]:
    """The devices a finished run trained on: its ``devices`` record (entries without a device name
    skipped), else the device that finished it, else the CPU (runs from before devices were recorded)."""
    record = result.get("devices")
    if isinstance(record, list):
        return [d["device"] for d in record if isinstance(d, dict) and isinstance(d.get("device"), str)]
    device = result.get("device")
    return [device if isinstance(device, str) else "cpu"]


def collect(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``manifest.json`` and the results of its runs; returns (manifest, results.json data)."""
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"{out} is neither a run directory nor a reproduction directory (no manifest.json)")
    manifest = json.loads(manifest_path.read_text())
    reproduction = manifest_reproduction(manifest)
    labels = {variant.label for variant in reproduction.variants}
    outside = [  # runs of a row or column that the grid's latest recipe no longer defines
        entry["run"]
        for entry in manifest["runs"]
        if entry["variant"] not in labels or entry["column"] not in reproduction.columns
    ]
    rows: dict[str, dict[str, Any]] = {}
    missing, failed, interrupted = [], {}, {}
    trained_on: set[str] = set()
    failed_cells: dict[tuple[str, str], list[str]] = {}
    interrupted_cells: dict[tuple[str, str], list[str]] = {}
    for entry in manifest["runs"]:
        if entry["run"] in outside:
            continue
        result = RunDir(out / entry["run"]).read_result()
        if result is None or result.get("status") != "completed":
            missing.append(entry["run"])
            failure = read_failure(out / entry["run"])
            if run_status(out / entry["run"]) == "interrupted":  # as `recombine runs` says
                interrupted[entry["run"]] = progress_so_far(out / entry["run"], reproduction.report_split)
                interrupted_cells.setdefault((entry["variant"], entry["column"]), []).append(entry["run"])
            elif failure is not None or result is not None:
                reason = failure["reason"] if failure else f"status {result['status']!r}"  # type: ignore[index]
                failed[entry["run"]] = reason
                failed_cells.setdefault((entry["variant"], entry["column"]), []).append(entry["run"])
            continue
        trained_on.update(run_devices(result))
        cell = rows.setdefault(entry["variant"], {}).setdefault(
            entry["column"],
            {"ood": [], "iid": [], "wall_time_s": [], "best_step": [], "runs": [], "per_depth": []},
        )
        cell["ood"].append(result["selected"][reproduction.report_split])
        cell["iid"].append(result["selected"].get(reproduction.iid_split, float("nan")))
        cell["wall_time_s"].append(result.get("wall_time_s", float("nan")))
        cell["best_step"].append(result["best_step"])
        cell["runs"].append(entry["run"])
        if reproduction.depth_axis is not None:  # aligned with runs; None where a run has no record
            cell["per_depth"].append(result.get("selected_per_depth"))

    table: dict[str, Any] = {}
    for variant in reproduction.variants:
        for column in reproduction.columns:
            cell = rows.get(variant.label, {}).get(column)
            paper = reproduction.paper.get((variant.label, column))
            entry: dict[str, Any] = {
                "paper": None if paper is None else paper.to_dict(),
                "failed_runs": failed_cells.get((variant.label, column), []),
                "interrupted_runs": interrupted_cells.get((variant.label, column), []),
            }
            if cell:
                entry.update(
                    ood=SeedSummary.of(cell["ood"], reproduction.success_threshold).to_dict(),
                    iid=SeedSummary.of(cell["iid"], reproduction.success_threshold).to_dict(),
                    wall_time_s=cell["wall_time_s"],
                    best_step=cell["best_step"],
                    runs=cell["runs"],
                )
                if reproduction.depth_axis is not None:  # per run: split -> depth -> accuracy
                    entry["per_depth"] = cell["per_depth"]
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
        "failed_runs": failed,
        "interrupted_runs": interrupted,
        "runs_outside_recipe": outside,
        "trained_on": sorted(trained_on),
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
    }
    return manifest, results


def _table(
    manifest: dict[str, Any], results: dict[str, Any], reproduction: Reproduction
) -> tuple[list[str], list[list[str]]]:
    """The report's table as text cells: (header, rows)."""
    columns = list(reproduction.columns)
    header = ["model"]
    for column in columns:
        header += [f"{column} {reproduction.report_split} (ours)", f"{column} (paper)"]
    for column in columns:
        header += [f"{column} {reproduction.iid_split} (ours)"]
    header += ["s / run"]  # mean wall time of one cell (one column, one seed)
    in_grid = {(entry["variant"], entry["column"]) for entry in manifest["runs"]}
    rows = []
    for variant in reproduction.variants:
        row = [variant.label]
        times: list[float] = []
        for column in columns:
            cell = results["table"][variant.label][column]
            text = _fmt(cell.get("ood")) if (variant.label, column) in in_grid else "not run"
            row.append(with_failed_and_interrupted_counts(text, cell))
            row.append(_paper(cell["paper"]))
            times += cell.get("wall_time_s", [])
        for column in columns:
            row.append(_fmt(results["table"][variant.label][column].get("iid")))
        row.append(f"{sum(times) / len(times):.0f}" if times else "–")
        rows.append(row)
    return header, rows


def render_reproduction(out: Path, html: bool = False) -> str:
    """Write ``OUT/report.md`` and ``OUT/results.json`` (and ``OUT/report.html`` when ``html``);
    return the Markdown."""
    manifest, results = collect(out)
    reproduction = manifest_reproduction(manifest)
    title = (
        f"{reproduction.name}: {reproduction.description}" if reproduction.description else reproduction.name
    )
    intro = (
        (f"Source: {reproduction.source}. " if reproduction.source else "")
        + f"Seeds: {manifest['seeds']}"
        + (" (quick mode: not the documented scale)" if manifest["quick"] else "")
        + f". Cells: mean ± std over seeds (seeds with accuracy >= {reproduction.success_threshold}"
        " / seeds); each run's checkpoint selected by accuracy on valid_ood (valid_iid where the task has"
        " no valid_ood split)."
    )
    if any(number.success_rate is not None for number in reproduction.paper.values()):
        intro += " Paper cells give the paper's success rate in parentheses where it states one."
    notes = [reproduction.scale_note] if reproduction.scale_note else []
    header, rows = _table(manifest, results, reproduction)
    lines = [f"# {title}", "", intro, ""]
    for note in notes:
        lines += [note, ""]
    if reproduction.heatmap is None:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    else:  # one matrix per row over the two task keys, and the heat maps (thesis Fig. 6.4)
        in_grid = {entry["variant"] for entry in manifest["runs"]}
        labels = [v.label for v in reproduction.variants if v.label in in_grid]
        lines += matrix_tables(results, reproduction, labels, _fmt, _paper)[1:]
        heatmaps = heatmap_figure(results, reproduction, labels, out / "heatmap.png")
        if heatmaps is not None:
            lines += ["", f"![{reproduction.report_split} accuracy, mean over seeds]({heatmaps.name})"]
    failed = results["failed_runs"]
    stopped = {run: describe_progress(progress) for run, progress in results["interrupted_runs"].items()}
    unfinished = [run for run in results["missing_runs"] if run not in failed and run not in stopped]
    if failed:
        lines += ["", f"Failed runs ({len(failed)}; see RUN/failure.json and RUN/train.log):", ""]
        lines += [f"- {run}: {reason}" for run, reason in failed.items()]
    if stopped:
        lines += ["", f"Interrupted runs ({len(stopped)}; the command that started them continues them):", ""]
        lines += [f"- {run}: {text}" for run, text in stopped.items()]
    if unfinished:
        lines += ["", f"Missing or unfinished runs ({len(unfinished)}): " + ", ".join(unfinished)]
    outside = _outside_recipe_note(results["runs_outside_recipe"])
    if outside:
        lines += ["", outside]
    extra = depth_tables(results, reproduction) if reproduction.depth_axis is not None else []
    lines += extra
    figures: list[tuple[Path, str]] = []
    if reproduction.row_axis is not None:
        by_row = row_axis_figure(results, reproduction, out / "rows.png")
        if by_row is not None:
            figures.append(
                (
                    by_row,
                    f"{reproduction.report_split} accuracy by {reproduction.row_axis}: ours and the paper's",
                )
            )
    if reproduction.depth_axis is not None:
        by_depth = depth_figure(results, reproduction, out / "depths.png")
        if by_depth is not None:
            figures.append(
                (by_depth, f"accuracy by {reproduction.depth_axis} per split, mean ± std over seeds")
            )
    curves = learning_curves(
        out, manifest, reproduction.report_split, out / "curves.png", list(reproduction.columns)
    )
    if curves is not None:
        caption = f"{reproduction.report_split} accuracy during training, mean over seeds (band: min-max)"
        figures.append((curves, caption))
    for figure, caption in figures:
        lines += ["", f"![{caption}]({figure.name})"]
    env = results["environment"]
    footer = f"torch {env['torch']}, Python {env['python']}, {env['machine']}."
    if set(results.get("trained_on", [])) - {"cpu"}:  # say where, once a run used a GPU
        footer += f" Runs trained on: {', '.join(results['trained_on'])} (each run's result.json: devices)."
    lines += ["", footer]
    markdown = "\n".join(lines) + "\n"
    (out / "report.md").write_text(markdown)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if html and reproduction.heatmap is not None:  # the matrices: the page is the Markdown's
        (out / "report.html").write_text(render_markdown_page(markdown, out))
    elif html:
        page = render_html(
            title=title,
            paragraphs=[intro, *notes],
            after_table=[outside] if outside else [],
            after_table_markdown="\n".join(extra),
            base=out,
            header=header,
            rows=rows,
            failed=failed,
            interrupted=stopped,
            unfinished=unfinished,
            figures=figures,
            footer=footer,
        )
        (out / "report.html").write_text(page)
    return markdown


def _outside_recipe_note(runs: list[str]) -> str:
    """A line naming the runs the table leaves out because the latest recipe lacks their row or
    column (e.g. a sweep re-run with a recipe that dropped a row); empty if there are none."""
    if not runs:
        return ""
    return (
        f"Runs of rows or columns this grid's latest recipe does not define ({len(runs)}; not in the table; "
        "re-running with a recipe that has them reports them again without retraining the finished ones): "
        + ", ".join(runs)
    )


def _paper(number: dict[str, float] | None) -> str:
    """The paper's cell (results.json's form of a :class:`PaperNumber`): mean ± std, and its success
    rate in parentheses when it states one."""
    return "–" if number is None else PaperNumber(**number).format()


def _fmt(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "–"
    if math.isnan(summary["mean"]):  # some run lacks the split (SeedSummary.of)
        return f"n/a ({summary['n']} runs, not every one evaluated)"
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


def render(path: Path, html: bool = False) -> str:
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if (path / "config.yaml").is_file():
        if html:
            raise UserError(f"--html renders sweep and reproduction directories; {path} is a single run")
        return render_run(path)
    if (path / SCRIPTED_CONFIG_FILE).is_file():  # a scripted reproduction writes its own report
        if not (path / "report.md").is_file():
            return _render_unfinished(path, html)
        if html:
            render_markdown_report(path)
        return (path / "report.md").read_text()
    return render_reproduction(path, html)


def report_page(path: Path) -> Path:
    """The HTML page ``render(path, html=True)`` writes: ``progress.html`` for a scripted reproduction that
    has not finished (a DNC reproduction's progress report), else ``report.html``."""
    from recombine.experiments.dnc_progress_report import PROGRESS_PAGE

    unfinished = (path / SCRIPTED_CONFIG_FILE).is_file() and not (path / "report.md").is_file()
    return path / (PROGRESS_PAGE if unfinished else "report.html")


def _render_unfinished(path: Path, html: bool) -> str:
    """A scripted reproduction without its report yet: a DNC reproduction's progress so far
    (:mod:`recombine.experiments.dnc_progress_report`); any other says how to finish it."""
    from recombine.experiments.dnc_progress_report import (
        PROGRESS_PAGE,
        render_dnc_progress,
        reproduction_config,
    )

    config = reproduction_config(path)
    if config is None:
        raise UserError(
            f"{path} has no report.md yet: its reproduction has not finished "
            "(the same `recombine reproduce` command resumes it)"
        )
    text = render_dnc_progress(path, config)
    if html:
        (path / PROGRESS_PAGE).write_text(render_markdown_page(text, path))
    return text
