"""`precisionlab audit CHECKPOINT`: every tensor's layout, bytes, statistics and convention checks.

    precisionlab audit model.gguf
    precisionlab audit model_dir/ --schemes int4:g128,nvfp4 --workers 2 --out audit_out
    precisionlab audit model_dir/ --scheduler tcp://scheduler:8786 --out audit_out

With --out, records are appended to DIR/audit-tensors.jsonl as tensors finish and a rerun resumes
from them; the report (audit.json, the PNG) is written into DIR at the end.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import NonEmptyPath, emit, lab_output_options, positive_int


@click.command("audit")
@click.argument("checkpoint", type=NonEmptyPath(path_type=Path))
@click.option("--schemes", "-s", multiple=True,
              help="Also quantize the dequantized weights with these schemes and report the error "
                   "(comma-separated or repeated, e.g. int4:g128,nvfp4).")
@click.option("--workers", "-w", default=1, show_default=True, callback=positive_int,
              help="Worker processes on this machine (one task per tensor).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run the tasks on the Dask distributed cluster at ADDRESS (e.g. tcp://host:8786); "
                   "the checkpoint path must be readable on its workers.")
@lab_output_options
def COMMAND(checkpoint: Path, schemes: tuple[str, ...], workers: int, scheduler: str | None, as_json: bool,
            out_dir: Path | None) -> None:
    """Audit a checkpoint (.safetensors, a sharded directory or its index, .gguf): per tensor the layout and
    scheme, bytes and bits per weight, amax / rms / outlier ratio, convention checks, and (--schemes) the
    error of quantizing it again; checkpoint totals and a plot of bits per weight against error."""
    from precisionlab.interop.audit import plan_audit, run_audit
    from precisionlab.labs import audit as audit_lab
    from precisionlab.labs.quant_compare import split_schemes

    if scheduler is not None and workers != 1:
        raise click.UsageError("give --workers or --scheduler, not both")
    plan = plan_audit(checkpoint, list(split_schemes(schemes)), out_dir)
    if plan.done and plan.log is not None:
        click.echo(f"resuming: {len(plan.done)} of {len(plan.names)} tensors already audited in {plan.log.path}",
                   err=True)
    try:
        with _progress(plan) as on_record:
            run = run_audit(plan, workers=workers, scheduler=scheduler, on_record=on_record)
    except KeyboardInterrupt:
        kept = f"; finished tensors are kept in {plan.log.path}, run again to resume" if plan.log else ""
        click.echo(f"interrupted{kept}", err=True)
        click.get_current_context().exit(130)
    except RuntimeError as exc:  # a worker process died
        click.echo(f"error: {exc}", err=True)
        click.get_current_context().exit(2)
    result = audit_lab.build(run)
    emit(result, as_json, out_dir, findings=False)  # a checkpoint has thousands of keys: the tables carry them
    failed = result.findings["audit.totals.errors"]
    if failed:
        click.echo(f"warning: {failed} tensor(s) could not be audited (their error is in the note column); "
                   "run again to retry them", err=True)


@contextlib.contextmanager
def _progress(plan: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A rich bar on a terminal (stderr); otherwise one line per finished source file."""
    from rich.console import Console

    todo = plan.todo
    left = Counter(plan.files[name] for name in todo)
    files = len(left)
    console = Console(stderr=True)
    if not console.is_terminal:
        finished = [0, 0]  # files, tensors

        def line(record: dict[str, Any]) -> None:
            finished[1] += 1
            source = plan.files.get(record["name"], "?")
            left[source] -= 1
            if left[source] == 0:
                finished[0] += 1
                click.echo(f"audited {source} ({finished[0]}/{files} files, {finished[1]}/{len(todo)} tensors)",
                           err=True)

        yield line
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("auditing", total=len(todo))

        def step(record: dict[str, Any]) -> None:
            bar.update(task, description=f"audited {record['name']}", advance=1)

        yield step
