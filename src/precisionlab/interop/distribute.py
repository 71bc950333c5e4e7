"""Run independent tasks serially, on a local process pool, or on a Dask distributed cluster.

    distribute_tasks(func, tasks)                            in this process, in order
    distribute_tasks(func, tasks, workers=4)                 concurrent.futures.ProcessPoolExecutor (spawn)
    distribute_tasks(func, tasks, scheduler="tcp://h:8786")  dask.distributed.Client(address)
    distribute_tasks(func, tasks, client=connect_scheduler("tcp://h:8786"))   a client connected beforehand

(Not to be confused with `precisionlab.parallel.map_tasks`, which spreads in-process work over
threads and returns a list in order.)

func must be a module-level function (it is sent to other processes by reference) and each task a
tuple of its arguments. `shared` (a tuple) holds leading arguments common to every task, sent to
each worker once instead of with every task: func(*shared, *task) (the pool: its initializer;
Dask: scattered to every worker). The returned `TaskStream` yields results as tasks finish (completion order;
serially, task order). The pool keeps at most two tasks per worker in flight, so stopping early
(Ctrl-C) does not leave the whole queue running; its workers ignore SIGINT, so Ctrl-C reaches the
parent alone. After an interrupt, `stream.finished()` gives the results of the tasks that had
completed but were not yet taken, and `stream.close()` cancels the rest (the caller keeps what
finished). A worker that dies (killed for memory, say) is a WorkerDied (a RuntimeError). Dask is imported only for
a scheduler; its absence is a ValueError that names what to install, an unreachable scheduler an
OSError that names it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

START_METHOD = "spawn"
"""Pool workers start fresh interpreters (fork would copy the parent's threads and memory maps)."""

CONNECT_TIMEOUT_S = 20
"""Seconds to wait for a Dask scheduler before giving up."""


class WorkerDied(RuntimeError):
    """A worker process died (killed for memory, say): a pool's, or a Dask task's every worker (KilledWorker);
    `reason` is what the pool or Dask said."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"a worker process died ({reason}); finished results are kept, run again to resume")
        self.reason = reason


def connect_scheduler(address: str, timeout: float | None = None) -> Any:
    """A dask.distributed Client connected to the scheduler at address (the caller closes it).

    ValueError when Dask's distributed scheduler is not installed; OSError naming the address when it
    cannot be reached within `timeout` seconds (default CONNECT_TIMEOUT_S)."""
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler needs Dask's distributed scheduler: pip install 'dask[distributed]'") from None
    wait = CONNECT_TIMEOUT_S if timeout is None else timeout
    try:
        return Client(address, timeout=wait, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise OSError(f"cannot reach the Dask scheduler at {address}: {exc}") from None


def distribute_tasks(func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], workers: int = 1,
                     scheduler: str | None = None, connect_timeout: float | None = None,
                     cleanup: Callable[[], Any] | None = None, client: Any = None,
                     shared: tuple[Any, ...] = ()) -> TaskStream:
    """func(*shared, *task) for each task, yielded as each finishes (see the module doc).

    cleanup (a module-level function) runs on every Dask worker at the end, to let go of what the
    tasks cached there (Dask workers outlive the run; pool workers end with it). A client given is
    used and left open; one connected here for `scheduler` is closed with the stream."""
    if workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers}")
    if (scheduler is not None or client is not None) and workers != 1:
        raise ValueError("give either a worker count or a Dask scheduler, not both")
    if not tasks:
        return TaskStream(iter(()))
    if client is not None or scheduler is not None:
        owned = client is None
        if owned:
            client = connect_scheduler(str(scheduler), connect_timeout)
        return _DaskStream(func, tasks, client, cleanup, owned, shared)
    if workers == 1:
        return TaskStream(func(*shared, *task) for task in tasks)
    return _PoolStream(func, tasks, workers, shared)


class TaskStream(Iterator[Any]):
    """Results as tasks finish. Serially each result is yielded the moment its task ends, so nothing is
    left over after an interrupt."""

    def __init__(self, results: Iterator[Any]) -> None:
        self._results = results

    def __iter__(self) -> TaskStream:
        return self

    def __next__(self) -> Any:
        return next(self._results)

    def finished(self) -> list[Any]:
        """Results of tasks that completed but were not yet yielded (call after an interrupt)."""
        return []

    def close(self) -> None:
        """Stop: cancel what has not started, let go of the workers."""

    def __enter__(self) -> TaskStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: tuple[Any, ...] = ()
"""In a pool worker: the `shared` arguments its initializer received."""


def _start_worker(shared: tuple[Any, ...]) -> None:
    global _SHARED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _SHARED = shared


def _with_shared(func: Callable[..., Any], *task: Any) -> Any:
    """func(*shared, *task) in a pool worker."""
    return func(*_SHARED, *task)


def _with_scattered(func: Callable[..., Any], shared: list[Any], *task: Any) -> Any:
    """func(*shared, *task) on a Dask worker (shared: the scattered arguments, resolved by Dask)."""
    return func(*shared, *task)


class _PoolStream(TaskStream):
    def __init__(self, func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], workers: int,
                 shared: tuple[Any, ...] = ()) -> None:
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context(START_METHOD)
        self._pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                                         initializer=_start_worker, initargs=(shared,))
        self._func = func
        self._pending = iter(tasks)
        self._window = 2 * workers
        self._running: set[Any] = set()
        self._ready: list[Any] = []
        super().__init__(self._run())

    def _submit(self) -> None:
        for task in self._pending:
            self._running.add(self._pool.submit(_with_shared, self._func, *task))
            if len(self._running) >= self._window:
                return

    def _run(self) -> Iterator[Any]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        try:
            self._submit()
            while self._running:
                done, rest = wait(self._running, return_when=FIRST_COMPLETED)
                self._running = set(rest)
                self._ready.extend(done)
                while self._ready:
                    future = self._ready.pop(0)
                    yield future.result()
                self._submit()
        except BrokenProcessPool as exc:
            self.close()
            raise WorkerDied(str(exc)) from None
        self._pool.shutdown(wait=True)

    def finished(self) -> list[Any]:
        ready = self._ready + [f for f in self._running if f.done()]
        self._ready = []
        self._running -= set(ready)
        return [f.result() for f in ready if not f.cancelled() and f.exception() is None]

    def close(self) -> None:
        """Cancel what has not started and stop the workers now (a task still running is abandoned)."""
        for future in self._running:
            future.cancel()
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # tasks still running are abandoned, not waited for
            with contextlib.suppress(Exception):
                if process.is_alive():
                    process.terminate()
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(timeout=5)


class _DaskStream(TaskStream):
    def __init__(self, func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], client: Any,
                 cleanup: Callable[[], Any] | None, owned: bool, shared: tuple[Any, ...] = ()) -> None:
        self._client, self._cleanup, self._owned = client, cleanup, owned
        columns = [list(column) for column in zip(*tasks, strict=True)]
        self._shared: list[Any] = []
        if shared:  # each worker receives them once; the tasks refer to them
            self._shared = list(client.scatter(list(shared), broadcast=True, hash=False))
            columns = [[func] * len(tasks), [self._shared] * len(tasks), *columns]
            func = _with_scattered
        self._futures = list(client.map(func, *columns, pure=False))
        self._taken: set[str] = set()
        self._closed = False
        super().__init__(self._run())

    def _run(self) -> Iterator[Any]:
        from distributed import KilledWorker, as_completed

        for future in as_completed(self._futures, loop=self._client.loop):
            if future.key in self._taken:
                continue
            try:
                result = future.result()
            except KilledWorker as exc:  # the task's workers died, each time it was tried
                self.close()
                raise WorkerDied(f"on the Dask cluster: {exc}") from None
            self._taken.add(future.key)
            yield result
        self.close()

    def finished(self) -> list[Any]:
        out = []
        for future in self._futures:
            if future.key not in self._taken and future.status == "finished":
                with contextlib.suppress(Exception):
                    out.append(future.result(timeout=5))
                    self._taken.add(future.key)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # best effort: the scheduler may be gone already
            self._client.cancel([f for f in self._futures if f.key not in self._taken])
        if self._cleanup is not None:
            with contextlib.suppress(Exception):  # a worker that left has nothing to release
                self._client.run(self._cleanup)
        for future in [*self._futures, *self._shared]:
            with contextlib.suppress(Exception):
                future.release()
        if self._owned:
            self._client.close()
