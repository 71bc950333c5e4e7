"""IEEE-style targets inside float32's range under nearest-even with overflow to inf: integer adds
on float32 bits (bf16, fp16, tf32, e6m9, ...), and fp32 / fp64 by numpy's exact casts.

    bf16 (float32's exponent range)   t = bits + 0x7FFF + (bit 16 of bits), low 16 bits cleared:
                                      nearest-even on the bit pattern, the carry running into
                                      the exponent (and to inf past bf16's largest value);
                                      float32 subnormals are bf16 subnormals. Five passes
                                      (`bf16_array`: the same on a small array, without the
                                      chunk driver's layers).
    other IEEE formats, s = 23 - M    the same add on the magnitude with 2^(s-1) - 1 + bit s;
                                      then t > bits(max_finite) becomes inf; magnitudes below
                                      2^emin (the target's subnormals, a uniform grid of quantum
                                      q = 2^(emin - M)) are rounded by float32 arithmetic:
                                      (|x| + C) - C with C = 2^(emin - M + 23), whose sum has
                                      ulp q, so the hardware's nearest-even does the rounding and
                                      the subtraction is exact; the sign goes back last.
    fp32 from float64                 numpy's cast (IEEE 754 conversion: nearest-even,
                                      subnormals, overflow to ±inf); `dispatch` checks it on
                                      double-rounding traps before it trusts it.
    fp32 from float32, fp64 from float64: a copy.
    saturate (`Saturated`)            any of these, then a clamp to ±max_finite: under nearest-
                                      even a value rounds past max_finite exactly when it becomes
                                      ±inf, so the clamped result is the saturate policy's (±inf
                                      inputs clamp too; NaN and -0 pass through min / max).

float64 input to the integer kernels is first narrowed (`narrow`, grid mask 2^(s-1) - 1: every
member and midpoint of the target has those float32 bits zero), so it is rounded once.

NaN leaves each kernel as the engine's canonical quiet NaN with the input's sign (the integer
add would turn some NaN payloads into inf, a cast keeps payload bits): after the pass, any NaN
of the input is rewritten, which costs one isnan test per chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from precisionlab.formats import FloatFormat, get_float_format
from precisionlab.rounding.narrow import narrow

_MAGNITUDE = np.uint32(0x7FFFFFFF)
_SIGN = np.uint32(0x80000000)
_INF = np.uint32(0x7F800000)
# 0-d arrays rather than numpy scalars: a ufunc takes a 0-d array operand in about 0.3
# microseconds where a scalar costs about 0.5 (measured on the 2-core machine), which shows on
# small arrays.
_SIXTEEN = np.array(16, dtype=np.uint32)
_ONE = np.array(1, dtype=np.uint32)
_HALF_MINUS_ONE = np.array(0x7FFF, dtype=np.uint32)
_TOP_HALF = np.array(0xFFFF0000, dtype=np.uint32)


def overflow_edge(fmt: FloatFormat) -> float:
    """max_finite plus half the last ulp: under nearest-even |x| below it rounds to at most
    max_finite, and from it on (the tie goes up: max_finite's mantissa is odd) to inf."""
    return fmt.max_finite + math.ldexp(0.5, fmt.emax - fmt.man_bits)


_FP16_QUIET = np.array(overflow_edge(get_float_format("fp16")), dtype=np.float32)
"""65520: fp16's overflow edge. A float32 or float64 array whose magnitudes are all below it (no NaN,
no inf) goes through numpy's float16 cast without raising a floating-point flag, so the cast needs
no np.errstate (which costs about 1.6 microseconds)."""


def canonical_nans(src: np.ndarray, out: np.ndarray) -> None:
    """Where src is NaN, out becomes the quiet NaN with src's sign. One reduction finds whether
    there is any (a maximum is NaN exactly when some element is)."""
    if src.size and (top := np.maximum.reduce(src)) != top:
        np.copyto(out, np.copysign(out.dtype.type(np.nan), src), where=np.isnan(src))


def bf16_bits(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out (uint32; a new array when None) = float32 bits rounded to bf16, nearest-even (NaN
    aside: see the module). Five in-place passes, the output arguments positional (a keyword
    costs numpy a dictionary per call, which shows on small arrays)."""
    out = np.right_shift(bits, _SIXTEEN, out)
    np.bitwise_and(out, _ONE, out)
    np.add(out, bits, out)
    np.add(out, _HALF_MINUS_ONE, out)
    np.bitwise_and(out, _TOP_HALF, out)
    return out


def bf16_array(x: np.ndarray) -> np.ndarray:
    """A 1-D float32 array (any stride) rounded to bf16 as a new float32 array: `bf16_bits` on
    x's bits, allocating its output in the first pass, then the NaN rule of the module. The small-
    array form of IeeeFrom32 for bf16 (no chunk, no scratch, no copy of x)."""
    out = bf16_bits(x.view(np.uint32)).view(np.float32)
    canonical_nans(x, out)
    return out


def clamp(out: np.ndarray, bound: np.ndarray, low: np.ndarray) -> np.ndarray:
    """out clamped in place to [low, bound] (0-d arrays of out's dtype; ±inf included). np.minimum and
    np.maximum return a NaN operand as it is, and -0 stays -0."""
    np.minimum(out, bound, out=out)
    np.maximum(out, low, out=out)
    return out


def bounds(fmt: FloatFormat, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(max_finite, -max_finite) as 0-d arrays of dtype, for `clamp`."""
    return np.array(fmt.max_finite, dtype=dtype), np.array(-fmt.max_finite, dtype=dtype)


def cast_when_quiet(via: type, out_dtype: type[np.floating], quiet: np.ndarray,
                    loud: Callable[[np.ndarray], np.ndarray],
                    saturate: tuple[np.ndarray, np.ndarray] | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A 1-D array rounded by a cast to `via` and back to out_dtype when every |x| < quiet, the
    format's overflow edge (one test; NaN compares false): then nothing is NaN, inf or rounds past
    max_finite, so the cast raises no overflow or invalid flag and every overflow policy agrees with
    it. Otherwise loud(x), the exact kernel for NaN and overflow (to inf), clamped to the saturate
    bounds when given. A closure over local names: its call costs less than a method's.

    numpy's float16 casts and ml_dtypes' casts from float64 raise the underflow flag on an inexact
    subnormal result, as numpy's own casts do; numpy ignores that flag unless asked, and a test for
    tiny values would cost more than the cast."""
    count, less, absolute = np.count_nonzero, np.less, np.absolute

    def cast(x: np.ndarray) -> np.ndarray:
        if count(less(absolute(x), quiet)) == x.size:
            return x.astype(via).astype(out_dtype)
        out = loud(x)
        return out if saturate is None else clamp(out, *saturate)

    return cast


def fp16_loud(out_dtype: type[np.floating]) -> Callable[[np.ndarray], np.ndarray]:
    """fp16 by numpy's casts for an array that may hold NaN, inf or values past fp16's range: the
    casts under np.errstate (about 1.6 microseconds), then the NaN rule of the module."""
    def loud(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the rounding's; NaN payloads
            out = x.astype(np.float16).astype(out_dtype)
        canonical_nans(x, out)
        return out

    return loud


def fp16_by_cast(out_dtype: type[np.floating],
                 saturate: tuple[np.ndarray, np.ndarray] | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A 1-D float32 or float64 array rounded to fp16 as a new out_dtype array, by numpy's own casts
    (IEEE 754 conversion, float64 included, straight to float16: nearest-even, subnormals, overflow
    to ±inf, one rounding; the way back is exact), then the NaN rule of the module. Two C loops where
    `IeeeBits` needs about ten passes: faster up to a few thousand elements, slower above (numpy's
    float16 cast is not vectorised), so `dispatch` uses it only for small arrays. When every
    |x| < 65520 the casts run bare (`cast_when_quiet`)."""
    return cast_when_quiet(np.float16, out_dtype, _FP16_QUIET, fp16_loud(out_dtype), saturate)


fp16_array = fp16_by_cast(np.float32)
"""fp16 for a 1-D float32 array, as a float32 array (`fp16_by_cast`)."""


def bf16_by_cast(bfloat16: type) -> Callable[[np.ndarray], np.ndarray]:
    """bf16 for a 1-D float32 array by ml_dtypes' bfloat16 cast and back, as a new float32 array:
    nearest-even on the bit pattern, and every NaN squashed to the quiet NaN with its sign, which is
    the module's NaN rule already. Two C loops: the small-array form of bf16 where ml_dtypes is
    installed (`dispatch` checks it against the engine before it uses it). A signalling NaN makes
    that cast raise the invalid flag, so an array holding NaN takes `bf16_array` instead (one
    isnan and one count decide). A closure over local names: its call costs less than a method's."""
    isnan, count, float32 = np.isnan, np.count_nonzero, np.float32

    def bf16_cast(x: np.ndarray) -> np.ndarray:
        if count(isnan(x)):
            return bf16_array(x)
        return x.astype(bfloat16).astype(float32)

    return bf16_cast


class Saturated:
    """A chunk kernel that overflows to ±inf under nearest-even, clamped to ±max_finite: the saturate
    policy (see the module)."""

    def __init__(self, inner: IeeeFrom32 | IeeeFrom64 | CastThrough, fmt: FloatFormat, out_dtype: np.dtype) -> None:
        self.inner = inner
        self.bounds = bounds(fmt, out_dtype)

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return self.inner.scratch(n)

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        self.inner.run(src, out, scratch)
        clamp(out, *self.bounds)


class IeeeBits:
    """Nearest-even to an IEEE-style format inside float32's range (as the module says), on bits."""

    def __init__(self, fmt: FloatFormat) -> None:
        self.shift = 23 - fmt.man_bits
        self.bf16_like = fmt.emin == -126 and fmt.emax == 127 and fmt.man_bits == 7
        self.increment = np.uint32((1 << (self.shift - 1)) - 1)
        self.keep = np.uint32((0xFFFFFFFF >> self.shift) << self.shift)
        self.max_bits = np.uint32(np.float32(fmt.max_finite).view(np.uint32)) if fmt.emax < 127 else None
        self.min_normal_bits = np.uint32(np.float32(fmt.min_normal).view(np.uint32)) if fmt.emin > -126 else None
        self.magic = np.float32(math.ldexp(1.0, fmt.emin - fmt.man_bits + 23))
        self.grid_mask = (1 << (self.shift - 1)) - 1
        """float32 bits that are zero in every member and midpoint of the format (for `narrow`)."""

    def round_bits(self, bits: np.ndarray, out: np.ndarray, magnitude: np.ndarray | None = None) -> None:
        """out (uint32) = bits (float32 patterns) rounded; magnitude: uint32 work space (not needed
        for bf16-like formats)."""
        if self.bf16_like:
            bf16_bits(bits, out)
            return
        assert magnitude is not None
        np.bitwise_and(bits, _MAGNITUDE, out=magnitude)
        np.right_shift(magnitude, np.uint32(self.shift), out=out)
        np.bitwise_and(out, _ONE, out=out)
        np.add(out, self.increment, out=out)
        np.add(out, magnitude, out=out)
        np.bitwise_and(out, self.keep, out=out)
        if self.max_bits is not None:
            np.copyto(out, _INF, where=out > self.max_bits)
        if self.min_normal_bits is not None:
            small = np.flatnonzero(magnitude < self.min_normal_bits)
            if small.size:
                tiny = magnitude[small].view(np.float32)
                out[small] = ((tiny + self.magic) - self.magic).view(np.uint32)
        np.bitwise_and(bits, _SIGN, out=magnitude)
        np.bitwise_or(out, magnitude, out=out)


class IeeeFrom32:
    def __init__(self, rounder: IeeeBits) -> None:
        self.rounder = rounder

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return () if self.rounder.bf16_like else (np.empty(n, dtype=np.uint32),)

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        self.rounder.round_bits(src.view(np.uint32), out.view(np.uint32), *scratch)
        canonical_nans(src, out)


class IeeeFrom64:
    def __init__(self, rounder: IeeeBits) -> None:
        self.rounder = rounder

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return tuple(np.empty(n, dtype=np.uint32) for _ in range(3))

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        bits, rounded, work = scratch
        with np.errstate(over="ignore", invalid="ignore"):  # casts past float32, signalling NaNs
            narrow(src, bits, self.rounder.grid_mask, work)
        self.rounder.round_bits(bits, rounded, work)
        np.copyto(out, rounded.view(np.float32))
        canonical_nans(bits.view(np.float32), out)  # NaN and its sign survive the narrowing; half the bytes


class CastThrough:
    """out = float(dtype(src)): one exact numpy cast to `via` and back (via None: a copy)."""

    def __init__(self, via: type[np.floating] | None) -> None:
        self.via = via

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        return () if self.via is None else (np.empty(n, dtype=self.via),)

    def run(self, src: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, ...]) -> None:
        if self.via is None:
            np.copyto(out, src)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                np.copyto(scratch[0], src, casting="same_kind")
            np.copyto(out, scratch[0])
        canonical_nans(src, out)
