"""The sweep report (Markdown and HTML) against hand-computed aggregates, on a grid directory written
by hand in the store's format (:mod:`toy_sweep`): three finished seeds of one row, a failed trial in
another; and the HTML page of a scripted reproduction's own report.md."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
import pytest

from recombine.errors import UserError
from recombine.runs.html_report import local_file, render_markdown_report
from recombine.runs.report import collect, render
from toy_sweep import expected_cells, write_toy_sweep

matplotlib.use("Agg")


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    return write_toy_sweep(tmp_path)


def test_report_tables_match_hand_computed_aggregates(grid: Path) -> None:
    cells = expected_cells()
    markdown = render(grid, html=True)
    assert "| " + " | ".join(cells["A"]) + " |" in markdown
    assert "| " + " | ".join(cells["B"]) + " |" in markdown
    assert "- runs/B--c--seed1: killed by SIGKILL" in markdown
    _, results = collect(grid)
    assert results["failed_runs"] == {"runs/B--c--seed1": "killed by SIGKILL"}
    assert results["table"]["A"]["c"]["ood"]["success_rate"] == pytest.approx(2 / 3)

    page = (grid / "report.html").read_text()
    assert "".join(f"<td>{text}</td>" for text in cells["A"]) in page
    assert '<td class="failed">failed (1)</td>' in page
    assert "<code>runs/B--c--seed1</code>: killed by SIGKILL" in page
    # offline: the learning-curve PNG is embedded, nothing is fetched
    png = base64.b64encode((grid / "curves.png").read_bytes()).decode("ascii")
    assert f'src="data:image/png;base64,{png}"' in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_html_is_only_for_grids(grid: Path) -> None:
    with pytest.raises(UserError, match="single run"):
        render(grid / "runs" / "A--c--seed1", html=True)
    assert render(grid).startswith("# toy: a hand-written grid")


class _Collect(HTMLParser):
    """Tables as lists of rows of cell texts, and the ``src`` of every image."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_markdown_report_page_has_its_tables_and_embedded_images(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "fig one.png", dpi=20)
    plt.close(fig)
    (tmp_path / "outside.png").write_bytes(b"not inside the report directory")
    report = tmp_path / "report"
    report.mkdir()
    (tmp_path / "fig one.png").rename(report / "fig one.png")
    (report / "report.md").write_text(
        "# Toy (paper Tab. 9)\n\nSome **text**.\n\n"
        "| arch | OOD | paper |\n|---|---|---|\n| FNN | 0.10 ± 0.01 (0/3) | 0.187 |\n| **mean** | 1 | 2 |\n\n"
        "![a figure](fig%20one.png)\n![escape](../outside.png)\n![gone](missing.png)\n"
    )
    page = render_markdown_report(report).read_text()
    parsed = _Collect()
    parsed.feed(page)
    rows = [["arch", "OOD", "paper"], ["FNN", "0.10 ± 0.01 (0/3)", "0.187"], ["mean", "1", "2"]]
    assert parsed.tables == [rows]
    embedded = "data:image/png;base64," + base64.b64encode((report / "fig one.png").read_bytes()).decode()
    # the local image is embedded; a link out of the directory or to a missing file is left as it is
    assert parsed.images == [embedded, "../outside.png", "missing.png"]
    assert re.search(r"<title>Toy \(paper Tab. 9\)</title>", page)
    assert "<strong>text</strong>" in page and "<script" not in page


LINKS = [
    ("a.png", True),
    ("sub/b.png", True),
    ("sub/../a.png", True),
    ("../c.png", False),  # exists, but outside the report's directory
    ("{base}/a.png", False),  # absolute
    ("file://{base}/a.png", False),
    ("http://example.org/a.png", False),
    ("nothing.png", False),
]


@pytest.mark.parametrize(("reference", "inside"), LINKS)
def test_local_file_accepts_only_files_inside_the_directory(
    tmp_path: Path, reference: str, inside: bool
) -> None:
    base = tmp_path / "d"
    (base / "sub").mkdir(parents=True)
    for path in (base / "a.png", base / "sub" / "b.png", tmp_path / "c.png"):
        path.write_bytes(b"x")
    reference = reference.format(base=base)
    found = local_file(base, reference)
    assert (found is not None) == inside
    if inside:
        assert found == (base / reference).resolve()


def test_the_footer_names_the_gpus_runs_trained_on(grid: Path) -> None:
    assert "Runs trained on" not in render(grid)  # hand-written runs without a device: the CPU
    assert collect(grid)[1]["trained_on"] == ["cpu"]
    result_path = grid / "runs" / "A--c--seed2" / "result.json"
    result = json.loads(result_path.read_text())
    result["devices"] = [{"from_step": 0, "device": "cuda:0 (GPU X)"}, {"from_step": 10, "device": "cpu"}]
    result_path.write_text(json.dumps(result))
    assert collect(grid)[1]["trained_on"] == ["cpu", "cuda:0 (GPU X)"]
    assert "Runs trained on: cpu, cuda:0 (GPU X)" in render(grid)


@pytest.mark.parametrize("devices", [None, [None, {"from_step": 3}, {"device": None}], "cuda"])
def test_odd_device_records_do_not_break_the_report(grid: Path, devices: object) -> None:
    result_path = grid / "runs" / "A--c--seed1" / "result.json"
    result = json.loads(result_path.read_text())
    result["devices"] = devices
    result_path.write_text(json.dumps(result))
    assert "Runs trained on" not in render(grid)
