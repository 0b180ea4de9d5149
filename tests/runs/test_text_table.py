"""Terminal tables: each column as wide as its widest cell, two spaces between columns, no trailing space."""

from recombine.runs.text_table import aligned_columns


def test_columns_align_to_their_widest_cell() -> None:
    table = aligned_columns([["run", "bit error", "0-15"], ["dnc seed 0", "0.1", "-"], ["x", "0.0001", ""]])
    assert table.splitlines() == [
        "run         bit error  0-15",
        "dnc seed 0  0.1        -",
        "x           0.0001",
    ]
