"""`precisionlab formats`: the derived format table, or one format's full code table."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import emit, lab_output_options
from precisionlab.labs import formats_table


@click.command("formats")
@click.argument("names", nargs=-1, metavar="[FORMAT]...")
@click.option("--codes", "codes_of", metavar="FORMAT", default=None,
              help="Print every code of a format of 8 bits or fewer (golden data; with --csv DIR also as CSV).")
@lab_output_options
def COMMAND(names: tuple[str, ...], codes_of: str | None, as_json: bool, out_dir: Path | None) -> None:
    """Limits of every format, each cell computed from (E, M, bias, encoding).

    FORMAT...: tabulate these instead of the registry: names, custom e<E>m<M>, IEEE P3109
    binary<K>p<P>[s|u][e|f], or p3109 (every P3109 format of width 8; p3109:K for width K).
    """
    result = formats_table.run(names) if codes_of is None else formats_table.codes_result(codes_of)
    emit(result, as_json, out_dir)
