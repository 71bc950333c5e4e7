"""Run independent tasks serially, on a local process pool, or on a Dask distributed cluster.

    distribute_tasks(func, tasks)                            in this process, in order
    distribute_tasks(func, tasks, workers=4)                 concurrent.futures.ProcessPoolExecutor (spawn)
    distribute_tasks(func, tasks, scheduler="tcp://h:8786")  dask.distributed.Client(address)

(Not to be confused with `precisionlab.parallel.map_tasks`, which spreads in-process work over
threads and returns a list in order.)

func must be a module-level function (it is sent to other processes by reference) and each task a
tuple of its arguments. Results are yielded as tasks finish (completion order; serially, task
order). The pool keeps at most two tasks per worker in flight, so stopping early (Ctrl-C) does not
leave the whole queue running. A worker that dies (killed for memory, say) is a RuntimeError.
Dask is imported only for a scheduler; its absence is a ValueError that names what to install.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

START_METHOD = "spawn"
"""Pool workers start fresh interpreters (fork would copy the parent's threads and memory maps)."""

CONNECT_TIMEOUT_S = 20
"""Seconds to wait for a Dask scheduler before giving up."""


def distribute_tasks(func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], workers: int = 1,
              scheduler: str | None = None, connect_timeout: float = CONNECT_TIMEOUT_S,
              cleanup: Callable[[], Any] | None = None) -> Iterator[Any]:
    """func(*task) for each task, yielded as each finishes (see the module doc).

    cleanup (a module-level function) runs on every Dask worker at the end, to let go of what the
    tasks cached there (Dask workers outlive the run; pool workers end with it)."""
    if workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers}")
    if scheduler is not None and workers != 1:
        raise ValueError("give either a worker count or a Dask scheduler, not both")
    if not tasks:
        return iter(())
    if scheduler is not None:
        return _on_dask(func, tasks, scheduler, connect_timeout, cleanup)
    if workers == 1:
        return (func(*task) for task in tasks)
    return _on_pool(func, tasks, workers)


def _on_pool(func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], workers: int) -> Iterator[Any]:
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context(START_METHOD)
    pending = iter(tasks)
    window = 2 * workers
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
        running: set[Future[Any]] = set()
        try:
            for task in pending:
                running.add(pool.submit(func, *task))
                if len(running) < window:
                    continue
                finished, running = _wait_some(running, wait, FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
            while running:
                finished, running = _wait_some(running, wait, FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
        except BrokenProcessPool as exc:
            raise RuntimeError(f"a worker process died ({exc}); finished results are kept, run again to resume") \
                from None
        finally:
            for future in running:
                future.cancel()


def _wait_some(running: set[Any], wait: Callable[..., Any], mode: Any) -> tuple[list[Any], set[Any]]:
    done, rest = wait(running, return_when=mode)
    return list(done), set(rest)


def _on_dask(func: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], address: str,
             connect_timeout: float, cleanup: Callable[[], Any] | None) -> Iterator[Any]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ValueError("--scheduler needs Dask's distributed scheduler: pip install 'dask[distributed]'") from None
    try:
        client = Client(address, timeout=connect_timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise OSError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        columns = [list(column) for column in zip(*tasks, strict=True)]
        futures = client.map(func, *columns, pure=False)
        for future in as_completed(futures, loop=client.loop):
            result = future.result()
            future.release()
            yield result
    finally:
        if cleanup is not None:
            with contextlib.suppress(Exception):  # best effort: a worker that left has nothing to release
                client.run(cleanup)
        client.close()
