"""`precisionlab limits`: every numerics hazard measured, each beside its fix."""

from __future__ import annotations

import inspect
from pathlib import Path

import click

from precisionlab.cli.common import StepLog, emit, lab_output_options, parse_real
from precisionlab.labs import limits
from precisionlab.results import LabResult

DEFAULTS = {name: p.default for name, p in inspect.signature(limits.run).parameters.items()}
"""The lab's own defaults, quoted in the help text."""


def parse_value(text: str) -> float:
    """A finite real number, or ValueError with a one-line message (the rule `explain` uses too)."""
    return parse_real(text, "--value", allow_infinity=False)


def parse_formats(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("--formats needs at least one format name")
    return names


@click.command("limits")
@click.option("--value", "value_text", default="0.1", show_default=True,
              help="The value sent through every format in the round-trip table.")
@click.option("--formats", "formats_text", default=None, metavar="LIST",
              help="Comma-separated float formats for the round-trip, exp and 1+t tables (default: all).")
@click.option("--min-log2-n", type=int, default=None,
              help=f"Smallest dot-product length as a power of two [{DEFAULTS['min_log2_n']}].")
@click.option("--max-log2-n", type=int, default=None,
              help=f"Largest dot-product length as a power of two [{DEFAULTS['max_log2_n']}]; 20 gives 2^20 "
                   "(about a minute).")
@click.option("--order-n", type=int, default=None,
              help=f"Values in the summation-order sum, a multiple of {limits.MAX_BLOCKS} [{DEFAULTS['order_n']}].")
@click.option("--variance-n", type=int, default=None,
              help=f"Values in the cancellation (variance) section [{DEFAULTS['variance_n']}].")
@click.option("--drift-n", type=int, default=None,
              help=f"Values in the larger variance run that shows two-pass and Welford drifting "
                   f"[{DEFAULTS['drift_n']}]; 0 skips.")
@click.option("--stall-count", type=int, default=None,
              help=f"Repeated additions of 0.01 in the stall table [{DEFAULTS['stall_count']}].")
@click.option("--seed", type=int, default=DEFAULTS["seed"], show_default=True, help="Seed of every random input.")
@click.option("--quick", is_flag=True, help="Small sizes (seconds), as the tests and `run --quick` use.")
@lab_output_options
def COMMAND(value_text: str, formats_text: str | None, min_log2_n: int | None, max_log2_n: int | None,
            order_n: int | None, variance_n: int | None, drift_n: int | None, stall_count: int | None,
            seed: int, quick: bool, as_json: bool, out_dir: Path | None) -> None:
    """Numerics hazards: exp overflow, lost updates, accumulation, summation order,
    cancellation and the two E4M3s, each measured and shown beside its fix."""
    options: dict[str, object] = dict(limits.LAB.quick) if quick else {}
    given = {"min_log2_n": min_log2_n, "max_log2_n": max_log2_n, "order_n": order_n, "variance_n": variance_n,
             "stall_count": stall_count}
    for name, size in given.items():
        if size is None:
            continue
        if size <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {size}")
        options[name] = size
    if drift_n is not None:
        if drift_n < 0:
            raise ValueError(f"--drift-n must be 0 (skip) or a positive integer, got {drift_n}")
        options["drift_n"] = drift_n
    options["value"] = parse_value(value_text)
    options["formats"] = parse_formats(formats_text)
    options["seed"] = seed
    result = _run_with_progress(options)
    emit(result, as_json, out_dir)


def _run_with_progress(options: dict[str, object]) -> LabResult:
    """Run the lab with a transient progress bar on stderr (one step per section).

    The bar starts at the lab's first section, after it has checked its options, so a bad
    option prints only the one-line error. Off a terminal: one line per section as it starts,
    with the seconds so far.
    """
    from rich.console import Console
    from rich.progress import Progress, TaskID

    console = Console(stderr=True)
    if not console.is_terminal:
        log = StepLog("limits", limits.SECTION_STEPS)
        return limits.run(progress=lambda section: log(f"starting {section}"), **options)  # type: ignore[arg-type]
    progress = Progress(console=console, transient=True)
    task: TaskID | None = None

    def step(section: str) -> None:
        nonlocal task
        if task is None:
            progress.start()
            task = progress.add_task("limits", total=limits.SECTION_STEPS)
        progress.update(task, description=f"limits: {section}")
        progress.advance(task)

    try:
        return limits.run(progress=step, **options)  # type: ignore[arg-type]
    finally:
        progress.stop()
