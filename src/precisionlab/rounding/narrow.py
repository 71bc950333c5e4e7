"""float64 to float32 without moving across a breakpoint, so float32 kernels round float64 exactly.

A float32 kernel sees only float32 bits. For float64 input, first take y = fl32(x) (numpy's
round-to-nearest cast: monotone, overflow to ±inf, subnormals kept). Rounding is monotone, so
for every float32 number b, x < b implies y <= b: y can only *land on* a breakpoint b (y == b
while x != b), never cross one. The breakpoints of the targets here are float32 numbers whose
low k bits are zero (k = 16 for formats of at most 8 bits, whose breakpoints are bf16 numbers; k
= 23 - M - 1 for an IEEE format with M mantissa bits, whose midpoints carry one bit more than
its members: 15 for bf16, 12 for fp16). So where y's low k bits (the grid mask; a smaller mask
than needed only looks at more values) are zero and x != y, y is moved one float32 step toward x
(integer ±1 on the magnitude bits): it then lies strictly between the same two breakpoints as x,
and every rounding of it to such a target equals the single rounding of x. This is the only
double rounding a cast can introduce, and the step removes it.

Cases: an overflow (y = ±inf, x finite) steps to ±max_float32; an underflow to ±0 steps to the
smallest subnormal of x's sign; NaN and values that are exact in float32 stay as they are. Only
the landed elements (about 2^-k of random data; all of data already on the target's grid) are
looked at again, and only the inexact ones among them are moved.
"""

from __future__ import annotations

import numpy as np

GRID_MASK_8BIT = 0x7FFF
"""For formats of at most 8 bits, whose breakpoints are bf16 numbers (low 16 bits zero): the low
15 bits. A landed value with bit 15 set is no breakpoint, but moving it one step keeps it between
the same two bf16 numbers, so the wider test is harmless; it lets `table_kernels` reuse the
masked bits for its index."""


def narrow(x: np.ndarray, out: np.ndarray, grid_mask: int, low: np.ndarray) -> None:
    """out (uint32, len(x)) = float32 bits of x (float64) that keep x's side of every float32
    number whose bits under grid_mask are zero; low (uint32, same length) = out & grid_mask.
    Call under np.errstate(over='ignore', invalid='ignore'): numpy warns on a cast past float32's
    range and on a signalling NaN."""
    as32 = out.view(np.float32)
    np.copyto(as32, x, casting="same_kind")
    mask = np.uint32(grid_mask)
    np.bitwise_and(out, mask, out=low)
    on_grid = low == 0
    landed = np.flatnonzero(on_grid)
    if landed.size == 0:
        return
    dense = 8 * landed.size > x.size  # data already on the grid (rounded values): decide without gathers
    landed = np.flatnonzero(on_grid & (x != as32)) if dense else landed[x[landed] != as32[landed]]
    if landed.size == 0:  # every landed value was exact
        return
    wide = np.abs(x[landed])
    near = np.abs(as32[landed]).astype(np.float64)
    step = (wide > near).astype(np.int64) - (wide < near)
    moved = (out[landed].astype(np.int64) + step).astype(np.uint32)
    out[landed] = moved
    low[landed] = moved & mask
