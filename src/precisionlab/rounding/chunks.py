"""Run a chunk kernel over a large flat array: cache-sized chunks, pulled by the threads that run.

A kernel rounds one chunk from `src` into `out` using scratch arrays it asks for once per thread
(`scratch(n)`), so no chunk allocates (allocations of a chunk's size come from the operating
system and cost page faults on every call). Arrays below PARALLEL_MIN run on the calling
thread. Larger ones run through `parallel.spread`: the calling thread and each pool worker take
the next chunk number from one shared counter until none is left, so a worker that gets no
CPU (a loaded machine) takes no chunk, and the call is then never slower than one thread by
more than the chunk a late helper holds. The first error stops every thread after its chunk.
"""

from __future__ import annotations

import itertools
from typing import Protocol

import numpy as np

from precisionlab import parallel as thread_pool

CHUNK = 1 << 16
"""Elements per chunk: a chunk and its scratch (a few 256 KiB arrays) stay in the 1 MiB L2 cache."""

PARALLEL_MIN = 1 << 26
"""Arrays at least this large are shared with the thread pool. Measured on the 2-core machine
under load (interleaved medians, `benchmarks/bench_rounding.py --threads`): two threads were
slower than one at every size from 2^17 to 2^25 elements (0.2-0.96x), so smaller calls run on
the calling thread. Re-measure on an idle machine with that benchmark."""


class ChunkKernel(Protocol):
    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        """Work arrays for chunks of up to n elements."""
        ...

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        """out[:] = round(src) for one chunk (1-D, len <= the n given to scratch)."""
        ...


def run_chunked(kernel: ChunkKernel, src: np.ndarray, out: np.ndarray, parallel_min: int | None = None) -> None:
    """out = round(src) over 1-D arrays of equal length, as the module docstring says
    (parallel_min: PARALLEL_MIN when None)."""
    n = src.size
    if n < (PARALLEL_MIN if parallel_min is None else parallel_min) or thread_pool.pool_size() < 2:
        _run_range(kernel, src, out, 0, n)
        return
    count = -(-n // CHUNK)
    claim = itertools.count()
    failed: list[BaseException] = []

    def pull() -> None:
        scratch = kernel.scratch(min(CHUNK, n))
        while not failed:
            index = next(claim)
            if index >= count:
                return
            start = index * CHUNK
            stop = min(start + CHUNK, n)
            try:
                kernel.run(src[start:stop], out[start:stop], tuple(s[: stop - start] for s in scratch))
            except BaseException as exc:
                failed.append(exc)
                raise

    thread_pool.spread(pull)


def _run_range(kernel: ChunkKernel, src: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    if hi <= lo:
        return
    scratch = kernel.scratch(min(CHUNK, hi - lo))
    for start in range(lo, hi, CHUNK):
        stop = min(start + CHUNK, hi)
        kernel.run(src[start:stop], out[start:stop], tuple(s[: stop - start] for s in scratch))
