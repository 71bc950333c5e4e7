"""float64 to float32 without moving across a breakpoint, so float32 kernels round float64 exactly.

A float32 kernel sees only float32 bits. For float64 input, first take y = fl32(x) (numpy's
round-to-nearest cast: monotone, overflow to ±inf, subnormals kept). Rounding is monotone, so
for every float32 number b, x < b implies y <= b: y can only *land on* a breakpoint b (y == b
while x != b), never cross one. The breakpoints of the targets here are float32 numbers whose
low k bits are zero (k = 16 or 15 for the table kernels' formats of at most 8 bits, whose
breakpoints lie on those grids; k = 23 - M - 1 for an IEEE format with M mantissa bits, whose
midpoints carry one bit more than its members: 15 for bf16, 12 for fp16). So where y's bits
under the grid mask are zero (the low k bits, or fewer: a smaller mask only looks at more values,
and a landed value off the grid, moved one step, stays between the same two grid numbers; the
table kernels pass the low k - 1 bits, which their index reuses) and x != y, y is moved one
float32 step toward x (integer ±1 on the magnitude bits): it then lies strictly between the same
two breakpoints as x, and every rounding of it to such a target equals the single rounding of x. This is the only
double rounding a cast can introduce, and the step removes it.

Cases: an overflow (y = ±inf, x finite) steps to ±max_float32; an underflow to ±0 steps to the
smallest subnormal of x's sign; NaN and values that are exact in float32 stay as they are. Only
the landed elements (about 2^-k of random data; all of data already on the target's grid) are
looked at again, and only the inexact ones among them are moved.
"""

from __future__ import annotations

import numpy as np


def narrow(x: np.ndarray, out: np.ndarray, grid_mask: int, low: np.ndarray) -> None:
    """out (uint32, len(x)) = float32 bits of x (float64) that keep x's side of every float32
    number whose bits under grid_mask are zero; low (uint32, same length) = out & grid_mask.
    Call under np.errstate(over='ignore', invalid='ignore'): numpy warns on a cast past float32's
    range and on a signalling NaN."""
    as32 = out.view(np.float32)
    np.copyto(as32, x, casting="same_kind")
    mask = np.uint32(grid_mask)
    np.bitwise_and(out, mask, out=low)
    if np.count_nonzero(low) == low.size:  # nothing landed on the grid (random data: about 2^-k of it does)
        return
    on_grid = low == 0
    landed = np.flatnonzero(on_grid)
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
