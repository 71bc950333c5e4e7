"""Element codecs: scaled values v = x / s to codes, and codes back to (unscaled) values.

    integer, symmetric   q = clip(rint(v), -(2^(b-1) - 1), 2^(b-1) - 1)          (rint: ties to even)
    integer, asymmetric  q = clip(rint(v) + z, qmin, qmax)       stored as q's b-bit two's complement
    float (fp8/fp6/fp4)  q = round-to-nearest-even of v in the element format, saturating at ±max
    codebook (nf4)       q = index of the nearest codebook value (ties to the smaller value)

Codes are the element format's own bit patterns (`precisionlab.encode` conventions):
integers in two's complement in the low b bits, floats as sign|exponent|mantissa, nf4 as
its table index. Each code is one rounding of the exact quotient x / s: `quotient` gives
a float64 v that rounds like x / s (see its docstring for why), and v is rounded once.
Float rounding goes through a 2^17-entry table built once by the exact engine: the result
depends only on the top 16 bits of v (float32 v: sign, exponent, 7 mantissa bits; float64
v: sign, exponent, 4 mantissa bits, enough for the <= 3 mantissa bits of every element)
and on whether any lower bit is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from precisionlab.formats import FloatFormat, IntFormat, get_format
from precisionlab.formats.codebook import CodebookFormat, get_codebook
from precisionlab.rounding import encode
from precisionlab.rounding.codes import decode_table
from precisionlab.rounding.engine import table_index, table_representatives

ElementFormat = FloatFormat | IntFormat | CodebookFormat


@dataclass(frozen=True)
class Codec:
    """How one element format turns scaled values into codes and back."""

    fmt: ElementFormat
    unit: float = 1.0
    """Value of one integer step (MXINT8: 2^-6, its 1.6 fixed point); 1 elsewhere."""

    @property
    def name(self) -> str:
        return self.fmt.name

    @property
    def bits(self) -> int:
        return self.fmt.bits

    @property
    def max_value(self) -> float:
        """Largest magnitude of a code's value: 2^(b-1) - 1 for integers, max finite for floats, 1 for nf4."""
        if isinstance(self.fmt, IntFormat):
            return float(self.fmt.max_value)
        return float(self.fmt.max_finite)

    @property
    def real_max(self) -> float:
        """max_value in real units (MXINT8: 127 * 2^-6 = 1.984375)."""
        return self.max_value * self.unit

    @property
    def is_int(self) -> bool:
        return isinstance(self.fmt, IntFormat)

    def values(self) -> np.ndarray:
        """float32 table: code -> the code's value (integers as integers; the unit lives in the divisor)."""
        return _values(self.fmt)

    def encode_symmetric(self, v: np.ndarray) -> np.ndarray:
        """Codes of scaled values v (float32 or float64), saturating at the element's max."""
        fmt = self.fmt
        if isinstance(fmt, IntFormat):
            q = np.rint(v)
            np.clip(q, -fmt.symmetric_max, fmt.symmetric_max, out=q)
            return _int_codes(q, fmt)
        if isinstance(fmt, CodebookFormat):
            return fmt.encode(v)
        if v.dtype == np.float32:
            return np.take(_code_table(fmt), table_index(v.reshape(-1).view(np.uint32))).reshape(v.shape)
        if v.dtype == np.float64 and fmt.man_bits <= TABLE64_MAN_BITS:
            flat = np.ascontiguousarray(v).reshape(-1)
            return np.take(_code_table64(fmt), table_index64(flat.view(np.uint64))).reshape(v.shape)
        return np.asarray(encode(np.ascontiguousarray(v), fmt, overflow="saturate", nan="zero"), dtype=np.uint8)

    def encode_affine(self, v: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
        """Integer codes of rint(v) + z, clipped to the format's full range [qmin, qmax]."""
        fmt = self.fmt
        if not isinstance(fmt, IntFormat):
            raise ValueError(f"a zero point applies to integer elements, not {fmt.name}")
        q = np.rint(v)
        q += zero_point
        np.clip(q, fmt.min_value, fmt.max_value, out=q)
        return _int_codes(q, fmt)


def _int_codes(q: np.ndarray, fmt: IntFormat) -> np.ndarray:
    codes = q.astype(np.int8).view(np.uint8) if fmt.signed else q.astype(np.uint8)
    if fmt.bits < 8:
        codes &= np.uint8((1 << fmt.bits) - 1)
    return codes


@lru_cache(maxsize=32)
def _values(fmt: ElementFormat) -> np.ndarray:
    if isinstance(fmt, IntFormat):
        codes = np.arange(1 << fmt.bits, dtype=np.int64)
        ints = np.where(fmt.signed & (codes >= (1 << (fmt.bits - 1))), codes - (1 << fmt.bits), codes)
        table = ints.astype(np.float32)
    elif isinstance(fmt, CodebookFormat):
        table = fmt.table.copy()
    else:
        table = np.asarray(decode_table(fmt), dtype=np.float32).copy()
    table.flags.writeable = False
    return table


@lru_cache(maxsize=32)
def _code_table(fmt: FloatFormat) -> np.ndarray:
    """Codes for every (top 16 bits, sticky) pattern of a float32, by the exact engine."""
    table = np.asarray(encode(table_representatives(), fmt, overflow="saturate", nan="zero"), dtype=np.uint8)
    table.flags.writeable = False
    return table


TABLE64_MAN_BITS = 3
"""float64 v: the top 16 bits hold 4 mantissa bits, the M kept bits and the rounding bit of M <= 3."""


@lru_cache(maxsize=1)
def table_representatives64() -> np.ndarray:
    """One float64 per table entry: entry i has top 16 bits i >> 1 and low bits i & 1 (read-only)."""
    index = np.arange(1 << 17, dtype=np.uint64)
    representatives = (((index >> np.uint64(1)) << np.uint64(48)) | (index & np.uint64(1))).view(np.float64)
    representatives.flags.writeable = False
    return representatives


def table_index64(u: np.ndarray) -> np.ndarray:
    """(top 16 bits of float64 bits u) * 2 + (1 if any of the low 48 bits is set), as int64 for np.take."""
    idx = u >> np.uint64(47)
    idx &= np.uint64(0x1FFFE)
    low = u & np.uint64((1 << 48) - 1)
    np.minimum(low, np.uint64(1), out=low)
    idx |= low
    return idx.view(np.int64)


@lru_cache(maxsize=32)
def _code_table64(fmt: FloatFormat) -> np.ndarray:
    """Codes for every (top 16 bits, sticky) pattern of a float64, by the exact engine."""
    table = np.asarray(encode(table_representatives64(), fmt, overflow="saturate", nan="zero"), dtype=np.uint8)
    table.flags.writeable = False
    return table


def quotient(x: np.ndarray, divisor: np.ndarray) -> np.ndarray:
    """v = fl64(x / d) for float32 or float64 x and float32 divisors d (broadcast): rounding v once to the
    element gives the same code as rounding the exact quotient q = x / d (so each code is one exact rounding).

    Why float64 is exact enough: rounding q and rounding fl64(q) can only differ if fl64(q) lands on a
    decision boundary m that q is not on (fl64 is monotone and every m is a float64, so it cannot cross
    one), which needs |q - m| <= 2^-53 m. Every boundary here has m = K 2^b with K < 2^29 (integers:
    k + 1/2; fp8/fp6/fp4: midpoints of <= 3-bit mantissas, <= 5 bits; nf4: half-sums of neighbouring
    float32 values, <= 26 bits), so with d = D 2^c (D < 2^24) the product m d = K D 2^(b+c) is exact
    (K D < 2^53) and q - m = (x - m d) / d. Write x = X 2^a with 2^a its ulp (|x| < 2^(53+a)); take
    x, m > 0 (negative values are the mirror image).
      a >= b + c: x - m d is a nonzero multiple of 2^(b+c), so |x - m d| >= 2^(b+c) > 2^-53 m d.
      a < b + c, x > m d: x - m d >= 2^a, but m d < |x| < 2^(53+a) makes 2^-53 m d < 2^a.
      a < b + c, x < m d: m d - x <= 2^-53 m d with m d - x >= 2^a forces x = 2^(53+a) - 2^a and
        m d = 2^(53+a), so m is a power of two, whose lower half-ulp 2^-54 m d = 2^(a-1) is < 2^a.
    So fl64(q) = m only when q = m. (Near any boundary q is a normal float64: no underflow.)
    An fp32 quotient is not enough: fl32(q) lands on m whenever |q - m| < 2^-24 m, e.g. nvfp4 with
    x / d = -1.250000046 -> fl32 -1.25 -> -1.0 (a tie to even), where the exact quotient gives -1.5.
    """
    return np.divide(x, np.asarray(divisor, dtype=np.float64), dtype=np.float64)


@lru_cache(maxsize=32)
def pair_table(fmt: ElementFormat) -> np.ndarray:
    """For 4-bit elements: byte -> its two values (low nibble first) as one uint64 holding two float32s.

    One gather per byte then decodes two elements: `np.take(table, packed).view(np.float32)`.
    """
    values = _values(fmt)
    byte = np.arange(256)
    pairs = np.ascontiguousarray(np.stack([values[byte & 0xF], values[byte >> 4]], axis=1).astype(np.float32))
    table = pairs.view(np.uint64).reshape(256)
    table.flags.writeable = False
    return table


def codec(element: str) -> Codec:
    """The codec of a scheme element name (mxint8's unit is set by the MX code)."""
    if element == "nf4":
        return Codec(get_codebook("nf4"))
    fmt = get_format(element)
    if isinstance(fmt, FloatFormat) and fmt.bits > 8:
        raise ValueError(f"element {element} is wider than 8 bits; quantization elements are 8 bits or fewer")
    return Codec(fmt)
