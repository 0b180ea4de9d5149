"""Plain-text tables for the terminal: columns left-aligned to their widest cell, two spaces apart."""

from __future__ import annotations


def aligned_columns(rows: list[list[str]]) -> str:
    """``rows`` (the first usually a header), one line each, every column padded to its widest cell; no
    trailing spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )
