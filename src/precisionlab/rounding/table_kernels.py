"""Formats of at most 8 bits by one gather from a table keyed on the top bits of float32.

The rounding of a float32 under a deterministic mode is a step function whose steps sit only at
the format's breakpoint candidates (`breakpoints`). When every candidate is a float32 number
whose low w bits are zero (a number of the *w-grid*), the rounding of a float32 depends only on
which w-grid number it equals or which open interval between two of them it lies in. Entry

    (top 32 - w bits) * 2 + (any of the low w bits set)

of a 2^(33 - w)-entry table holds that result, computed once by the exact engine on one
representative per entry (`representatives`), and

    index = (bits | ((bits & m) + m)) >> (w - 1),   m = 2^(w - 1) - 1

(the low w - 1 bits plus m carry into bit w - 1 exactly when any of them is set, and stay below
bit w, so after the OR bit w - 1 is the sticky bit and the shift drops the junk below it) costs
four cheap integer passes, then one gather. (An earlier form, (bits >> (w - 1)) | min(bits & m,
1), spent as long in numpy's uint32 minimum as in the other three passes together.) Two grids
are used (`grid_width` picks the coarser one that holds every candidate):

    w = 16   2^17 entries   candidates are bf16 numbers: every format of at most 8 bits with at
                            most 6 trailing significand bits (members have M + 1 <= 7
                            significant bits, midpoints one more) inside float32's range
    w = 15   2^18 entries   candidates carry one more bit: 7 trailing significand bits, as in
                            the unsigned P3109 binary8p8 (e1m7), whose midpoints have 9

float64 input is first narrowed to float32 bits that keep its side of every w-grid number
(`narrow`, grid mask 2^(w - 1) - 1, the same low bits the index tests), so it is rounded once,
exactly, by the same table.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from precisionlab.rounding.breakpoints import exact_in
from precisionlab.rounding.narrow import narrow

GRID_WIDTHS = (16, 15)
"""The low-bit widths w of the table grids, coarsest (smallest table) first."""

_ONE = np.uint32(1)


def grid_width(steps: np.ndarray) -> int | None:
    """The largest w of GRID_WIDTHS such that every value (float64) is a float32 number with its
    low w bits zero, or None."""
    as32 = exact_in(steps, np.float32)
    if as32 is None:
        return None
    bits = as32.view(np.uint32)
    for width in GRID_WIDTHS:
        if not (bits & np.uint32((1 << width) - 1)).any():
            return width
    return None


@lru_cache(maxsize=len(GRID_WIDTHS))
def representatives(width: int) -> np.ndarray:
    """One float32 per table entry of the w-grid (read-only): entry i has the top 32 - w bits
    i >> 1 and, below them, the low bits i & 1 (0: the grid number itself; 1: the smallest
    float32 above it in its open interval, or a NaN pattern where that interval is NaNs)."""
    index = np.arange(1 << (33 - width), dtype=np.uint32)
    values = (((index >> _ONE) << np.uint32(width)) | (index & _ONE)).view(np.float32)
    values.flags.writeable = False
    return values


class TableIndex:
    """The entry of float32 bits in the w-grid's table (as the module says)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.shift = np.array(width - 1, dtype=np.uint32)
        self.grid_mask = (1 << (width - 1)) - 1
        """The low bits that the sticky test reads (and `narrow` steps off the grid)."""
        self.low_mask = np.array(self.grid_mask, dtype=np.uint32)

    def __call__(self, bits: np.ndarray, out: np.ndarray, low: np.ndarray, masked: bool = False) -> np.ndarray:
        """out = entry of bits (uint32 arrays of one length; low is work space, or, with
        masked=True, already holds bits & grid_mask)."""
        if not masked:
            np.bitwise_and(bits, self.low_mask, out=low)
        np.add(low, self.low_mask, out=low)
        np.bitwise_or(bits, low, out=out)
        np.right_shift(out, self.shift, out=out)
        return out


class TableKernel:
    """A w-grid table and its index; the subclasses read float32 or float64 input."""

    def __init__(self, table: np.ndarray, nan_message: str | None, width: int = 16) -> None:
        if table.size != 1 << (33 - width):
            raise ValueError(f"a w = {width} table has {1 << (33 - width)} entries, got {table.size}")
        self.table = table
        self.index = TableIndex(width)
        self.nan_message = nan_message
        """Set for a format without NaN under nan='raise': NaN input raises it."""


class Table32(TableKernel):
    """float32 in: out = table[index(bits)]."""

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint32)

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        if self.nan_message is not None and src.size and (top := np.maximum.reduce(src)) != top:
            raise ValueError(self.nan_message)
        index, low = scratch
        self.table.take(self.index(src.view(np.uint32), index, low), out=out, mode="wrap")


class Table64(TableKernel):
    """float64 in: narrow to float32 bits, then out = table[index(bits)] (a float64 table)."""

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return tuple(np.empty(n, dtype=np.uint32) for _ in range(3))

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        if self.nan_message is not None and src.size and (top := np.maximum.reduce(src)) != top:
            raise ValueError(self.nan_message)
        bits, index, low = scratch
        with np.errstate(over="ignore", invalid="ignore"):  # casts past float32, signalling NaNs
            narrow(src, bits, self.index.grid_mask, low)
        self.table.take(self.index(bits, index, low, masked=True), out=out, mode="wrap")
