"""Time and peak memory of a piece of work.

Peak memory is the process's resident-set high-water mark (Linux VmHWM, reset through
/proc/self/clear_refs before each section), so it counts torch's and numpy's buffers alike;
a section's peak is reported as megabytes above the resident size when it started. Where
that interface is missing (not Linux), tracemalloc's peak is used instead, which sees numpy
and Python allocations but not torch's (`MemoryMeter.source` says which).
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

MB = 1 << 20


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Section:
    seconds: float = 0.0
    peak_mb: float = 0.0


class MemoryMeter:
    """Measures sections one after another; `peak_mb` is the largest resident size above the first start."""

    def __init__(self) -> None:
        rss = _status_kb("VmRSS")
        self.source = "rss" if rss is not None and _reset_hwm() else "tracemalloc"
        self._base_kb = rss or 0
        self._max_kb = self._base_kb
        self.peak_mb = 0.0

    @contextlib.contextmanager
    def section(self) -> Iterator[Section]:
        out = Section()
        start = time.perf_counter()
        if self.source == "rss":
            begin = _status_kb("VmRSS") or 0
            _reset_hwm()
            try:
                yield out
            finally:
                hwm = _status_kb("VmHWM") or begin
                out.seconds = time.perf_counter() - start
                out.peak_mb = max(hwm - begin, 0) * 1024 / MB
                self._max_kb = max(self._max_kb, hwm)
                self.peak_mb = max(self._max_kb - self._base_kb, 0) * 1024 / MB
        else:
            started = not tracemalloc.is_tracing()
            if started:
                tracemalloc.start()
            tracemalloc.reset_peak()
            begin = tracemalloc.get_traced_memory()[0]
            try:
                yield out
            finally:
                peak = tracemalloc.get_traced_memory()[1]
                if started:
                    tracemalloc.stop()
                out.seconds = time.perf_counter() - start
                out.peak_mb = max(peak - begin, 0) / MB
                self.peak_mb = max(self.peak_mb, out.peak_mb)
