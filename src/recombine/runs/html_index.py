"""One index over every reproduction and sweep under a directory (``recombine report --index DIR``).

Issue 11, item 4: "one index over all reproductions". A *result directory* is one that holds a
``manifest.json`` (a sweep or grid reproduction, :mod:`recombine.runs.report`) or a ``report.md``
with a ``results.json`` (a scripted reproduction, :mod:`recombine.experiments.scripted_reproduction`,
or a grid's copied results). ``DIR/index.html`` and ``DIR/index.md`` get one row per result directory
(name, source, date, runs, finished, failed, interrupted) and, per directory, its headline table: the first
Markdown table of its ``report.md``, i.e. the cells ours-beside-the-paper's (mean ± std over seeds,
success rate, the paper's number; DESIGN "Runs, sweeps, reports"). Each entry links to its
``report.html``, which is rendered from ``report.md`` when it is missing or older (the index never
rewrites a report; a grid without one gets it rendered from its runs). Links are
relative and the page has no scripts and no remote resources, so the tree opens offline.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from recombine.errors import UserError
from recombine.runs.html_report import STYLE, markdown_to_html, render_markdown_report

INDEX_STYLE = (
    STYLE
    + """
section { margin-top: 2.5em; }
table.overview td:nth-child(-n+3) { text-align: left; }
td.problem { color: #a00; }
"""
)

_PIPE = re.compile(r"(?<!\\)\|")  # a cell separator: a pipe that is not escaped as \|
_SOURCE = re.compile(r"\(([^()]*)\)\s*$")  # a title's trailing "(thesis Tab. 5.1)"


@dataclass(frozen=True)
class ResultEntry:
    """One row of the index: a reproduction's or sweep's output directory, summarised."""

    directory: Path
    name: str  # the directory relative to the index root (posix), "." for the root itself
    title: str  # the report's first heading
    source: str  # the paper section it reproduces ("" when unknown)
    date: str  # when the results were produced, UTC (see _date)
    runs: int | None  # trials in the grid (None when the results do not say)
    finished: int | None
    failed: int | None  # None when the results do not record failures
    header: list[str] = field(default_factory=list)  # the headline table
    rows: list[list[str]] = field(default_factory=list)
    problem: str = ""  # why the report could not be rendered or read
    interrupted: int | None = None  # stopped, resumable trials (None when the results do not record them)

    def link(self, file: str) -> str:
        """A file of this directory relative to the index root, URL-quoted (``NAME/report.html``)."""
        return quote(file if self.name == "." else f"{self.name}/{file}")


def is_result_dir(path: Path) -> bool:
    return (path / "manifest.json").is_file() or (
        (path / "report.md").is_file() and (path / "results.json").is_file()
    )


def find_result_dirs(root: Path) -> list[Path]:
    """Every result directory under ``root`` (``root`` included), sorted; a result directory's own
    subdirectories (its runs) are not searched."""
    if not root.is_dir():
        raise UserError(f"{root} is not a directory")
    found = []
    for directory, subdirectories, _ in os.walk(root):
        if is_result_dir(Path(directory)):
            found.append(Path(directory))
            subdirectories.clear()
        else:
            subdirectories.sort()
    return sorted(found)


def _split_row(line: str) -> list[str]:
    cells = _PIPE.split(line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def headline_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The first pipe table of a Markdown text: (header cells, body rows); empty when there is none."""
    lines = text.splitlines()
    for i in range(len(lines) - 1):
        separator = lines[i + 1].strip()
        if lines[i].lstrip().startswith("|") and re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", separator):
            rows = []
            for line in lines[i + 2 :]:
                if not line.lstrip().startswith("|"):
                    break
                rows.append(_split_row(line))
            return _split_row(lines[i]), rows
    return [], []


def _run_counts(
    manifest: dict[str, Any] | None, results: dict[str, Any]
) -> tuple[int | None, int | None, int | None]:
    """(runs, finished, failed) from a grid's manifest and results, or a scripted experiment's
    list of trials (``runs``, ``trials`` or ``rows``), whose failures are not recorded."""
    failed_runs = results.get("failed_runs")
    failed = len(failed_runs) if isinstance(failed_runs, dict | list) else None
    table = results.get("table")
    if manifest is not None or (isinstance(table, dict) and "missing_runs" in results):
        finished = sum(
            len(cell.get("runs", []))
            for row in (table or {}).values()
            if isinstance(row, dict)
            for cell in row.values()
            if isinstance(cell, dict)
        )
        total = (
            len(_manifest_runs(manifest)) - len(results.get("runs_outside_recipe", []))
            if manifest is not None
            else finished + len(results["missing_runs"])
        )  # runs of rows the latest recipe dropped are in no table cell, so not in the count
        return total, finished, failed
    for key in ("runs", "trials", "rows"):
        trials = results.get(key)
        if isinstance(trials, list):
            return len(trials), len(trials), failed
    return None, None, failed


def _manifest_runs(manifest: dict[str, Any]) -> list[str]:
    """The run paths a manifest lists, relative to its directory."""
    runs = manifest.get("runs")
    return (
        [entry["run"] for entry in runs if isinstance(entry, dict) and "run" in entry]
        if isinstance(runs, list)
        else []
    )


def _date(directory: Path, manifest: dict[str, Any] | None) -> str:
    """When the results were produced (UTC): a grid's newest run record (``result.json`` or
    ``failure.json``), which re-rendering leaves alone; otherwise ``results.json`` (else ``report.md``)."""
    candidates = [directory / "results.json", directory / "report.md"]
    if manifest is not None:
        records = [
            directory / run / name
            for run in _manifest_runs(manifest)
            for name in ("result.json", "failure.json")
        ]
        candidates = [path for path in records if path.is_file()] or candidates
    times = [path.stat().st_mtime for path in candidates if path.is_file()]
    if not times:
        return "–"
    newest = max(times) if manifest is not None else times[0]
    return datetime.fromtimestamp(newest, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _stale(html: Path, markdown: Path) -> bool:
    return not html.is_file() or (markdown.is_file() and html.stat().st_mtime < markdown.stat().st_mtime)


def _render_report(directory: Path) -> None:
    """Write the directory's report.html from its report.md. Only a grid without a report.md yet gets
    a snapshot of its report rendered from its runs; an existing report.md and
    results.json are left as they are, since re-rendering an archived grid under today's recipe can
    change what was committed (``recombine report DIR`` re-renders one on purpose)."""
    if (directory / "manifest.json").is_file() and not (directory / "report.md").is_file():
        from recombine.runs.report import render_reproduction  # imports torch and the experiments

        render_reproduction(directory, html=True)
    else:
        render_markdown_report(directory)


def read_entry(directory: Path, root: Path) -> ResultEntry:
    """Summarise one result directory, rendering its report.html when missing or stale."""
    name = directory.relative_to(root).as_posix()
    problem = ""
    if _stale(directory / "report.html", directory / "report.md") or not (directory / "report.md").is_file():
        try:
            _render_report(directory)
        except (UserError, OSError, ValueError, KeyError) as error:
            problem = f"report not rendered: {error}"
    markdown_path, results_path = directory / "report.md", directory / "results.json"
    text = markdown_path.read_text() if markdown_path.is_file() else ""
    try:
        results = json.loads(results_path.read_text()) if results_path.is_file() else {}
        manifest_path = directory / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else None
    except (OSError, ValueError) as error:
        results, manifest = {}, None
        problem = problem or f"unreadable results: {error}"
    results = results if isinstance(results, dict) else {}
    manifest = manifest if isinstance(manifest, dict) else None
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), name)
    source = results.get("source") if isinstance(results.get("source"), str) else None
    if not source:
        match = _SOURCE.search(title)
        source = match.group(1) if match else ""
    runs, finished, failed = _run_counts(manifest, results)
    stopped = results.get("interrupted_runs")
    header, rows = headline_table(text)
    return ResultEntry(
        directory,
        name,
        title,
        source,
        _date(directory, manifest),
        runs,
        finished,
        failed,
        header,
        rows,
        problem,
        interrupted=len(stopped) if isinstance(stopped, dict | list) else None,
    )


