"""The one thread pool: chunked work spread over worker threads, fork-safe.

numpy releases the GIL inside its loops, so independent chunks of an array run in
parallel on threads. Every part of precisionlab that splits work (the rounding engine,
quantize / dequantize) goes through `map_tasks` (a list of tasks) or `spread` (the caller and
the workers pulling from shared work); nothing else starts threads.

Rules:
- Worker count: the CPUs this process may run on (`os.sched_getaffinity(0)`, which
  honours taskset, cgroup cpusets and container limits; `os.cpu_count()` where the
  platform lacks it), or the environment variable PRECISIONLAB_THREADS (a positive
  integer; 1 runs everything on the calling thread and starts no threads). It is read
  when the pool is first needed.
- Fork: a forked child (multiprocessing with fork, DataLoader workers) inherits the
  pool object but not its threads; work sent to it would wait forever. The pool is
  dropped in the child right after fork (`os.register_at_fork`), and the child builds
  its own on first use.
- Nesting: a task that calls `map_tasks` again runs that inner work inline, so a pool
  whose workers all wait on inner tasks cannot deadlock.

This module imports nothing from precisionlab (it sits below every layer).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THREADS_ENV = "PRECISIONLAB_THREADS"
"""Environment variable: worker threads (1 = no threads); default: the CPUs this process may use."""

THREAD_PREFIX = "precisionlab"

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_workers = 0
_local = threading.local()


def worker_count() -> int:
    """PRECISIONLAB_THREADS when set, else the number of CPUs this process may run on (at least 1)."""
    raw = os.environ.get(THREADS_ENV)
    if raw is not None and raw.strip():
        text = raw.strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer (1 = no threads), got {raw!r}")
        return int(text)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _executor() -> tuple[ThreadPoolExecutor | None, int]:
    """The shared pool (built on first use) and its size; no pool when one worker is asked for."""
    global _pool, _workers
    with _lock:
        if _pool is None and _workers == 0:
            _workers = worker_count()
            if _workers > 1:
                _pool = ThreadPoolExecutor(max_workers=_workers, thread_name_prefix=THREAD_PREFIX)
        return _pool, _workers


def reset() -> None:
    """Forget the pool (its threads finish their current tasks and exit); the next call builds a
    new one, re-reading PRECISIONLAB_THREADS."""
    global _pool, _workers
    with _lock:
        pool, _pool, _workers = _pool, None, 0
    if pool is not None:
        pool.shutdown(wait=False)


def _after_fork_in_child() -> None:
    # The child has only the forking thread: the pool's threads and any lock they held are
    # gone. Drop the pool without shutting it down (that would wait on threads that do not
    # exist) and replace the lock, which may have been held at the fork.
    global _pool, _workers, _lock, _local
    _lock = threading.Lock()
    _pool, _workers = None, 0
    _local = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _in_worker() -> bool:
    return bool(getattr(_local, "inside", False))


def _marked(fn: Callable[[T], R]) -> Callable[[T], R]:
    def run(item: T) -> R:
        _local.inside = True
        try:
            return fn(item)
        finally:
            _local.inside = False

    return run


def map_tasks(fn: Callable[[T], R], items: Sequence[T], parallel: bool = True) -> list[R]:
    """[fn(item) for item in items], in order, on the shared pool when `parallel` and worth it.

    Runs inline when parallel is False, when there are fewer than two items, when one worker
    is configured, or when called from inside a pool task. The first exception a task
    raises reaches the caller.
    """
    if not parallel or len(items) < 2 or _in_worker():
        return [fn(item) for item in items]
    pool, workers = _executor()
    if pool is None or workers < 2:
        return [fn(item) for item in items]
    return list(pool.map(_marked(fn), items))


def spread(fn: Callable[[], None]) -> None:
    """Run fn() on the calling thread and, at the same time, on every other pool worker; return
    when all have returned. fn pulls its own work (for example chunk numbers from a shared
    `itertools.count`, whose `next` is atomic under the GIL), so a worker the operating system
    does not schedule takes none and the call is never much slower than one thread: at worst by
    the work item a late helper holds. The first exception raised anywhere reaches the caller.
    Inline (fn() once) with one worker or inside a pool task."""
    pool, workers = (None, 1) if _in_worker() else _executor()
    if pool is None or workers < 2:
        fn()
        return
    helpers = [pool.submit(_marked(lambda _: fn()), None) for _ in range(workers - 1)]
    error: BaseException | None = None
    try:
        fn()
    except BaseException as exc:
        error = exc
    for helper in helpers:  # wait for every helper before returning or raising
        try:
            helper.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error


def threads_available() -> bool:
    """True when map_tasks may use more than one thread."""
    return _executor()[1] > 1


def pool_size() -> int:
    """Threads map_tasks spreads work over (1: everything runs on the calling thread); 1 inside a
    pool task, where nested work runs inline."""
    return 1 if _in_worker() else _executor()[1]


__all__ = ["THREADS_ENV", "map_tasks", "pool_size", "reset", "spread", "threads_available", "worker_count"]
