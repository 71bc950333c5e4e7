"""`precisionlab audit CHECKPOINT`: every tensor's layout, bytes, statistics and convention checks.

    precisionlab audit model.gguf
    precisionlab audit model_dir/ --schemes int4:g128,nvfp4 --workers 2 --out audit_out
    precisionlab audit model_dir/ --scheduler tcp://scheduler:8786 --out audit_out
    precisionlab audit model_dir/ --fail-on flag          # exit 3 when a check flags a tensor (a CI gate)

The checkpoint is opened and the scheduler reached before --out is created. With --out, records
are appended to DIR/audit-tensors.jsonl as tensors finish and a rerun resumes from them; the report
(audit.json, the PNG) is written into DIR at the end.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import OUTPUTS, NonEmptyPath, emit, open_outputs, positive_int
from precisionlab.cli.progress import current_heartbeat, progress_line, reporting

FAILED_ON = 3
"""Exit code of an audit that finished and found what --fail-on names (2 stays bad input, 1 a bug, 130 Ctrl-C)."""
FAIL_LEVELS = ("never", "error", "flag", "note")
"""--fail-on, each level including the ones before it: a tensor not audited; a convention check that flagged a
tensor; a note (an unknown layout, a remark from reading the checkpoint)."""
PROGRESS_EVERY_S = 5.0
"""Off a terminal, a progress line at least this often while the audit runs (after the first PROGRESS_EVERY_S)."""


class AuditFailed(ValueError):
    """An OSError during the audit, reported as what failed (not as the --out folder it happened under)."""


@click.command("audit")
@click.argument("checkpoint", type=NonEmptyPath(path_type=Path))
@click.option("--schemes", "-s", multiple=True,
              help="Also quantize the dequantized weights with these schemes and report the error "
                   "(comma-separated or repeated, e.g. int4:g128,nvfp4).")
@click.option("--workers", "-w", default=1, show_default=True, callback=positive_int,
              help="Worker processes on this machine (tasks of similar size, several per worker).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run the tasks on the Dask distributed cluster at ADDRESS (e.g. tcp://host:8786); "
                   "the checkpoint path must be readable on its workers.")
@click.option("--fail-on", "fail_on", type=click.Choice(FAIL_LEVELS), default="never", show_default=True,
              help=f"Exit {FAILED_ON} after the report when the audit finds: error (a tensor not audited), flag "
                   "(also a convention check that flagged a tensor) or note (also an unknown layout or a "
                   "reading note).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as strict JSON.")
@click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
              help="Directory for the per-tensor results (resumable), the report's JSON and its plot.")
@click.option("--csv", "csv_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
              help="Directory for every table of the result as CSV (<lab>_<table>.csv).")
@click.option("--svg", is_flag=True, help="With --out: an SVG beside each PNG.")
def COMMAND(checkpoint: Path, schemes: tuple[str, ...], workers: int, scheduler: str | None, fail_on: str,
            as_json: bool, out_dir: Path | None, csv_dir: Path | None, svg: bool) -> None:
    """Audit a checkpoint (.safetensors, a sharded directory or its index, .gguf): per tensor the layout and
    scheme, bytes and bits per weight, amax / rms / outlier ratio, convention checks, and (--schemes) the
    error of quantizing it again; checkpoint totals and a plot of bits per weight against error."""
    from precisionlab.interop.audit import normalise_schemes, open_checkpoint
    from precisionlab.labs.quant_compare import split_schemes

    if scheduler is not None and workers != 1:
        raise click.UsageError("give --workers or --scheduler, not both")
    chosen = normalise_schemes(list(split_schemes(schemes)))
    with _phase(f"reading the index of {checkpoint}"):
        opened = open_checkpoint(checkpoint)  # a missing or damaged checkpoint: one line, exit 2, nothing written
    with contextlib.ExitStack() as stack:
        client = None
        if scheduler is not None:  # reached before --out is created
            from precisionlab.interop.distribute import connect_scheduler

            with _phase(f"connecting to the Dask scheduler at {scheduler}"):
                client = connect_scheduler(scheduler)
            stack.callback(client.close)
        with open_outputs(out_dir, csv_dir, svg) as outputs:
            ctx = click.get_current_context()
            ctx.meta[OUTPUTS] = outputs
            result = _audit(checkpoint, opened, chosen, workers, client, out_dir)
            emit(result, as_json, out_dir, findings=False)  # a checkpoint has thousands of keys: tables carry them
        if not as_json:
            for path in outputs.written:
                click.echo(f"wrote {path}")
    _verdict(result.findings, fail_on)


def _audit(checkpoint: Path, opened: Any, schemes: list[str], workers: int, client: Any, out_dir: Path | None) -> Any:
    from precisionlab.interop.audit import plan_audit, run_audit
    from precisionlab.interop.results_log import ResultsLogError
    from precisionlab.labs import audit as audit_lab

    try:
        plan = plan_audit(checkpoint, schemes, out_dir, checkpoint=opened)
    except OSError as exc:
        raise AuditFailed(f"cannot open the results log in {out_dir}: {_reason(exc)}") from None
    if plan.done and plan.log is not None:
        click.echo(f"resuming: {len(plan.done)} of {len(plan.names)} tensors already audited in {plan.log.path}",
                   err=True)
    try:
        with _progress(plan) as on_record:
            run = run_audit(plan, workers=workers, on_record=on_record, client=client)
    except KeyboardInterrupt:
        kept = f"; finished tensors are kept in {plan.log.path}, run again to resume" if plan.log else ""
        click.echo(f"interrupted{kept}", err=True)
        click.get_current_context().exit(130)
    except RuntimeError as exc:  # a worker process died
        raise AuditFailed(str(exc)) from None
    except ResultsLogError as exc:
        raise AuditFailed(_reason(exc)) from None
    except OSError as exc:  # the cluster went away, or the checkpoint changed under the audit
        where = f"the Dask cluster at {client.scheduler.address}" if client is not None else str(checkpoint)
        raise AuditFailed(f"auditing {checkpoint} failed on {where}: {_reason(exc)}") from None
    result = audit_lab.build(run)
    failed = result.findings["audit.totals.errors"]
    if failed:
        click.echo(f"warning: {failed} tensor(s) could not be audited (their error is in the note column); "
                   "run again to retry them", err=True)
    return result


def _reason(exc: OSError) -> str:
    from precisionlab.cli.main import os_error_message

    return os_error_message(exc)


def _verdict(findings: dict[str, Any], fail_on: str) -> None:
    """Exit FAILED_ON when the audit found what --fail-on names (each level includes the ones before it)."""
    if fail_on == "never":
        return
    level = FAIL_LEVELS.index(fail_on)
    found = []
    if findings["audit.totals.errors"]:
        found.append(f"{findings['audit.totals.errors']} tensor(s) not audited")
    if level >= FAIL_LEVELS.index("flag") and findings["audit.totals.tensors_flagged"]:
        found.append(f"{findings['audit.totals.tensors_flagged']} tensor(s) flagged by a convention check")
    notes, reading = findings["audit.totals.notes"], findings["audit.totals.reading_notes"]
    if level >= FAIL_LEVELS.index("note") and (notes or reading):
        found.append(f"{notes} tensor note(s), {reading} reading note(s)")
    if found:
        click.echo(f"audit failed --fail-on {fail_on}: {'; '.join(found)} (exit {FAILED_ON})", err=True)
        click.get_current_context().exit(FAILED_ON)


@contextlib.contextmanager
def _progress(plan: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A rich bar on a terminal (stderr); otherwise a line per finished source file and, while the audit runs,
    one at least every PROGRESS_EVERY_S seconds: tensors and weights done of the total, the time so far and an
    estimate of what is left (from the weights' rate)."""
    from rich.console import Console

    todo = plan.todo
    sizes = {name: int(plan.checkpoint[name].size) for name in todo}
    console = Console(stderr=True)
    if console.is_terminal:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("auditing", total=len(todo))

            def step(record: dict[str, Any]) -> None:
                bar.update(task, description=f"audited {record['name']}", advance=1)

            yield step
        return
    left = Counter(plan.files[name] for name in todo)
    files = len(left)
    state = {"files": 0, "tensors": 0, "weights": 0}
    lock = threading.Lock()

    def line(record: dict[str, Any]) -> None:
        with lock:
            state["tensors"] += 1
            state["weights"] += sizes.get(record["name"], 0)
            source = plan.files.get(record["name"], "?")
            left[source] -= 1
            if left[source] == 0:
                state["files"] += 1
                progress_line(f"audited {source} ({state['files']}/{files} files, {state['tensors']}/{len(todo)} "
                              "tensors)")

    with _heartbeat(lambda: _status(state, len(todo), sum(sizes.values())), lock):
        yield line