def _count(value: int | None) -> str:
    return "–" if value is None else str(value)


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(row) for row in rows)]


OVERVIEW_HEADER = ["reproduction", "source", "date", "runs", "finished", "failed", "interrupted"]


def _overview_cells(entry: ResultEntry) -> list[str]:
    counts = [_count(value) for value in (entry.runs, entry.finished, entry.failed, entry.interrupted)]
    return [entry.name, entry.source or "–", entry.date, *counts]


def index_markdown(entries: list[ResultEntry], root: Path) -> str:
    lines = [f"# {_title(root)}", "", f"Reproductions and sweeps: {len(entries)}.", ""]
    overview = []
    for entry in entries:
        cells = _overview_cells(entry)
        if (entry.directory / "report.md").is_file():
            cells[0] = f"[{entry.name}]({entry.link('report.md')})"
        if (entry.directory / "report.html").is_file():
            cells[0] += f" ([html]({entry.link('report.html')}))"
        overview.append(cells)
    lines += _markdown_table(OVERVIEW_HEADER, overview)
    for entry in entries:
        lines += ["", f"## {_heading(entry)}", ""]
        if entry.problem:
            lines += [entry.problem, ""]
        lines += _markdown_table(entry.header, entry.rows) if entry.header else ["(no table in report.md)"]
    return "\n".join(lines) + "\n"


