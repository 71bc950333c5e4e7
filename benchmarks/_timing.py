"""Best-of-N wall-clock timing shared by the benchmark scripts (run them as `python3 benchmarks/X.py`)."""

from __future__ import annotations

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