def _status(state: dict[str, int], tensors: int, weights: int) -> Callable[[float], str]:
    def text(elapsed: float) -> str:
        done = state["weights"]
        if done and weights > done:
            eta = f"about {elapsed * (weights - done) / done:.0f} s left"
        else:
            eta = "estimating what is left" if not done else "finishing"
        return (f"auditing: {state['tensors']}/{tensors} tensors, {done / 1e6:.1f}M/{weights / 1e6:.1f}M weights "
                f"[{elapsed:.0f} s, {eta}]")
    return text


@contextlib.contextmanager
def _phase(what: str) -> Iterator[None]:
    """A step before the tensors start: a spinner on a terminal, else a line every PROGRESS_EVERY_S seconds."""
    from precisionlab.cli.common import busy, stderr_is_terminal

    if stderr_is_terminal():
        with busy(what):
            yield
        return
    with _heartbeat(lambda: lambda elapsed: f"audit: {what} [{elapsed:.0f} s]", threading.Lock()):
        yield


@contextlib.contextmanager
def _heartbeat(status: Callable[[], Callable[[float], str]], lock: threading.Lock) -> Iterator[None]:
    """Print status(elapsed) on stderr every PROGRESS_EVERY_S seconds until the block ends. The thread only
    prints (the audit's work runs where it always does), so a long tensor or a long task is never silent."""
    start = time.perf_counter()
    text = status()
    if current_heartbeat() is not None:  # the command's heartbeat prints the line, on its clock (cli.progress)
        with reporting(lambda now: text(now - start)):
            yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            with lock:
                click.echo(text(time.perf_counter() - start), err=True)

    thread = threading.Thread(target=beat, name="audit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
