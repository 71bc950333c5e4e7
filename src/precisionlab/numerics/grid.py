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

`scalar_rounder` is the same rounding for one Python float at a time (one format), for
loops over a handful of lanes, where a numpy call on a tiny array costs ~1 µs of overhead and
a float operation ~20 ns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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


RINT_MAGIC = 1.5 * 2.0**52
"""(v + 1.5·2^52) - 1.5·2^52 is v rounded to an integer, nearest-even, for |v| < 2^51: the sum lies in
[2^52, 2^53), where the float64 spacing is 1."""


def scalar_rounder(spec: str | Format) -> Callable[[float, float], float]:
    """fl(hi, lo): hi + lo rounded to nearest-even on one format, for Python floats, where hi = fl64(hi + lo)
    (TwoSum's pair; lo = 0 when hi is the exact value). Same rule and overflow policy as round_grid.

    With frexp's exponent e (2^(e-1) <= |hi| < 2^e): quantum 2^qe, qe = max(e - 1, emin) - M, and
    k = rint(hi / 2^qe), where |hi / 2^qe| < 2^p <= 2^51, so RINT_MAGIC rounds it. Rounding hi instead of
    hi + lo changes the result only when hi is a midpoint of the format (k is then a tie) and lo != 0: the
    exact sum lies on lo's side of it, so k is the integer on that side. Anywhere else the open interval
    between hi and its float64 neighbour towards lo holds no midpoint (midpoints are float64 numbers, as
    p + 1 <= 53), so hi and hi + lo round alike. Zero keeps hi's sign (+0 on fnuz formats).
    """
    fmt = accumulator_format(spec)
    top, shift = fmt.emin + 1, fmt.man_bits + 1
    max_finite, overflow_value = fmt.max_finite, _overflow_value(fmt)
    unsigned_zero = fmt.encoding is Encoding.FNUZ
    frexp, ldexp, copysign = math.frexp, math.ldexp, math.copysign

    def fl(hi: float, lo: float) -> float:
        e = frexp(hi)[1]
        qe = (e if e > top else top) - shift
        scaled = ldexp(hi, -qe)
        k = (scaled + RINT_MAGIC) - RINT_MAGIC
        if lo and abs(scaled - k) == 0.5:  # a tie for hi, not for hi + lo (NaN lo: inf - inf is no tie)
            k = scaled + 0.5 if lo > 0 else scaled - 0.5
        try:
            r = ldexp(k, qe)
        except OverflowError:  # rounded up to 2^1024: above every format's max_finite
            r = copysign(math.inf, hi)
        if not r:
            return 0.0 if unsigned_zero else copysign(0.0, hi)
        if r > max_finite or r < -max_finite:
            return copysign(overflow_value, r)
        return r

    return fl
