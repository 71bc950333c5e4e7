"""`precisionlab formats`: the derived format table, or one format's full code table."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import NonEmptyPath, emit, lab_output_options
from precisionlab.labs import formats_table


@click.command("formats")
@click.argument("names", nargs=-1, metavar="[FORMAT]...")
@click.option("--codes", "codes_of", metavar="FORMAT", default=None,
              help="Print every code of a format of 8 bits or fewer (golden data).")
@click.option("--csv", "csv_path", type=NonEmptyPath(dir_okay=False, path_type=Path), default=None,
              help="With --codes: also write the code table as CSV to this file.")
@lab_output_options
def COMMAND(names: tuple[str, ...], codes_of: str | None, csv_path: Path | None, as_json: bool,
            out_dir: Path | None) -> None:
    """Limits of every format, each cell computed from (E, M, bias, encoding).

    FORMAT...: tabulate these instead of the registry: names, custom e<E>m<M>, IEEE P3109
    binary<K>p<P>[s|u][e|f], or p3109 (every P3109 format of width 8; p3109:K for width K).
    """
    if csv_path is not None and codes_of is None:
        raise click.UsageError("--csv needs --codes FORMAT")
    result = formats_table.run(names)
    if codes_of is not None:
        table = formats_table.code_table(codes_of)
        result.sections = [table]
        result.figures = []
        result.findings = {}
        result.title = table.title
        if csv_path is not None:
            from precisionlab.report.outputs import atomic_write_text, table_csv

            atomic_write_text(csv_path, table_csv(table))
            if not as_json:
                click.echo(f"wrote {csv_path}")
    emit(result, as_json, out_dir)
