"""Render a LabResult for the terminal with rich.

Width: on a terminal, the real width (rich reads it, and `COLUMNS` when set); piped or redirected
without `COLUMNS`, nothing is hard-wrapped: each table takes its natural width and each note
stays one line, for a pager or an editor to wrap. Numbers never wrap on a wide enough screen
(numeric columns are no-wrap and keep their widest cell); findings print as `key  value`
lines, so a key is never truncated.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table as RichTable

from precisionlab.report.cells import column_kinds, format_cell, is_prose_table
from precisionlab.results import LabResult, Table

__all__ = ["format_cell", "make_console", "render", "render_table"]

UNBOUNDED = 100_000
"""The console width used when output is piped: wide enough for any table, never reached by a rule."""
RULE_WIDTH = 100
"""The width of the heading rule above each result when output is piped."""


TEXT_MIN = 16
"""A text column never gets narrower than its longest word, up to this many characters."""
RECORD_WIDTH = 110
"""Prose records wrap at this width at most (or the terminal's): long lines of prose read badly."""
KEY_MAX = 32
"""The first column (the row's name) keeps its longest cell on one line up to this many characters."""


def render_table(console: Console, table: Table) -> None:
    """One table; wider than the console, it is printed in column groups (each repeating the first
    column), as pandas prints a wide frame, rather than squeezed until numbers wrap."""
    cells = [[format_cell(v, table.formats.get(c, "")) for c, v in zip(table.columns, row, strict=True)]
             for row in table.rows]
    if is_prose_table(table):
        render_records(console, table, cells)
        return
    kinds = column_kinds(table)
    minimum = [_min_width(column, [row[i] for row in cells], kind, first=i == 0)
               for i, (column, kind) in enumerate(zip(table.columns, kinds, strict=True))]
    natural = [max([len(table.columns[i]), *(len(row[i]) for row in cells)]) for i in range(len(table.columns))]
    groups = column_groups(minimum, console.width - 1)
    for number, group in enumerate(groups):
        title = table.title if number == 0 else f"{table.title} (continued, {number + 1}/{len(groups)})"
        room = console.width - 1 - 3 * len(group) - 1
        widths = allocate([minimum[i] for i in group], [natural[i] for i in group], room)
        # Cells and notes are data, never rich markup: "[x]" in a cell must print as "[x]".
        rich_table = RichTable(title=escape(title), title_justify="left", title_style="bold",
                               header_style="bold cyan")
        for index, width in zip(group, widths, strict=True):
            number_column = kinds[index] == "number"
            rich_table.add_column(escape(table.columns[index]), justify="right" if number_column else "left",
                                  no_wrap=number_column, width=width, overflow="fold")
        for row in cells:
            rich_table.add_row(*(escape(row[i]) for i in group))
        console.print(rich_table)
    if table.note:
        console.print(f"[dim]{escape(table.note)}[/dim]")
    console.print()


def render_records(console: Console, table: Table, cells: list[list[str]]) -> None:
    """A table of prose (the advisor's) as one block per row: its first cell as a heading, then one
    `column  text` line per other column, the text wrapped beside its label."""
    console.print(f"[bold]{escape(table.title)}[/bold]")
    for row in cells:
        console.print()
        console.print(f"[bold cyan]{escape(row[0])}[/bold cyan]")
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(style="cyan", no_wrap=True)
        grid.add_column(overflow="fold")
        for column, text in zip(table.columns[1:], row[1:], strict=True):
            grid.add_row(escape(column), escape(text))
        console.print(grid, width=min(console.width, RECORD_WIDTH))
    if table.note:
        console.print()
        console.print(f"[dim]{escape(table.note)}[/dim]")
    console.print()


def _min_width(column: str, cells: list[str], kind: str, first: bool = False) -> int:
    """Numbers: the widest cell (never wrapped). Text: its longest word up to TEXT_MIN characters, or
    for the first column (the row's name) its longest cell up to KEY_MAX."""
    words = [len(w) for text in [column, *cells] for w in text.split()] or [1]
    if kind == "number":
        return max([*(len(c) for c in cells), 1])
    if first:
        return max(min(max((len(c) for c in cells), default=1), KEY_MAX), min(max(words), TEXT_MIN))
    return min(max(words), TEXT_MIN)


def allocate(minimum: list[int], natural: list[int], available: int) -> list[int]:
    """Column widths: each at least its minimum and at most its natural width; the room left over
    after the minimums goes to the columns that want more, in proportion to what they lack."""
    widths = [min(m, n) if n >= m else n for m, n in zip(minimum, natural, strict=True)]
    widths = [max(w, m) if n >= m else w for w, m, n in zip(widths, minimum, natural, strict=True)]
    spare = available - sum(widths)
    wants = [max(n - w, 0) for w, n in zip(widths, natural, strict=True)]
    if spare <= 0 or not any(wants):
        return widths
    if sum(wants) <= spare:
        return [w + want for w, want in zip(widths, wants, strict=True)]
    extra = [spare * want // sum(wants) for want in wants]
    return [w + e for w, e in zip(widths, extra, strict=True)]


def column_groups(widths: list[int], available: int) -> list[list[int]]:
    """Split columns (minimum widths in characters) into groups that fit `available` characters with
    rich's borders (3 per column + 1); every group after the first starts with column 0 again."""
    def cost(group: list[int]) -> int:
        return sum(widths[i] + 3 for i in group) + 1

    groups: list[list[int]] = [[0]] if widths else []
    for index in range(1, len(widths)):
        if cost([*groups[-1], index]) > available and len(groups[-1]) > 1:
            groups.append([0])
        groups[-1].append(index)
    return groups


def piped(console: Console) -> bool:
    return console.width >= UNBOUNDED


def make_console(stderr: bool = False) -> Console:
    """The terminal's own width (or COLUMNS); unbounded when piped without COLUMNS (see module doc)."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return console
    return Console(stderr=stderr, width=UNBOUNDED, soft_wrap=True)


def render(result: LabResult, console: Console | None = None, findings: bool = True) -> None:
    console = console or make_console()
    heading = Rule(f"[bold]{escape(result.title)}")
    console.print(heading, width=RULE_WIDTH if piped(console) else None)
    if result.summary:
        console.print(escape(result.summary))
        console.print()
    for part in result.skipped:
        console.print(f"[yellow]skipped:[/yellow] {escape(part.message())}")
    if result.skipped:
        console.print()
    for table in result.sections:
        render_table(console, table)
    if findings and result.findings:
        render_findings(console, result)


def render_findings(console: Console, result: LabResult) -> None:
    """One `key  value` line per finding, keys padded to the longest: never truncated."""
    width = max(len(key) for key in result.findings)
    console.print("[bold]findings[/bold]")
    for key, value in result.findings.items():
        console.print(f"  [cyan]{escape(key.ljust(width))}[/cyan]  {escape(format_cell(value))}", soft_wrap=True,
                      highlight=False)
