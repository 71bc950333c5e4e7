"""Options and output helpers shared by the lab commands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from precisionlab.labs.result import LabResult

F = TypeVar("F", bound=Callable[..., Any])


def lab_output_options(func: F) -> F:
    """Add --json (print the result as JSON) and --out DIR (write JSON and PNGs there)."""

    @click.option("--json", "as_json", is_flag=True, help="Print the result as strict JSON.")
    @click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Directory for the result's JSON and PNG plots.")
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def emit(result: LabResult, as_json: bool, out_dir: Path | None) -> None:
    """Render a lab result: JSON or terminal tables, and files under out_dir."""
    from precisionlab.report.outputs import dumps, write_lab

    written = write_lab(result, out_dir) if out_dir is not None else []
    if as_json:
        click.echo(dumps(result.to_dict()))
        return
    from precisionlab.report.terminal import render

    render(result)
    for path in written:
        click.echo(f"wrote {path}")


def positive_int(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """click callback: reject zero and negative sizes with a clear message."""
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be a positive integer, got {value}")
    return value
