"""How a table cell reads (shared by the terminal, HTML and CSV renderers; imports no renderer).

format_cell turns a value into the text every renderer shows; column_kind says whether a column
holds numbers (right-aligned, never wrapped) or text (left-aligned; long text wraps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from precisionlab.results import Scalar, Table

SHORT_TEXT = 24
"""Text cells up to this many characters (codes, names, 'yes') are kept on one line."""
PROSE_TEXT = 40
"""A text column whose cells average this many characters or more is prose."""


def format_cell(value: Scalar, spec: str = "") -> str:
    """The text of one cell: '—' for None, yes/no, inf/-inf/nan, else the column's format spec."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if spec:
            return format(value, spec)
        return f"{value:.6g}"
    if isinstance(value, int) and spec:
        return format(value, spec)
    return str(value)


def is_number(value: Scalar) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def column_kind(values: Sequence[Scalar]) -> str:
    """'number' when every non-empty cell is a number, 'prose' for long text, else 'text'.

    A string spelling a non-finite number ('inf', 'nan', '-inf') counts as a number, so a column of
    results with one overflow stays aligned."""
    present = [v for v in values if v is not None]
    if present and all(is_number(v) or (isinstance(v, str) and v in ("inf", "-inf", "nan")) for v in present):
        return "number"
    texts = [str(v) for v in present if isinstance(v, str)]
    if texts and sum(map(len, texts)) / len(texts) >= PROSE_TEXT:
        return "prose"
    return "text"


def column_kinds(table: Table) -> list[str]:
    return [column_kind(table.column(name)) for name in table.columns]


def is_prose_table(table: Table) -> bool:
    """A table read as text, one record at a time (the advisor's): three or more prose columns."""
    return sum(1 for kind in column_kinds(table) if kind == "prose") >= 3


def fail_rows(table: Table) -> list[str]:
    """The first cell of every row with a cell reading FAIL or ERROR (a check that did not pass).

    'FAILED (expected)' marks a row built to fail (a demonstration) and is not listed."""
    return [format_cell(row[0]) for row in table.rows
            if any(isinstance(v, str) and v.strip().upper() in ("FAIL", "ERROR") for v in row)]
