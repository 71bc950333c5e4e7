"""Wall-clock timing shared by the benchmark scripts (run them as `python3 benchmarks/X.py`): best of N,
interleaved medians, and call-by-call pairs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """(fastest of `repeat` runs in seconds, the last run's result). The minimum is the least
    disturbed by other work on a noisy machine."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest of `repeat` runs, in seconds."""
    return timed(fn, repeat)[0]


def interleaved(contenders: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median seconds per call of each contender, timed in turn: round r times every contender once
    before round r + 1, so a burst of load on a shared machine hits them alike. Each is called
    once untimed first (tables, thread pools, first-touch pages)."""
    for fn in contenders.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def paired_calls(ours: Callable[[], Any], peer: Callable[[], Any], calls: int) -> tuple[float, float]:
    """Median seconds of single calls of ours and peer, alternated call by call (for microsecond
    calls, whose medians a loaded machine would otherwise skew one way or the other)."""
    ours()
    peer()
    a: list[float] = []
    b: list[float] = []
    clock = time.perf_counter
    for _ in range(calls):
        t0 = clock()
        ours()
        t1 = clock()
        peer()
        t2 = clock()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b)
