"""Progress of the model commands and their torch threads: StepProgress never goes silent off a terminal.

cli.common re-exports every name here (commands import them from there); this module imports nothing of
the cli package, so the two form no circle.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import click


def progress_line(text: str) -> None:
    """One progress line on stderr (used when stderr is not a terminal): every progress line goes through here.

    It goes to the stderr the running command started with (its Heartbeat's), else to sys.stderr: a peer that
    redirects sys.stderr for a while (the model loader keeps transformers' tqdm bar off the output that way)
    must not swallow the progress lines another thread prints meanwhile. The line restarts the command's
    heartbeat clock."""
    watch = _WATCH
    if watch is None:
        click.echo(text, err=True)
    else:
        click.echo(text, file=watch.stream)
    if watch is not None:
        watch.printed(text)


def stderr_is_terminal() -> bool:
    from rich.console import Console

    return Console(stderr=True).is_terminal


def busy_threads(default: int, cpus: int, load: float) -> int:
    """torch threads for a machine with `cpus` CPUs and a 1-minute load average of `load` (work of others):
    the CPUs left free, rounded to the nearest whole one, at least 1 and at most torch's `default`."""
    return max(1, min(default, math.floor(cpus - load + 0.5)))


def set_torch_threads(threads: int | None) -> str | None:
    """Apply `--threads` (ValueError below 1) for the running command: peers.torch_threads entered on its click
    context, so torch's count is restored when the command ends (outside a command: set). Without it, a busy
    machine gets fewer threads than torch's default (busy_threads) and the returned line says so; None when torch
    keeps its default.

    Why: torch's threads (OpenMP) meet at the end of every operation, so one the machine does not schedule stalls
    the others. On the 2-core development machine at a load average of 9-11, torch's default of 2 threads ran
    the choice reference pass 6x slower than 1 thread (benchmarks/bench_eval_threads.py, docs/eval.md)."""
    from precisionlab import peers

    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be a positive integer, got {threads}")
        ctx = click.get_current_context(silent=True)
        if ctx is None:
            peers.torch().set_num_threads(threads)
        else:
            ctx.with_resource(peers.torch_threads(threads))
        return None
    if not hasattr(os, "getloadavg"):
        return None
    torch = peers.torch()
    default = torch.get_num_threads()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0]
    chosen = busy_threads(default, cpus, load)
    if chosen >= default:
        return None
    torch.set_num_threads(chosen)
    return (f"the machine is busy (load average {load:.1f} on {cpus} CPUs): torch runs {chosen} thread"
            f"{'s' if chosen > 1 else ''}, not its default {default}, which is several times slower under load; "
            "--threads N sets the count")


def busy_machine_threads() -> str | None:
    """set_torch_threads(None) unless the running command was given --threads (which it then applied itself)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.params.get("threads") is not None:
        return None
    return set_torch_threads(None)


HEARTBEAT_S = 5.0
"""Off a terminal, a model command prints a line at least this often while it works (StepProgress)."""
QUOTE_CHARS = 60
"""A heartbeat between steps quotes the last line up to this many characters."""


def duration(seconds: float) -> str:
    """'8.2 s', '1 min 12 s', '1 h 03 min': a span of time for a progress line."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class StepProgress:
    """Progress of a model command (eval, ptq, ladder) on stderr; never silent for long.

    The protocol of eval.runner.Progress: `start(description, total)` begins a step of `total` items (0: a
    phase without a count, such as quantizing the weights), `advance(n)` counts items done, `done(line)`
    closes the step with its line; `note(line)` prints a line of its own; `count(description, done, total)`
    sets a step's absolute count (a callback that reports `done of total`).

    On a terminal: a transient rich bar per step (done / total, elapsed, time left) with the lines above it.
    Off a terminal (CI logs, pipes, `2> log`): every line as it comes, and while the command works a line
    at least every `heartbeat` seconds (HEARTBEAT_S), printed by the command's Heartbeat (or, outside a
    command, by a daemon thread of its own that only prints):
    `reference: choice: 37/100, 1 min 12 s, about 2 min 03 s left` during a step (the estimate: the step's
    time per item so far times the items left), `int4:g128: quantizing the weights: 12.0 s` during a
    phase, and `working: 8.1 s since "loaded ..."` between them. A step that waits on one long item
    (an example that takes a minute under load) still gets its line every `heartbeat` seconds."""

    def __init__(self, heartbeat: float | None = None, terminal: bool | None = None) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.terminal = self.console.is_terminal if terminal is None else terminal
        self.heartbeat = HEARTBEAT_S if heartbeat is None else heartbeat
        self.bar: Any = None
        self.task: Any = None
        self.description: str | None = None
        self.shown: str | None = None
        """What the bar and the heartbeat show for the current step when it was relabelled."""
        self.total = 0
        self.count_done = 0
        self.began = self.step_began = self.last_line_at = time.perf_counter()
        self.last_line = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reporting: Any = None

    def __enter__(self) -> StepProgress:
        if self.terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=True)
            self.bar.__enter__()
        elif _WATCH is not None:  # the command's heartbeat prints this progress's status line
            self._reporting = reporting(self._report)
            self._reporting.__enter__()
        else:  # outside a command (the Python API): a heartbeat thread of its own
            self._thread = threading.Thread(target=self._beat, name="precisionlab-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._reporting is not None:
            self._reporting.__exit__(None, None, None)
            self._reporting = None
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    # ---- the protocol
    def start(self, description: str, total: int) -> None:
        with self._lock:
            self.description, self.total, self.count_done = description, max(int(total), 0), 0
            self.shown = None
            self.step_began = time.perf_counter()
            if self.bar is not None:
                if self.task is not None:
                    self.bar.remove_task(self.task)
                self.task = self.bar.add_task(_escape(description), total=self.total or None)

    def advance(self, n: int) -> None:
        with self._lock:
            self.count_done += n
            if self.bar is not None and self.task is not None:
                self.bar.update(self.task, advance=n)

    def count(self, description: str, done: int, total: int) -> None:
        """Set the step `description` to `done` of `total` (starting it when it is not the current step)."""
        if description != self.description or total != self.total:
            self.start(description, total)
        self.advance(done - self.count_done)

    def relabel(self, description: str) -> None:
        """Show the current step under another description (its running loss, say) without restarting its count or
        clock: `count` still knows the step by the description it started with."""
        with self._lock:
            if self.description is None:
                return
            self.shown = description
            if self.bar is not None and self.task is not None:
                self.bar.update(self.task, description=_escape(description))

    def done(self, description: str) -> None:
        with self._lock:
            self.description = None
            if self.bar is not None and self.task is not None:
                self.bar.remove_task(self.task)
                self.task = None
            self._line(description)

    def note(self, line: str) -> None:
        with self._lock:
            self._line(line)

    # ---- lines
    def _line(self, text: str) -> None:
        """Print a line (the lock held)."""
        self.last_line, self.last_line_at = text, time.perf_counter()
        if self.bar is not None:
            self.bar.console.print(f"[dim]{_escape(text)}[/dim]")
        else:
            progress_line(text)

    def status(self, now: float | None = None) -> str:
        """The heartbeat line: what runs now, how far it is and how long it has taken."""
        now = time.perf_counter() if now is None else now
        if self.description is None:
            since = f' since "{quote(self.last_line)}"' if self.last_line else ""
            return f"working: {duration(now - self.last_line_at)}{since} ({duration(now - self.began)} in all)"
        elapsed = now - self.step_began
        shown = self.shown or self.description
        if not self.total:
            return f"{shown}: {duration(elapsed)}"
        done = min(self.count_done, self.total)
        if done >= self.total:
            left = "finishing"
        elif done:
            left = f"about {duration(elapsed / done * (self.total - done))} left"
        else:
            left = "no estimate before the first one"
        return f"{shown}: {done}/{self.total}, {duration(elapsed)}, {left}"

    def _report(self, now: float) -> str:
        with self._lock:
            return self.status(now)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.heartbeat, 1.0)):
            with self._lock:
                now = time.perf_counter()
                if now - self.last_line_at >= self.heartbeat:
                    progress_line(self.status(now))
                    self.last_line_at = now


