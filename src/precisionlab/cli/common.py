"""Options and output helpers shared by the lab commands."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from precisionlab.labs.result import LabResult

F = TypeVar("F", bound=Callable[..., Any])


class NonEmptyPath(click.Path):
    """click.Path that refuses an empty string (click would turn '' into '.', the current directory)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path is not a file or directory name", param, ctx)
        return super().convert(value, param, ctx)


def lab_output_options(func: F) -> F:
    """Add --json (print the result as JSON) and --out DIR (write JSON and PNGs there)."""

    @click.option("--json", "as_json", is_flag=True, help="Print the result as strict JSON.")
    @click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
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


@contextlib.contextmanager
def progress_bar(total: int, description: str) -> Iterator[Callable[..., None]]:
    """A transient rich progress bar on stderr, drawn only when stderr is a terminal.

    Yields `step(description, advance=1)`. Off a terminal nothing is drawn (rich would still
    print an empty line when the bar stops, which would put a blank line before a one-line error).
    """
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda *_args, **_kwargs: None
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def step(text: str, advance: int = 1) -> None:
            bar.update(task, description=text, advance=advance)

        yield step
