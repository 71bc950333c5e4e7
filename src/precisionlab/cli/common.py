"""Options and output helpers shared by every command: the command-line conventions live here.

A new command gets them all by using `lab_output_options` and `emit` (see docs/cli.md):

- `--json` prints strict JSON on stdout; `--out DIR` writes the result's JSON and figures there;
  `--csv DIR` writes every table as `<lab>_<table>.csv`; `--svg` adds an SVG beside each PNG.
- Output folders are opened (and so checked for writability) before the command does any work, and
  written whole: files go to a staging folder and move into place only when the command succeeds,
  so an error or Ctrl-C leaves nothing half-written.
- `progress(...)` draws a transient bar on a terminal and, when stderr is not a terminal (CI logs,
  pipes), one line per finished step with the time so far. The model commands use `StepProgress`
  (cli.progress, re-exported here). Off a terminal every command runs under a heartbeat (cli.progress
  Heartbeat, started by cli.main): a line at least every 5 s naming what it does (`doing`, `activity`).
- Numbers typed by the user go through `parse_real` (which refuses what float64 would silently turn
  into inf or 0); rounding modes and overflow policies through `rounding_option` / `overflow_option`
  (every accepted spelling listed in the help, the canonical name handed on).
Errors, exit codes, Ctrl-C and option spelling are handled once for every command in `cli.main`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import click

from precisionlab.cli.progress import (
    HEARTBEAT_S,
    StepProgress,
    activity,
    busy_machine_threads,
    busy_threads,
    doing,
    duration,
    progress_line,
    set_torch_threads,
    stderr_is_terminal,
)
from precisionlab.results import LabResult

F = TypeVar("F", bound=Callable[..., Any])

QUIET_S = 2.0
"""Off a terminal, progress lines start only once the work has taken this long."""
LOG_EVERY_STEPS = 20
"""Off a terminal, a progress of at most this many steps prints every step..."""
LOG_EVERY_S = 5.0
"""... and a longer one at most one line per this many seconds (and its last step)."""
OUTPUTS = "precisionlab.outputs"
"""click context meta key: the Outputs of the running command."""
ARGV = "precisionlab.argv"
"""click context meta key (root context): the arguments as typed after `precisionlab`."""


class NonEmptyPath(click.Path):
    """click.Path that refuses an empty string (click would turn '' into '.', the current directory)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path is not a file or directory name", param, ctx)
        return super().convert(value, param, ctx)


# ---- output folders ------------------------------------------------------------------------------


@dataclass
class Outputs:
    """Where the running command writes files: its open staging folders and what it wrote there."""

    out: Path | None = None
    out_stage: Path | None = None
    csv: Path | None = None
    csv_stage: Path | None = None
    svg: bool = False
    written: list[Path] = field(default_factory=list)
    folders: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def commit(self) -> None:
        """Move the staged files into place now (before anything is printed); idempotent."""
        self.folders.close()


def current_outputs() -> Outputs | None:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    value = ctx.meta.get(OUTPUTS)
    return value if isinstance(value, Outputs) else None


def provenance() -> dict[str, object]:
    """The provenance of the running command: version, commit, machine, the command as typed and its options."""
    from precisionlab.report.provenance import collect

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return collect()
    argv = ctx.find_root().meta.get(ARGV)
    return collect(argv if isinstance(argv, list) else None, dict(ctx.params))


@contextlib.contextmanager
def open_outputs(out_dir: Path | None, csv_dir: Path | None, svg: bool) -> Iterator[Outputs]:
    """Open the --out and --csv folders (staging inside each) for the command's whole run."""
    from precisionlab.report.folders import files_folder

    outputs = Outputs(out=out_dir, csv=csv_dir, svg=svg)
    with outputs.folders as stack:
        if out_dir is not None:
            outputs.out_stage = stack.enter_context(files_folder(out_dir))
        if csv_dir is not None:
            outputs.csv_stage = stack.enter_context(files_folder(csv_dir))
        yield outputs