# ---- every command's heartbeat ------------------------------------------------------------------------------


_WATCH: Heartbeat | None = None
"""The heartbeat of the running command (cli.main starts one per command off a terminal); None otherwise."""


class Heartbeat:
    """Off a terminal, a line on stderr whenever the running command has printed nothing there for `interval`
    seconds (HEARTBEAT_S): what it is doing and for how long. cli.main runs every command under one, so a command
    without progress of its own (a lab timing its kernels, a report being written, a model loading inside a lab)
    is never silent either; one thread prints every heartbeat line of the command.

    The line: the innermost `reporting(status)` block's own status line (a StepProgress's `reference: choice:
    37/100, 1 min 12 s, about 2 min 03 s left`, the audit's tensor count), else the innermost `doing(text)` block
    (`busy` and `progress` open one; `activity(text)` relabels it, the callback through which a lab reports
    its steps) as `timing the fp16 axpy: 6.0 s (12.1 s in all)`, else `axpy: working: 5.0 s` or
    `working: 5.0 s since "<the last line>" (20.0 s in all)`. Every progress line (progress_line) restarts
    the clock."""

    def __init__(self, command: str, interval: float | None = None, stream: TextIO | None = None,
                 began: float | None = None) -> None:
        self.command = command
        self.interval = HEARTBEAT_S if interval is None else interval
        self.stream = stream if stream is not None else sys.stderr
        self.began = self.last_line_at = time.perf_counter() if began is None else began
        """When the command began (cli.main: when its process started, the imports counted as silence too)."""
        self.last_line = ""
        self.stack: list[tuple[str | Callable[[float], str], float]] = []
        """The `doing` / `reporting` blocks open now, innermost last: (what or a status function, since when)."""
        self._beating = False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Heartbeat | None = None

    def __enter__(self) -> Heartbeat:
        global _WATCH
        self._previous, _WATCH = _WATCH, self
        self._thread = threading.Thread(target=self._beat, name="precisionlab-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _WATCH
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _WATCH = self._previous

    def printed(self, text: str = "") -> None:
        """A line went to stderr: the clock starts again."""
        with self._lock:
            self.last_line_at = time.perf_counter()
            if text and not self._beating:
                self.last_line = text

    def status(self, now: float | None = None) -> str:
        """The heartbeat line (see the class docstring). A status function is called without the lock held."""
        now = time.perf_counter() if now is None else now
        total = now - self.began
        with self._lock:
            reporter = next((what for what, _ in reversed(self.stack) if callable(what)), None)
            top = self.stack[-1] if self.stack else None
            last_line, last_at = self.last_line, self.last_line_at
        if reporter is not None:
            return reporter(now)
        if top is not None:
            what, since = top
            own = now - since
            tail = f" ({duration(total)} in all)" if total - own >= 1.0 else ""
            return f"{what}: {duration(own)}{tail}"
        if last_line:
            return f'working: {duration(now - last_at)} since "{quote(last_line)}" ({duration(total)} in all)'
        return f"{self.command}: working: {duration(total)}"

    def _beat(self) -> None:
        while True:
            with self._lock:
                wait = self.last_line_at + self.interval - time.perf_counter()
            if self._stop.wait(max(wait, 0.01)):
                return
            now = time.perf_counter()
            with self._lock:
                if now < self.last_line_at + self.interval:
                    continue
            text = self.status(now)  # unlocked: a status function takes its own lock
            with self._lock:
                self._beating = True
                try:
                    progress_line(text)
                finally:
                    self._beating = False
                    self.last_line_at = now if self.last_line_at < now else self.last_line_at


def current_heartbeat() -> Heartbeat | None:
    """The running command's heartbeat (None on a terminal, or outside a command)."""
    return _WATCH


@contextlib.contextmanager
def heartbeat(command: str, terminal: bool | None = None, began: float | None = None) -> Iterator[Heartbeat | None]:
    """Run a command under its Heartbeat off a terminal (cli.main does, for every command); nothing on a terminal,
    where the bars and spinners show the work."""
    if stderr_is_terminal() if terminal is None else terminal:
        yield None
        return
    with Heartbeat(command, began=began) as watch:
        yield watch


@contextlib.contextmanager
def _opened(what: str | Callable[[float], str]) -> Iterator[None]:
    watch = _WATCH
    if watch is None:
        yield
        return
    with watch._lock:
        depth = len(watch.stack)
        watch.stack.append((what, time.perf_counter()))
    try:
        yield
    finally:
        with watch._lock:
            del watch.stack[depth:]


def doing(what: str) -> contextlib.AbstractContextManager[None]:
    """Say what the command is doing for the block: its heartbeat names it (no line of its own)."""
    return _opened(what)


def reporting(status: Callable[[float], str]) -> contextlib.AbstractContextManager[None]:
    """For the block, the command's heartbeat line is `status(now)` (now on time.perf_counter's clock): a progress
    that knows more than what it does (counts, estimates: StepProgress, the audit's) reports through this."""
    return _opened(status)


def activity(what: str) -> None:
    """What the command is doing from now on (a lab's progress callback): relabels the innermost `doing` block, or
    opens one that lasts until the command ends. Prints nothing itself."""
    watch = _WATCH
    if watch is None:
        return
    with watch._lock:
        if watch.stack and not callable(watch.stack[-1][0]):
            watch.stack[-1] = (what, time.perf_counter())
        else:
            watch.stack.append((what, time.perf_counter()))


def quote(line: str) -> str:
    """A line quoted in a heartbeat: at most QUOTE_CHARS characters."""
    return line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS - 1] + "…"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


__all__ = ["HEARTBEAT_S", "QUOTE_CHARS", "Heartbeat", "StepProgress", "activity", "busy_machine_threads",
           "busy_threads", "current_heartbeat", "doing", "duration", "heartbeat", "progress_line", "quote",
           "reporting", "set_torch_threads", "stderr_is_terminal"]
