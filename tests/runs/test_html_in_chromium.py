"""Issue 11, "what it must show": the HTML report opened in headless Chromium renders its tables and
images. A sweep written by hand (:mod:`toy_sweep`), its ``report.html``, a scripted reproduction's page
(converted Markdown with an embedded figure) and the index over both are loaded from ``file://``
with no network; a probe script injected into a copy of each page reads what the browser built
(the cells of every table, whether every ``<img>`` decoded: ``naturalWidth > 0``), and a screenshot
of the sweep report must not be blank. Skipped when no Chromium is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from PIL import Image

from recombine.runs.html_index import render_index
from recombine.runs.report import render
from toy_sweep import expected_cells, write_toy_sweep

matplotlib.use("Agg")

CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
    None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install chromium)"
)

# marks each <img> with data-loaded (decoded, naturalWidth > 0) and writes every table's cells and
# the marks as JSON into <pre id="probe">, once the page (and its images) finished loading
PROBE = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images).map((img) => (img.complete && img.naturalWidth > 0 ? 1 : 0));
  Array.from(document.images).forEach((img, k) => img.setAttribute("data-loaded", images[k]));
  const tables = Array.from(document.querySelectorAll("table")).map((table) =>
    Array.from(table.rows).map((row) => Array.from(row.cells).map((cell) => cell.textContent.trim())));
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({ images, tables });
  document.body.appendChild(out);
});
</script>"""
BROKEN_IMAGE = '<img src="no-such-file.png" alt="control: must not load">'


def _chromium(*args: str, profile: Path) -> str:
    command = [
        str(CHROMIUM),
        "--headless=new",
        "--no-sandbox",  # tests may run as root (containers, CI)
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _probe(page: Path, profile: Path, control: bool = False) -> dict[str, list]:
    """Load a copy of ``page`` (same directory, so relative links still resolve) with the probe."""
    copy = page.with_name(f"probe-{page.name}")
    extra = BROKEN_IMAGE if control else ""
    copy.write_text(page.read_text().replace("</body>", f"{extra}{PROBE}</body>"))
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", copy.as_uri(), profile=profile)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.DOTALL)
    assert found, dom[-2000:]
    seen = json.loads(unescape(found.group(1)))
    marks = re.findall(r'<img [^>]*data-loaded="([01])"', dom)  # the marks survive in the DOM
    assert [int(mark) for mark in marks] == seen["images"]
    return seen


def _scripted_report(directory: Path) -> Path:
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [0.1, 0.7, 0.9])
    fig.savefig(directory / "curve.png", dpi=60)
    plt.close(fig)
    (directory / "results.json").write_text(json.dumps({"trials": [{"seed": 0}, {"seed": 1}]}))
    (directory / "report.md").write_text(
        "# Scripted toy (BLOCK 5.2)\n\n| architecture | OOD |\n|---|---|\n| FNN | 0.00 ± 0.00 (0/2) |\n"
        "| SMFR | 1.00 ± 0.00 (2/2) |\n\n![curve](curve.png)\n"
    )
    return directory


def test_reports_and_index_render_their_tables_and_images_in_chromium(tmp_path: Path) -> None:
    root = tmp_path / "results"
    sweep = write_toy_sweep(root / "sweep")
    render(sweep, html=True)
    scripted = _scripted_report(root / "scripted")
    render_index(root)  # renders scripted/report.html, which is missing
    profile = tmp_path / "profile"
    cells = expected_cells()

    seen = _probe(sweep / "report.html", profile, control=True)
    assert seen["tables"] == [[cells["header"], cells["A"], cells["B"]]]
    assert seen["images"] == [1, 0]  # the embedded learning curves loaded; the control did not

    seen = _probe(scripted / "report.html", profile)
    assert seen["tables"] == [
        [["architecture", "OOD"], ["FNN", "0.00 ± 0.00 (0/2)"], ["SMFR", "1.00 ± 0.00 (2/2)"]]
    ]
    assert seen["images"] == [1]

    seen = _probe(root / "index.html", profile)
    overview, *headlines = seen["tables"]
    assert [row[0] for row in overview] == ["reproduction", "scripted", "sweep"]
    # runs, finished, failed, interrupted
    assert [row[3:] for row in overview[1:]] == [["2", "2", "–", "–"], ["4", "3", "1", "0"]]
    assert headlines[1] == [cells["header"], cells["A"], cells["B"]]
    assert seen["images"] == []

    # the screenshot shows a page, not a blank window: ink on white, and the figure's blue curve
    shot = tmp_path / "report.png"
    _chromium(
        f"--screenshot={shot}", "--window-size=1000,900", (sweep / "report.html").as_uri(), profile=profile
    )
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    assert pixels.shape == (900, 1000, 3)
    assert pixels.mean(axis=2).std() > 10
    assert ((pixels.mean(axis=2) < 128).mean()) > 0.002  # dark text and lines
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    assert ((blue - red > 60) & (blue - green > 20)).sum() > 100  # matplotlib's C0 line #1f77b4