def lab_output_options(func: F) -> F:
    """Add --json, --out DIR, --csv DIR and --svg; the folders are opened before the command runs."""

    @click.option("--json", "as_json", is_flag=True, help="Print the result as strict JSON.")
    @click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
                  help="Directory for the result's JSON and PNG plots.")
    @click.option("--csv", "csv_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
                  help="Directory for every table of the result as CSV (<lab>_<table>.csv).")
    @click.option("--svg", is_flag=True, help="With --out: an SVG beside each PNG.")
    @functools.wraps(func)
    def wrapper(*args: Any, csv_dir: Path | None = None, svg: bool = False, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        with open_outputs(kwargs.get("out_dir"), csv_dir, svg) as outputs:
            ctx.meta[OUTPUTS] = outputs
            value = func(*args, **kwargs)
        if not kwargs.get("as_json"):
            for path in outputs.written:
                click.echo(f"wrote {path}")
        return value
    # (emit commits the folders before it prints; the `with` commits them for a command that never emits)

    return wrapper  # type: ignore[return-value]


def emit(result: LabResult, as_json: bool, out_dir: Path | None = None, findings: bool = True) -> None:
    """Render a lab result (JSON or terminal tables) and stage its files in the command's folders.

    findings=False leaves the findings out of the terminal view (a result with thousands of keys; JSON
    keeps them). Called outside `lab_output_options` (from Python), out_dir is written directly, whole."""
    from precisionlab.report.outputs import dumps, write_csv_files, write_lab, write_lab_files

    outputs = current_outputs()
    if outputs is None:
        written = write_lab(result, out_dir) if out_dir is not None else []
        outputs = Outputs(written=written)
    else:
        with _writing(outputs):
            if outputs.out_stage is not None and outputs.out is not None:
                names = [p.name for p in write_lab_files(result, outputs.out_stage, provenance(), outputs.svg)]
                outputs.written += [outputs.out / name for name in names]
            if outputs.csv_stage is not None and outputs.csv is not None:
                outputs.written += [outputs.csv / p.name for p in write_csv_files([result], outputs.csv_stage)]
        outputs.commit()  # the files are whole before the first line is printed
    if as_json:
        click.echo(dumps(result.to_dict()))
        return
    from precisionlab.report.terminal import render

    render(result, findings=findings)


@contextlib.contextmanager
def _writing(outputs: Outputs) -> Iterator[None]:
    """Off a terminal, the heartbeat of StepProgress while the result's files are drawn and written (a model
    command's figures took 12 s under load after its last step line); nothing for a command without files."""
    if (outputs.out_stage is None and outputs.csv_stage is None) or stderr_is_terminal():
        yield
        return
    with StepProgress(terminal=False) as progress:
        progress.start("writing the results", 0)
        yield


def check_writable(path: Path, option: str = "--out") -> None:
    """Refuse, before any work, a destination `path` (a file or a folder to be created or replaced) that cannot be
    written: ValueError, one line naming the option and the path.

    The folder it goes into (made when missing) must be a directory in which a file can be created. That is
    probed by creating and removing an empty temporary file there (in the nearest existing ancestor when the
    folder is still to be made), which catches /proc, a read-only mount and a folder without write permission
    alike, also for root, whom permission bits do not stop."""
    target = path.expanduser().absolute()
    existing = target.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {path}: {existing} is a file, not a folder to write into")
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".precisionlab-probe-")
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ValueError(f"{option} {path}: cannot write there: creating a file in {existing} failed ({reason})"
                         ) from None
    os.close(handle)
    os.unlink(probe)


# ---- option values ---------------------------------------------------------------------------------


