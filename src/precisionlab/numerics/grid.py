"""Fast round-to-nearest-even of float64 arrays onto one or several float formats (one per lane).

`round_to` is exact and general but costs tens of microseconds per call; an emulated
accumulator calls it once per addition. This module does the same rounding (nearest-even,
each format's default overflow policy) in about a dozen numpy operations, and lets
several formats share one call by giving each lane (a slice along the first axis) its own
format. tests/test_numerics_accumulate.py checks it against exact rationals and ml_dtypes.

For a finite float64 x with unbiased exponent e = floor(log2 |x|) and a target with M
mantissa bits and smallest normal exponent emin:

    quantum  q = 2^(max(e, emin) - M)          (the subnormal quantum below 2^emin)
    result   r = rint(x / q) * q               (rint: nearest, ties to even; both scalings exact)

|r| > max_finite is an overflow: ±inf (IEEE formats), NaN (fn / fnuz), ±max_finite (finite
formats). fnuz formats have no -0, so a zero result is +0. The exponent is left
unbounded while rounding, so a value that rounds up past the top binade lands above
max_finite and overflows, as IEEE specifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from precisionlab.formats import Encoding, FloatFormat, Format, IntFormat
from precisionlab.rounding.exact_sum import accumulator_format


@dataclass(frozen=True)
class Grid:
    """Rounding parameters for one format, or one format per lane (arrays shaped for broadcasting)."""

    names: tuple[str, ...]
    man_bits: np.ndarray
    emin: np.ndarray
    max_finite: np.ndarray
    overflow_value: np.ndarray
    """What |r| > max_finite becomes (sign applied afterwards): inf, nan or max_finite."""
    unsigned_zero: np.ndarray
    """True for fnuz lanes: -0 becomes +0."""
    biased_emin: np.ndarray
    """emin + 1023: the smallest float64 exponent field whose binade is normal in the format."""
    quantum_offset: np.ndarray
    """man_bits + 1023: the float64 exponent field minus this is the quantum's exponent."""
    any_unsigned_zero: bool
    max_precision: int
    """Largest significand width among the lanes (p = M + 1)."""

    @property
    def lanes(self) -> int:
        return len(self.names)


def make_grid(formats: str | Format | Sequence[str | Format], lane_ndim: int = 0) -> Grid:
    """A Grid for one format (scalar parameters) or a sequence of formats (one per lane).

    lane_ndim: number of trailing axes after the lane axis in the arrays that will be
    rounded; the per-lane parameters get that many singleton axes so they broadcast.
    """
    several = not isinstance(formats, (str, FloatFormat, IntFormat))
    specs: list[str | Format] = [formats] if isinstance(formats, (str, FloatFormat, IntFormat)) else list(formats)
    if not specs:
        raise ValueError("give at least one format")
    chosen = [accumulator_format(f) for f in specs]
    shape = (len(chosen),) + (1,) * lane_ndim if several else ()

    def column(values: list[float] | list[int] | list[bool], dtype: type) -> np.ndarray:
        return np.asarray(values, dtype=dtype).reshape(shape)

    return Grid(
        names=tuple(f.name for f in chosen),
        man_bits=column([f.man_bits for f in chosen], np.int64),
        emin=column([f.emin for f in chosen], np.int64),
        max_finite=column([f.max_finite for f in chosen], np.float64),
        overflow_value=column([_overflow_value(f) for f in chosen], np.float64),
        unsigned_zero=column([f.encoding is Encoding.FNUZ for f in chosen], bool),
        biased_emin=column([f.emin + 1023 for f in chosen], np.int64),
        quantum_offset=column([f.man_bits + 1023 for f in chosen], np.int64),
        any_unsigned_zero=any(f.encoding is Encoding.FNUZ for f in chosen),
        max_precision=max(f.man_bits + 1 for f in chosen),
    )


def _overflow_value(fmt: FloatFormat) -> float:
    if fmt.has_inf:
        return np.inf
    if fmt.has_nan:
        return np.nan
    return fmt.max_finite


def round_grid(x: npt.ArrayLike, grid: Grid) -> np.ndarray:
    """x (float64) rounded to nearest-even on each lane's format; see the module docstring."""
    x = np.asarray(x, dtype=np.float64)
    field = (x.view(np.int64) >> 52) & 0x7FF
    scale = grid.quantum_offset - np.maximum(field, grid.biased_emin)  # -(quantum exponent)
    r = np.ldexp(np.rint(np.ldexp(x, scale)), -scale)
    magnitude = np.abs(r)
    if not np.all(magnitude <= grid.max_finite):  # overflow (or NaN, which stays NaN)
        r = np.where(magnitude > grid.max_finite, np.copysign(grid.overflow_value, r), r)
    if grid.any_unsigned_zero:
        r = np.where(grid.unsigned_zero & (r == 0), 0.0, r)
    return r
