"""`precisionlab explain VALUE`: what a format does to one value (or what a code means)."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import emit, lab_output_options
from precisionlab.labs.explain import explain


@click.command("explain", context_settings={"ignore_unknown_options": True})
@click.argument("value")
@click.option("--format", "-f", "format_spec", default="bf16", show_default=True,
              help="Format name, custom e<E>m<M>, or 'all'.")
@click.option("--rounding", default="nearest_even", show_default=True,
              help="nearest_even | nearest_away | toward_zero | stochastic")
@click.option("--overflow", default=None, help="inf | nan | saturate (default: the format's own).")
@lab_output_options
def COMMAND(value: str, format_spec: str, rounding: str, overflow: str | None, as_json: bool,
            out_dir: Path | None) -> None:
    """Show VALUE's sign/exponent/mantissa fields, code, neighbours, ulp and rounding error.

    VALUE may be a number (0.1, -3e5, inf) or a code in hex (0x7e) to decode.
    """
    emit(explain(value, format_spec, rounding, overflow), as_json, out_dir)