def positive_int(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """click callback: reject zero and negative sizes with a clear message."""
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be a positive integer, got {value}")
    return value


class EnumName(click.ParamType):
    """A rounding mode or overflow policy: its canonical name or any alias the library accepts (case does
    not matter), turned into the canonical name, so the output always names the mode it used. The help
    lists every accepted spelling; anything else is refused with the canonical names and the closest:
    `--rounding: unknown rounding mode 'nearst': choose one of nearest_even, ... (did you mean nearest_even?)`.
    `default_names` are spellings that mean "the format's own policy" (P3109's SatNone): passed on as typed."""

    def __init__(self, kind: type[Enum], what: str, default_names: tuple[str, ...] = ()) -> None:
        self.kind, self.what, self.default_names = kind, what, default_names
        self.name = what.split()[-1]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import difflib

        from precisionlab.rounding.modes import parse_enum

        if isinstance(value, str) and value.strip().lower() in self.default_names:
            return value.strip()
        try:
            return parse_enum(self.kind, value, self.what).value
        except ValueError:
            choices = [str(m.value) for m in self.kind]
            close = difflib.get_close_matches(str(value).strip().lower(), choices, n=2, cutoff=0.5)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            self.fail(f"unknown {self.what} {value!r}: choose one of {', '.join(choices)}{hint}; "
                      "--help lists the other accepted spellings", param, ctx)

    def help_text(self) -> str:
        from precisionlab.rounding.modes import spellings

        parts = []
        for name, aliases in spellings(self.kind).items():
            parts.append(f"{name} ({', '.join(aliases)})" if aliases else name)
        if self.default_names:
            parts.append(f"{' / '.join(self.default_names)} (the format's own)")
        return " | ".join(parts)


def rounding_option(default: str = "nearest_even") -> Callable[[F], F]:
    from precisionlab.rounding.modes import Rounding

    kind = EnumName(Rounding, "rounding mode")
    return click.option("--rounding", type=kind, default=default, show_default=True,
                        help=f"Rounding mode (case does not matter; other spellings in brackets): {kind.help_text()}.")


def overflow_option() -> Callable[[F], F]:
    from precisionlab.formats import Overflow
    from precisionlab.rounding.modes import P3109_DEFAULT_OVERFLOW

    kind = EnumName(Overflow, "overflow policy", P3109_DEFAULT_OVERFLOW)
    return click.option("--overflow", type=kind, default=None,
                        help=f"Overflow policy (default: the format's own; other spellings in brackets): "
                             f"{kind.help_text()}.")


def split_commas(values: tuple[str, ...]) -> list[str]:
    """Items of a repeatable, comma-separated option: ("a,b", "c") -> ["a", "b", "c"] (blanks dropped).

    ValueError when the option was given but holds no item (`--schemes ""`, `--tasks ,`): an empty list is
    bad input, never a silent default."""
    items = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if values and not items:
        raise ValueError(f"{option_of(values)}: an empty list; give at least one item, or leave the option out "
                         "for its default")
    return items


def nonblank(values: tuple[str, ...]) -> list[str]:
    """The values of a repeatable option taken whole (glob patterns); ValueError for a blank one (`--include ""`
    would match no name and so quietly change nothing)."""
    if any(not value.strip() for value in values):
        raise ValueError(f"{option_of(values)}: an empty value; give a pattern, or leave the option out")
    return [value.strip() for value in values]


def option_of(values: object) -> str:
    """The option of the running command whose parsed value is `values` (its longest name, '--schemes'), for
    messages; 'an option' outside a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        for param in ctx.command.params:
            if isinstance(param, click.Option) and param.name and ctx.params.get(param.name) is values:
                return max(param.opts, key=len)
    return "an option"


def parse_real(text: str, what: str, allow_infinity: bool = True) -> float:
    """A decimal number exactly as float64 reads it, refusing what float64 would silently change.

    'inf', '-inf' (and, where allowed, 'nan') are taken as written; a finite decimal beyond float64's
    range (1e400) or below its smallest subnormal (1e-400, nonzero) is a ValueError, not inf or 0."""
    from precisionlab.labs.explain import parse_real as parse

    return parse(text, what, allow_infinity)


# ---- progress ----------------------------------------------------------------------------------------


class StepLog:
    """Progress off a terminal: `description: text (done/total) [t s]` lines on stderr, so a long run is
    visibly alive in a CI log. Nothing in the first QUIET_S seconds (a quick command prints only its
    result or its one-line error); then a line per step, at most one per LOG_EVERY_S seconds when the
    steps are many (more than LOG_EVERY_STEPS), and the last step's. Calls with advance=0 (a step
    starting, for the terminal's bar) print nothing."""

    def __init__(self, description: str, total: int) -> None:
        self.description, self.total = description, total
        self.start = time.perf_counter()
        self.done = 0
        self.printed = -math.inf

    def __call__(self, text: str, advance: int = 1) -> None:
        activity(f"{self.description}: {text}")  # what the command's heartbeat names until the next step
        if not advance:
            return
        self.done += advance
        now = time.perf_counter()
        if now - self.start < QUIET_S:
            return
        if self.total <= LOG_EVERY_STEPS or now - self.printed >= LOG_EVERY_S or self.done >= self.total:
            self.printed = now
            count = f" ({self.done}/{self.total})" if self.total > 1 else ""
            progress_line(f"{self.description}: {text}{count} [{now - self.start:.1f} s]")


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Callable[..., None]]:
    """Progress of a long command on stderr; yields `step(text, advance=1)`.

    On a terminal: a transient rich bar. Off a terminal (CI logs, pipes): see StepLog (lines only
    once the work has taken QUIET_S seconds, so a quick command prints nothing but its result)."""
    if not stderr_is_terminal():
        with doing(description):
            yield StepLog(description, total)
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def step(text: str, advance: int = 1) -> None:
            bar.update(task, description=text, advance=advance)

        yield step


progress_bar = progress
"""The former name of `progress`."""


@contextlib.contextmanager
def busy(message: str) -> Iterator[None]:
    """A spinner on stderr while one long step runs (terminal only); off a terminal one line when it ends,
    if it took QUIET_S seconds or more."""
    start = time.perf_counter()
    if not stderr_is_terminal():
        with doing(message):  # the command's heartbeat names it while it runs
            yield
        if time.perf_counter() - start >= QUIET_S:
            progress_line(f"{message}: done [{time.perf_counter() - start:.1f} s]")
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield


__all__ = [
    "ARGV",
    "HEARTBEAT_S",
    "OUTPUTS",
    "EnumName",
    "NonEmptyPath",
    "Outputs",
    "StepLog",
    "StepProgress",
    "activity",
    "busy",
    "busy_machine_threads",
    "busy_threads",
    "check_writable",
    "current_outputs",
    "doing",
    "duration",
    "emit",
    "lab_output_options",
    "nonblank",
    "open_outputs",
    "option_of",
    "overflow_option",
    "parse_real",
    "positive_int",
    "progress",
    "progress_bar",
    "provenance",
    "rounding_option",
    "set_torch_threads",
    "split_commas",
    "stderr_is_terminal",
]
