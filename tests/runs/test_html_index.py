"""The results index over copies of the real reproduction outputs in docs/reproductions/results
(scripted experiments' report.md + results.json, and a grid's copied results) and a hand-written sweep
(:mod:`toy_sweep`) nested deeper in the tree."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import matplotlib
import pytest

from recombine.errors import UserError
from recombine.runs.html_index import find_result_dirs, headline_table, read_entry, render_index
from toy_sweep import RECIPE, expected_cells, write_toy_sweep

matplotlib.use("Agg")

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "results"
requires_results = pytest.mark.skipif(not RESULTS.is_dir(), reason="docs/reproductions/results not found")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a":
            self.hrefs.append(values["href"] or "")
        if tag in ("img", "script", "link"):
            self.srcs.append(values.get("src") or values.get("href") or "")
        if "id" in values:
            self.ids.add(values["id"] or "")


def _markdown_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(RESULTS, root / "papers")
    write_toy_sweep(root / "sweeps" / "toy")
    return root


@requires_results
def test_index_lists_every_result_directory_with_its_headline_table(tree: Path) -> None:
    copies = sorted(p.name for p in RESULTS.iterdir() if (p / "report.md").is_file())
    # archived grids (with runs/) are dated by their run records; date a report-only copy by its results.json
    copies.sort(key=lambda name: (RESULTS / name / "manifest.json").is_file())
    assert copies, "no reproduction results to test against"
    stamp = datetime(2026, 1, 2, 3, 4, tzinfo=UTC).timestamp()
    os.utime(tree / "papers" / copies[0] / "results.json", (stamp, stamp))
    for seed, minute in ((1, 5), (2, 7), (3, 6)):  # a sweep is dated by its newest run record
        later = datetime(2026, 1, 2, 3, minute, tzinfo=UTC).timestamp()
        os.utime(tree / "sweeps" / "toy" / "runs" / f"A--c--seed{seed}" / "result.json", (later, later))
    killed = tree / "sweeps" / "toy" / "runs" / "B--c--seed1" / "failure.json"
    os.utime(killed, (stamp, stamp))

    markdown = render_index(tree)

    # the index renders report.html beside a report; it never rewrites the report itself (an archived
    # grid re-rendered under today's recipe could differ from what was committed)
    for name in copies:
        for file in ("report.md", "results.json"):
            copied = (tree / "papers" / name / file).read_bytes()
            assert copied == (RESULTS / name / file).read_bytes(), f"{name}/{file} rewritten"
    names = [f"papers/{name}" for name in sorted(copies)] + ["sweeps/toy"]
    assert [p.relative_to(tree).as_posix() for p in find_result_dirs(tree)] == sorted(names)
    entries = {name: read_entry(tree / name, tree) for name in names}
    assert entries[f"papers/{copies[0]}"].date == "2026-01-02 03:04 UTC"
    for name in names:
        directory = tree / name
        entry = entries[name]
        assert entry.problem == ""
        assert (directory / "report.html").is_file()  # rendered for the index
        report = (directory / "report.md").read_text()
        # the headline cells are a table of report.md, row for row (its first table)
        table_lines = _markdown_rows(report)
        assert table_lines[0] == "| " + " | ".join(entry.header) + " |"
        for row, line in zip(entry.rows, table_lines[2:], strict=False):
            assert line == "| " + " | ".join(row) + " |"
        assert len(entry.rows) >= 1
        # ... and are in the index
        for row in entry.rows:
            assert "| " + " | ".join(row) + " |" in markdown
        assert f"[{name}]({name}/report.md) ([html]({name}/report.html))" in markdown

    # run counts: seeds x settings / architectures, as in each experiment's config
    for name in copies:
        config = json.loads((tree / "papers" / name / "results.json").read_text()).get("config", {})
        rows = config.get("settings") or config.get("architectures")
        if isinstance(config.get("seeds"), list) and rows:
            assert entries[f"papers/{name}"].runs == len(config["seeds"]) * len(rows), name

    toy = entries["sweeps/toy"]
    cells = expected_cells()
    assert toy.date == "2026-01-02 03:07 UTC"
    assert (toy.runs, toy.finished, toy.failed, toy.interrupted) == (4, 3, 1, 0)  # 3 A seeds, 1 killed B
    assert toy.source == RECIPE["source"]
    assert toy.header == cells["header"]
    assert toy.rows == [cells["A"], cells["B"]]
    assert "| sweeps/toy | nowhere | " in markdown.replace(
        "[sweeps/toy](sweeps/toy/report.md) ([html](sweeps/toy/report.html))", "sweeps/toy"
    )


@requires_results
def test_index_html_is_offline_and_its_links_resolve(tree: Path) -> None:
    render_index(tree)
    page = (tree / "index.html").read_text()
    links = _Links()
    links.feed(page)
    assert not links.srcs  # no images, scripts or stylesheets to fetch
    assert "http://" not in page and "https://" not in page
    reports = [href for href in links.hrefs if not href.startswith("#")]
    assert len(reports) == len(find_result_dirs(tree))
    for href in reports:
        assert not href.startswith("/") and (tree / unquote(href)).is_file(), href
    for href in links.hrefs:
        if href.startswith("#"):
            assert href[1:] in links.ids
    # every report page opens offline: its images are embedded
    for href in reports:
        report = _Links()
        report.feed((tree / unquote(href)).read_text())
        assert all(src.startswith("data:image/") for src in report.srcs), href


def test_report_html_is_rerendered_only_when_missing_or_stale(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"trials": [{}, {}]}))
    (tmp_path / "report.md").write_text("# Toy (BLOCK 5.1)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    entry = read_entry(tmp_path, tmp_path)
    assert (entry.name, entry.source, entry.runs, entry.failed, entry.interrupted) == (
        ".",
        "BLOCK 5.1",
        2,
        None,
        None,
    )
    assert entry.link("report.html") == "report.html"
    html = tmp_path / "report.html"
    html.write_text("kept")
    read_entry(tmp_path, tmp_path)
    assert html.read_text() == "kept"  # newer than report.md
    old = html.stat().st_mtime - 100
    os.utime(html, (old, old))
    read_entry(tmp_path, tmp_path)
    assert "<td>1</td>" in html.read_text()


def test_a_broken_sweep_is_listed_with_its_problem(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text(json.dumps({"reproduction": "no-such-reproduction", "runs": []}))
    write_toy_sweep(tmp_path / "toy")
    markdown = render_index(tmp_path)
    entry = read_entry(broken, tmp_path)
    assert entry.problem.startswith("report not rendered:") and "no-such-reproduction" in entry.problem
    assert entry.problem in markdown and escape(entry.problem) in (tmp_path / "index.html").read_text()
    assert "[broken]" not in markdown and "broken/report.html" not in markdown  # nothing to link to
    assert "| A | " in markdown  # the other sweep is still indexed


def test_no_result_directories_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "runs" / "x").mkdir(parents=True)
    with pytest.raises(UserError, match="manifest.json, or with report.md and results.json"):
        render_index(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        render_index(tmp_path / "missing")


def test_headline_table_is_the_first_pipe_table() -> None:
    text = (
        "# T\n\nintro | not a table\n\n| a | b \\| c |\n|:--|--:|\n| 1 | x \\| y |\n|2|3|\n"
        "\nafter\n\n| z |\n|---|\n| 9 |\n"
    )
    assert headline_table(text) == (["a", "b | c"], [["1", "x | y"], ["2", "3"]])
    assert headline_table("# no table\n") == ([], [])