def _heading(entry: ResultEntry) -> str:
    return entry.title if entry.title.startswith(entry.name) else f"{entry.name}: {entry.title}"


def _title(root: Path) -> str:
    return f"Results under {root.resolve().name}"


def _anchor(entry: ResultEntry) -> str:
    return "r-" + re.sub(r"[^A-Za-z0-9_-]+", "-", entry.name)


def index_html(entries: list[ResultEntry], root: Path) -> str:
    title = _title(root)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{INDEX_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p>Reproductions and sweeps: {len(entries)}. Below each, the first table of its report.</p>",
        '<table class="overview"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in OVERVIEW_HEADER)
        + "</tr></thead><tbody>",
    ]
    for entry in entries:
        cells = [escape(text) for text in _overview_cells(entry)]
        cells[0] = f'<a href="#{_anchor(entry)}">{cells[0]}</a>'
        parts.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    parts.append("</tbody></table>")
    for entry in entries:
        parts.append(f'<section id="{_anchor(entry)}"><h2>{escape(_heading(entry))}</h2>')
        if (entry.directory / "report.html").is_file():
            parts.append(f'<p><a href="{entry.link("report.html")}">full report</a></p>')
        if entry.problem:
            parts.append(f'<p class="problem">{escape(entry.problem)}</p>')
        if entry.header:
            table = "\n".join(_markdown_table(entry.header, entry.rows))
            parts.append(markdown_to_html(table, entry.directory))
        else:
            parts.append("<p>(no table in report.md)</p>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_index(root: Path) -> str:
    """Write ``ROOT/index.html`` and ``ROOT/index.md`` over every result directory under ``root``;
    return the Markdown."""
    directories = find_result_dirs(root)
    if not directories:
        raise UserError(
            f"no reproduction or sweep directories under {root} "
            "(a directory with manifest.json, or with report.md and results.json)"
        )
    entries = [read_entry(directory, root) for directory in directories]
    text = index_markdown(entries, root)
    (root / "index.md").write_text(text)
    (root / "index.html").write_text(index_html(entries, root))
    return text
