"""Render a LabResult for the terminal with rich."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from precisionlab.labs.result import LabResult, Scalar, Table


def format_cell(value: Scalar, spec: str = "") -> str:
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


def render_table(console: Console, table: Table) -> None:
    # Cells and notes are data, never rich markup: "[x]" in a cell must print as "[x]".
    rich_table = RichTable(title=escape(table.title), title_justify="left", title_style="bold",
                           header_style="bold cyan")
    for index, column in enumerate(table.columns):
        textual = any(isinstance(row[index], str) for row in table.rows)
        rich_table.add_column(escape(column), justify="left" if textual else "right")
    for row in table.rows:
        cells = (escape(format_cell(v, table.formats.get(c, ""))) for c, v in zip(table.columns, row, strict=True))
        rich_table.add_row(*cells)
    console.print(rich_table)
    if table.note:
        console.print(f"[dim]{escape(table.note)}[/dim]")
    console.print()


def make_console(stderr: bool = False) -> Console:
    """A console that does not squeeze wide tables into 80 columns when output is piped."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=200)
    return console


def render(result: LabResult, console: Console | None = None, findings: bool = True) -> None:
    console = console or make_console()
    console.rule(f"[bold]{escape(result.title)}")
    if result.summary:
        console.print(escape(result.summary))
        console.print()
    for part in result.skipped:
        console.print(f"[yellow]skipped[/yellow] {escape(part.message())}")
    if result.skipped:
        console.print()
    for table in result.sections:
        render_table(console, table)
    if findings and result.findings:
        keys = RichTable(title="findings", title_justify="left", title_style="bold", header_style="bold cyan")
        keys.add_column("key")
        keys.add_column("value", justify="right")
        for key, value in result.findings.items():
            keys.add_row(escape(key), escape(format_cell(value)))
        console.print(keys)
