"""Formats of at most 8 bits by one gather from a 2^17-entry table, for float32 and float64 input.

When every breakpoint candidate of a format is a bf16 number (`breakpoints.all_bf16`: true for
every registered format of at most 8 bits whose range lies inside float32's), the rounding of a
float32 depends only on which bf16 number it equals or which open interval between two of them
it lies in. Entry (top 16 bits) * 2 + (any low bit set) of the table holds that result, computed
once by the exact engine (`engine.table_representatives`), and

    index = (bits >> 15) | min(bits & 0x7FFF, 1)

(bit 15 is already the sticky bit when set; otherwise the min of the low 15 bits is) costs four
integer passes, then one gather. float64 input is first narrowed to float32 bits that keep its
side of every bf16 number (`narrow`), so it is rounded once, exactly, by the same table.
"""

from __future__ import annotations

import numpy as np

from precisionlab.rounding.narrow import GRID_MASK_8BIT, narrow

_SHIFT = np.uint32(15)
_LOW = np.uint32(GRID_MASK_8BIT)  # the index reuses what narrow leaves in `low`
_ONE = np.uint32(1)


def table_index(bits: np.ndarray, out: np.ndarray, low: np.ndarray, masked: bool = False) -> np.ndarray:
    """out = table entry of float32 bits (uint32 arrays of one length; low is work space, or, with
    masked=True, already holds bits & 0x7FFF)."""
    if not masked:
        np.bitwise_and(bits, _LOW, out=low)
    np.right_shift(bits, _SHIFT, out=out)
    np.minimum(low, _ONE, out=low)
    np.bitwise_or(out, low, out=out)
    return out


class Table32:
    """float32 in: out = table[index(bits)]."""

    def __init__(self, table: np.ndarray, nan_message: str | None) -> None:
        self.table = table
        self.nan_message = nan_message
        """Set for a format without NaN under nan='raise': NaN input raises it."""

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint32)

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        if self.nan_message is not None and src.size and (top := np.maximum.reduce(src)) != top:
            raise ValueError(self.nan_message)
        index, low = scratch
        self.table.take(table_index(src.view(np.uint32), index, low), out=out, mode="wrap")


class Table64:
    """float64 in: narrow to float32 bits, then out = table[index(bits)] (a float64 table)."""

    def __init__(self, table: np.ndarray, nan_message: str | None) -> None:
        self.table = table
        self.nan_message = nan_message

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return tuple(np.empty(n, dtype=np.uint32) for _ in range(3))

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        if self.nan_message is not None and src.size and (top := np.maximum.reduce(src)) != top:
            raise ValueError(self.nan_message)
        bits, index, low = scratch
        with np.errstate(over="ignore", invalid="ignore"):  # casts past float32, signalling NaNs
            narrow(src, bits, GRID_MASK_8BIT, low)
        self.table.take(table_index(bits, index, low, masked=True), out=out, mode="wrap")
