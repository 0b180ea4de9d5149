"""A report as one static HTML page (``recombine report DIR --html`` writes ``DIR/report.html``).

Self-contained and offline: inline CSS, no scripts, the learning-curve PNG embedded as a base64
``data:`` URI, so the file can be mailed or opened from any directory. The table cells are the same
text as in ``report.md``. A grid's page is built from its table (:func:`render_html`); a scripted
reproduction, which writes its own ``report.md``, gets the same kind of page by converting that
Markdown (:func:`render_markdown_report`; Python-Markdown with its ``tables`` extension), with every
local image it references embedded.
"""

from __future__ import annotations

import base64
import mimetypes
from html import escape
from pathlib import Path
from urllib.parse import unquote, urlparse
from xml.etree.ElementTree import Element

import markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f0f0; }
td.failed { color: #a00; }
img { max-width: 100%; }
footer { color: #666; font-size: 0.9em; margin-top: 2em; }
"""


def data_uri(path: Path) -> str:
    """The file as a base64 ``data:`` URI (its type guessed from the suffix), for offline pages."""
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _cell(text: str) -> str:
    css = ' class="failed"' if "failed" in text else ""
    return f"<td{css}>{escape(text)}</td>"


def render_html(
    *,
    title: str,
    paragraphs: list[str],
    header: list[str],
    rows: list[list[str]],
    failed: dict[str, str],
    unfinished: list[str],
    figures: list[tuple[Path, str]],
    footer: str,
    after_table: list[str] | None = None,
    after_table_markdown: str = "",
    base: Path | None = None,
    interrupted: dict[str, str] | None = None,
) -> str:
    """The page's HTML text (each figure, a PNG with its caption, is read and embedded).
    ``after_table_markdown`` (further tables, e.g. accuracy by depth) is converted below the table."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    parts += [f"<p>{escape(text)}</p>" for text in paragraphs]
    parts.append("<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr></thead>")
    parts.append("<tbody>")
    parts += ["<tr>" + "".join(_cell(text) for text in row) + "</tr>" for row in rows]
    parts.append("</tbody></table>")
    parts += [f"<p>{escape(text)}</p>" for text in after_table or []]
    if after_table_markdown.strip():
        parts.append(markdown_to_html(after_table_markdown, base or Path(".")))
    if failed:
        parts.append(f"<h2>Failed runs ({len(failed)})</h2><ul>")
        parts += [f"<li><code>{escape(run)}</code>: {escape(reason)}</li>" for run, reason in failed.items()]
        parts.append("</ul><p>See <code>RUN/failure.json</code> and <code>RUN/train.log</code>.</p>")
    if interrupted:
        parts.append(f"<h2>Interrupted runs ({len(interrupted)})</h2><ul>")
        parts += [f"<li><code>{escape(run)}</code>: {escape(text)}</li>" for run, text in interrupted.items()]
        parts.append("</ul><p>The command that started them continues them from their checkpoints.</p>")
    if unfinished:
        parts.append(f"<h2>Missing or unfinished runs ({len(unfinished)})</h2><ul>")
        parts += [f"<li><code>{escape(run)}</code></li>" for run in unfinished]
        parts.append("</ul>")
    for figure, caption in figures:
        parts.append(
            f'<figure><img src="{data_uri(figure)}" alt="{escape(caption)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    parts.append(f"<footer>{escape(footer)}</footer></body></html>")
    return "\n".join(parts) + "\n"


def local_file(base: Path, reference: str) -> Path | None:
    """The file a relative link in a page under ``base`` points to, when it exists inside ``base``
    (not a URL, not an absolute path, not outside the directory); otherwise None."""
    parsed = urlparse(reference)
    if parsed.scheme or parsed.netloc or not parsed.path or parsed.path.startswith("/"):
        return None
    root = base.resolve()
    path = (root / unquote(parsed.path)).resolve()
    return path if path.is_relative_to(root) and path.is_file() else None


class _EmbedLocalImages(Treeprocessor):
    """Replace the ``src`` of every ``<img>`` that names a file under ``base`` by its ``data:`` URI."""

    def __init__(self, md: markdown.Markdown, base: Path) -> None:
        super().__init__(md)
        self.base = base

    def run(self, root: Element) -> None:
        for image in root.iter("img"):
            path = local_file(self.base, image.get("src", ""))
            if path is not None:
                image.set("src", data_uri(path))


class _EmbedLocalImagesExtension(Extension):
    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def extendMarkdown(self, md: markdown.Markdown) -> None:  # noqa: N802 (Python-Markdown's API)
        md.treeprocessors.register(_EmbedLocalImages(md, self.base), "embed_local_images", 0)


def markdown_to_html(text: str, base: Path) -> str:
    """HTML body text of Markdown with pipe tables; local images (relative to ``base``) embedded."""
    return markdown.markdown(text, extensions=["tables", _EmbedLocalImagesExtension(base)])


def render_markdown_page(text: str, base: Path) -> str:
    """A whole static page for a Markdown report; the title is its first ``# `` heading."""
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), base.name)
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
                markdown_to_html(text, base),
                "</body></html>",
            ]
        )
        + "\n"
    )


def render_markdown_report(directory: Path) -> Path:
    """Write ``DIRECTORY/report.html`` from ``DIRECTORY/report.md`` (a scripted reproduction's
    report); its path."""
    page = render_markdown_page((directory / "report.md").read_text(), directory)
    path = directory / "report.html"
    path.write_text(page)
    return path
