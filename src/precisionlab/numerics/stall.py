"""Repeated addition of one term until the sum stops moving (the stall).

    s_0 = start,  s_k = fl(s_{k-1} + t)   with t the term as stored in the format.

Once ulp(s)/2 > |t| (strictly; at equality ties-to-even decides), fl(s + t) = s, and
because rounding is deterministic the sum never moves again: that fixed point is the
stall. The chain stops there instead of running the remaining additions, so a stall is
cheap however large `count` is. fp16 with t = fl16(0.01) = 0.0100021...: below 32 the
gap is 2^-6 and each addition rounds up to one gap; at 32 the gap is 2^-5, half of it
2^-6 = 0.0156 > t, so the sum stays at exactly 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from precisionlab.formats import Format, get_format
from precisionlab.numerics.accumulate import NATIVE_DTYPES, add_rounded
from precisionlab.numerics.grid import Grid, make_grid, round_grid

CHUNK = 1 << 16
"""Additions per numpy accumulate call on the native path."""


@dataclass(frozen=True)
class RepeatedSum:
    """Result of count additions of term to start in one format."""

    format: str
    term: float
    """The term as stored in the format (what is actually added)."""
    count: int
    value: float
    """The sum after count additions (the fixed point if the chain stalled)."""
    stall_step: int | None
    """1-based index of the first addition that left the sum unchanged; None if none did."""
    exact: float
    """start + count·term in exact arithmetic (rounded once to float64)."""

    @property
    def stalled(self) -> bool:
        return self.stall_step is not None

    @property
    def relative_error(self) -> float:
        return abs(self.value - self.exact) / abs(self.exact) if self.exact != 0 else abs(self.value)


def repeated_sum(term: float, fmt: str | Format, count: int, start: float = 0.0) -> RepeatedSum:
    """Add `term` (first rounded to fmt, as a stored value is) to `start` count times, each
    addition rounded once to fmt; stop early at the fixed point."""
    if count < 0:
        raise ValueError(f"count must be non-negative, got {count}")
    name = get_format(fmt).name
    dtype = NATIVE_DTYPES.get(name)
    if dtype is not None:
        t = float(np.asarray(term, dtype=np.float64).astype(dtype))
        s0 = float(np.asarray(start, dtype=np.float64).astype(dtype))
        value, stall = _native_chain(t, s0, count, dtype)
    else:
        grid = make_grid(name)
        t = float(round_grid(float(term), grid))
        s0 = float(round_grid(float(start), grid))
        value, stall = _emulated_chain(t, s0, count, grid)
    exact = _exact(s0, t, count)
    return RepeatedSum(name, t, count, value, stall, exact)


def _exact(start: float, term: float, count: int) -> float:
    """start + count·term, computed in rationals and rounded once."""
    return float(Fraction(start) + count * Fraction(term))


def _native_chain(term: float, start: float, count: int, dtype: type[np.floating[Any]]) -> tuple[float, int | None]:
    """numpy's own sequential accumulate in dtype, CHUNK additions at a time."""
    s = dtype(start)
    done = 0
    while done < count:
        size = min(CHUNK, count - done)
        chain = np.full(size + 1, term, dtype=dtype)
        chain[0] = s
        partial = np.add.accumulate(chain)
        unchanged = np.flatnonzero(partial[1:] == partial[:-1])
        if unchanged.size:
            return float(partial[unchanged[0]]), done + int(unchanged[0]) + 1
        s = partial[-1]
        done += size
    return float(s), None


def _emulated_chain(term: float, start: float, count: int, grid: Grid) -> tuple[float, int | None]:
    """One rounded addition per step (any format); stops at the fixed point."""
    s = start
    for step in range(1, count + 1):
        nxt = float(add_rounded(s, term, grid))
        if nxt == s:
            return s, step
        s = nxt
    return s, None
