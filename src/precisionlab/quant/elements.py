"""Element codecs: scaled values v = x / s to codes, and codes back to (unscaled) values.

    integer, symmetric   q = clip(rint(v), -(2^(b-1) - 1), 2^(b-1) - 1)          (rint: ties to even)
                         range=full / full_neg: clip to -2^(b-1) .. 2^(b-1) - 1
    integer, asymmetric  q = clip(rint(v) + z, qmin, qmax)       stored as q's b-bit two's complement
    unsigned, float min  q = clip(rint((x - m) / s), 0, 2^b - 1)  (min=: one rounding of the exact (x - m) / s)
    float (fp8/fp6/fp4)  q = round-to-nearest-even of v in the element format, saturating at ±max
    codebook (nf4)       q = index of the nearest codebook value (ties to the smaller value)
                         nf4:...:bnb: bitsandbytes' float32 arithmetic instead (CodebookFormat.encode_scaled_fp32)

Codes are the element format's own bit patterns (`precisionlab.encode` conventions):
integers in two's complement in the low b bits, floats as sign|exponent|mantissa, nf4 as
its table index. Each code is one rounding of the exact quotient x / s (`encode_quotient`; why it
is exact: ONE_ROUNDING).
Float rounding goes through a 2^17-entry table built once by the exact engine: the result
depends only on the top 16 bits of v (float32 v: sign, exponent, 7 mantissa bits; float64
v: sign, exponent, 4 mantissa bits, enough for the <= 3 mantissa bits of every element)
and on whether any lower bit is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from precisionlab.formats import FloatFormat, IntFormat, get_format
from precisionlab.formats.codebook import CodebookFormat, get_codebook
from precisionlab.quant.scheme import Scheme
from precisionlab.rounding import encode
from precisionlab.rounding.codes import decode_table
from precisionlab.rounding.table import (
    TABLE64_MAN_BITS,
    code_table,
    table_index,
    table_index64,
    table_representatives,
)

ElementFormat = FloatFormat | IntFormat | CodebookFormat


@dataclass(frozen=True)
class Codec:
    """How one element format turns scaled values into codes and back."""

    fmt: ElementFormat
    unit: float = 1.0
    """Value of one integer step (MXINT8: 2^-6, its 1.6 fixed point); 1 elsewhere."""
    int_range: str = "narrow"
    """Symmetric integer convention (`quant.scheme.INT_RANGES`): narrow, full or full_neg."""
    codebook_rule: str = "exact"
    """Codebook code choice (`quant.scheme.CODEBOOK_RULES`): exact, or bnb (bitsandbytes' float32 arithmetic)."""

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
    def symmetric_min(self) -> float:
        """Most negative code value a symmetric integer scheme uses: -(2^(b-1) - 1), or -2^(b-1) for the
        full ranges."""
        if isinstance(self.fmt, IntFormat) and self.int_range != "narrow":
            return float(self.fmt.min_value)
        return -self.max_value

    @property
    def scale_divisor(self) -> float:
        """What a symmetric scale divides amax by: max_value; 2^(b-1) - 1/2 (full); 2^(b-1) (full_neg)."""
        if self.int_range == "full":
            return self.max_value + 0.5
        if self.int_range == "full_neg":
            return self.max_value + 1.0
        return self.max_value

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

    def encode_quotient(self, x: np.ndarray, divisor: np.ndarray, zero_point: np.ndarray | None = None) -> np.ndarray:
        """Codes of x / divisor (x float32 or float64, divisor float32 values broadcast against it), each one
        rounding of the exact quotient (see ONE_ROUNDING); with a zero point, integer codes of rint(x / d) + z."""
        fmt = self.fmt
        d = np.asarray(divisor)
        if isinstance(fmt, IntFormat):
            q = rounded_quotient(x, d)
            if zero_point is not None:
                q += zero_point
                np.clip(q, fmt.min_value, fmt.max_value, out=q)
            else:
                np.clip(q, self.symmetric_min, fmt.symmetric_max, out=q)
            return _int_codes(q, fmt)
        if zero_point is not None:
            raise ValueError(f"a zero point applies to integer elements, not {fmt.name}")
        if isinstance(fmt, CodebookFormat) and self.codebook_rule == "bnb":
            return fmt.encode_scaled_fp32(x, d)
        if x.dtype == np.float32 and isinstance(fmt, FloatFormat) and fmt.bits <= 8:
            return _float_codes(x, d, fmt)
        return self.encode_symmetric(np.divide(x, d.astype(np.float64), dtype=np.float64))  # exact enough

    def encode_symmetric(self, v: np.ndarray) -> np.ndarray:
        """Codes of scaled values v (float32 or float64), saturating at the element's max."""
        fmt = self.fmt
        if isinstance(fmt, IntFormat):
            q = np.rint(v)
            np.clip(q, self.symmetric_min, fmt.symmetric_max, out=q)
            return _int_codes(q, fmt)
        if isinstance(fmt, CodebookFormat):
            return fmt.encode(v)
        if v.dtype == np.float32:
            return np.take(code_table(fmt), table_index(v.reshape(-1).view(np.uint32))).reshape(v.shape)
        if v.dtype == np.float64 and fmt.man_bits <= TABLE64_MAN_BITS:
            flat = np.ascontiguousarray(v).reshape(-1)
            return np.take(code_table(fmt, np.float64), table_index64(flat.view(np.uint64))).reshape(v.shape)
        return np.asarray(encode(np.ascontiguousarray(v), fmt, overflow="saturate", nan="zero"), dtype=np.uint8)

    def encode_offset(self, x: np.ndarray, divisor: np.ndarray, minimum: np.ndarray) -> np.ndarray:
        """Unsigned codes of rint((x - m) / s), clipped to 0 .. 2^b - 1: one rounding of the exact quotient.

        The quotient is computed in float64 (x - m and the division each round at most once, an error far
        below 2^-40 for codes of 8 bits or fewer); the few elements within 2^-30 of a tie are settled with
        exact rationals, so the code is that of the exact (x - m) / s, ties to even."""
        fmt = self.fmt
        if not isinstance(fmt, IntFormat) or fmt.signed:
            raise ValueError(f"a float block offset (min=) applies to unsigned integer elements, not {fmt.name}")
        x64 = np.asarray(x, dtype=np.float64)
        m = np.asarray(minimum, dtype=np.float64)
        d = np.asarray(divisor, dtype=np.float64)
        v = (x64 - m) / d
        q = np.rint(v)
        near = np.abs(np.abs(v - q) - 0.5) < TIE_WINDOW
        if near.any():
            where = np.nonzero(near)
            xs = np.broadcast_to(x64, v.shape)[where]
            ms, ds = np.broadcast_to(m, v.shape)[where], np.broadcast_to(d, v.shape)[where]
            q[where] = [float(round((Fraction(a) - Fraction(b)) / Fraction(c))) if np.isfinite(a + b + c) else np.nan
                        for a, b, c in zip(xs.tolist(), ms.tolist(), ds.tolist(), strict=True)]
        np.clip(q, 0, fmt.max_value, out=q)
        return _int_codes(np.nan_to_num(q, nan=0.0), fmt)

    def encode_affine(self, v: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
        """Integer codes of rint(v) + z, clipped to the format's full range [qmin, qmax]."""
        fmt = self.fmt
        if not isinstance(fmt, IntFormat):
            raise ValueError(f"a zero point applies to integer elements, not {fmt.name}")
        q = np.rint(v)
        q += zero_point
        np.clip(q, fmt.min_value, fmt.max_value, out=q)
        return _int_codes(q, fmt)


TIE_WINDOW = 2.0**-30
"""Quotients (x - m) / s this close to k + 1/2 are settled with exact rationals (encode_offset)."""


def int_codes(values: np.ndarray, fmt: IntFormat) -> np.ndarray:
    """Integer code values (already in fmt's range) as uint8 codes: two's complement in the low b bits."""
    return _int_codes(np.asarray(values), fmt)


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


ONE_ROUNDING = """Why each code is one rounding of the exact quotient q = x / d (x float32 or float64, d float32).

Every element rounding has decision boundaries m (integers: k + 1/2; fp8 / fp6 / fp4: midpoints of
neighbouring values, <= 5 significant bits; nf4: half-sums of neighbouring float32 values, <= 26 bits).
Rounding q and rounding a correctly rounded fl(q) differ only where fl(q) lands on an m that q is not
on: rounding is monotone and every m is a float64 (a float32 for integers and floats), so fl(q) cannot
cross one.

float64 quotients (float64 x; nf4 for any x) never land on such an m unless q = m. With d = D 2^c
(D < 2^24), m = K 2^b (K < 2^29) and x = X 2^a (2^a its ulp, |x| < 2^(53+a)), m d = K D 2^(b+c) is
exact (K D < 2^53) and q - m = (x - m d) / d, while landing needs |q - m| <= 2^-53 m. Take x, m > 0.
  a >= b + c: x - m d is a nonzero multiple of 2^(b+c), so |x - m d| >= 2^(b+c) > 2^-53 m d.
  a < b + c, x > m d: x - m d >= 2^a, but m d < |x| < 2^(53+a) makes 2^-53 m d < 2^a.
  a < b + c, x < m d: m d - x <= 2^-53 m d with m d - x >= 2^a forces x = 2^(53+a) - 2^a and
    m d = 2^(53+a), so m is a power of two, whose lower half-ulp 2^-54 m d = 2^(a-1) is < 2^a.
(Near a boundary q is a normal float64: no underflow.)

float32 x with integer or float elements (the fast path): v = fl32(q) lands on m far more easily (when
|q - m| < 2^-24 m: nvfp4 x / d = -1.250000046 -> -1.25, a tie that went to -1.0 where q gives -1.5). So
the ties are found (integers: the residual v - rint(v), which is exact, is +-1/2; floats: the code table
flags every v that is a midpoint) and settled exactly: m d is exact in float64 (<= 10 + 24 bits), so the
float64 sign of x - m d is the side q lies on; the tie goes to that side (floats: v moves one float32 ulp
off m; boundaries are much further apart). Elsewhere fl32(q) rounds like q. A divisor that is a power of
two (MX scales) divides exactly, and skips the search. On the benchmark's weight the ties that matter are
1 (nvfp4), 27 (dsv3_weight) and 61 (int8:row:scale=fp32) of 58.7M elements.
"""

TIE_FLAG = 0x100
"""Marks, in the flagged code table, the float32 patterns that are exactly a midpoint (a tie)."""


def _float_codes(x: np.ndarray, d: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Codes of float32 x / d for a float element of at most 8 bits, ties settled (see ONE_ROUNDING)."""
    v = np.divide(x, d.astype(np.float32), dtype=np.float32)
    flat = v.reshape(-1)
    idx = table_index(flat.view(np.uint32))
    if _powers_of_two(d):
        return np.take(code_table(fmt), idx).reshape(v.shape)
    table = _flagged_code_table(fmt)
    flagged = np.take(table, idx)
    if flagged.size and flagged.max() >= TIE_FLAG:
        ties = np.flatnonzero(flagged >= TIE_FLAG)
        _settle(v, x, d, ties)
        flagged[ties] = table[table_index(flat[ties].view(np.uint32))]
    return flagged.astype(np.uint8).reshape(v.shape)  # the low byte: the code


def rounded_quotient(x: np.ndarray, divisor: np.ndarray) -> np.ndarray:
    """rint(x / d) of the exact quotient (ties to even), as floats, for integer elements (see ONE_ROUNDING)."""
    d = np.asarray(divisor)
    if x.dtype == np.float64:
        return np.rint(np.divide(x, d.astype(np.float64), dtype=np.float64))
    v = np.divide(x, d.astype(np.float32), dtype=np.float32)
    q = np.rint(v)
    if _powers_of_two(d):
        return q
    np.subtract(v, q, out=v)  # the residual, exactly; NaN where v was NaN or inf (fmax / fmin skip those)
    rows = _rows(v)
    flat = rows.reshape(-1)
    if flat.size and (np.fmax.reduce(flat) >= 0.5 or np.fmin.reduce(flat) <= -0.5):  # a tie in this chunk
        suspects = np.flatnonzero((np.fmax.reduce(rows, axis=1) >= 0.5) | (np.fmin.reduce(rows, axis=1) <= -0.5))
        hit_rows, hit_cols = np.nonzero(np.abs(rows[suspects]) == 0.5)
        where = np.unravel_index(suspects[hit_rows] * rows.shape[1] + hit_cols, q.shape)
        m = (q[where] + v[where]).astype(np.float64)  # the tie k + 1/2, exact
        side = np.sign(np.broadcast_to(x, q.shape)[where].astype(np.float64) - m * np.broadcast_to(d, q.shape)[where])
        q[where] = np.where(side > 0, np.floor(m) + 1, np.where(side < 0, np.floor(m), q[where]))
    return q


def _powers_of_two(d: np.ndarray) -> bool:
    """True when every divisor is a positive normal float32 power of two (x / d is then exact, or underflows far
    below every boundary)."""
    bits = np.ascontiguousarray(d, dtype=np.float32).view(np.uint32)
    return bool(((bits & np.uint32(0x807FFFFF)) == 0).all() and ((bits >> np.uint32(23)) - 1 < 254).all())


def _rows(a: np.ndarray) -> np.ndarray:
    """A contiguous array as long 2-D rows without a copy: (row blocks, rows, column blocks, columns) as
    (tensor rows, row length); row-wise reductions over short block rows would be slow."""
    if a.ndim == 4:
        return a.reshape(a.shape[0] * a.shape[1], a.shape[2] * a.shape[3])
    return a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)


def _settle(v: np.ndarray, x: np.ndarray, d: np.ndarray, ties: np.ndarray) -> None:
    """Move the float32 v at the flat positions `ties` (each exactly a boundary m) one ulp to the side of x / d."""
    if not ties.size:
        return
    where = np.unravel_index(ties, v.shape)
    m = v[where].astype(np.float64)
    side = np.sign(np.broadcast_to(x, v.shape)[where].astype(np.float64) - m * np.broadcast_to(d, v.shape)[where])
    toward = np.where(side > 0, np.float32(np.inf), np.float32(-np.inf))
    v[where] = np.where(side == 0, v[where], np.nextafter(v[where], toward))


@lru_cache(maxsize=32)
def _flagged_code_table(fmt: FloatFormat) -> np.ndarray:
    """uint16: the code table with TIE_FLAG added where the pattern's float32 is exactly a midpoint of fmt."""
    values = _values(fmt).astype(np.float64)
    magnitudes = np.unique(np.abs(values[np.isfinite(values)]))
    edges = (magnitudes[1:] + magnitudes[:-1]) / 2  # exact: neighbours are float32 values
    representatives = np.abs(table_representatives().astype(np.float64))
    on_edge = np.isin(representatives, edges)
    table = code_table(fmt).astype(np.uint16) | np.where(on_edge, np.uint16(TIE_FLAG), np.uint16(0))
    table.flags.writeable = False
    return table


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


MXINT8_UNIT = 2.0**-6
"""MXINT8 stores int8 codes in 1.6 fixed point: value = code * 2^-6."""


def make_codec(scheme: Scheme) -> Codec:
    """The codec of a scheme: its element's (`codec`), with MXINT8's fixed-point unit or the scheme's integer
    range where it sets one. The element width of a quantized tensor is `make_codec(scheme).bits`."""
    base = codec(scheme.element)
    if scheme.preset == "mxint8":
        return Codec(base.fmt, unit=MXINT8_UNIT)
    if scheme.int_range != "narrow":
        return Codec(base.fmt, int_range=scheme.int_range)
    if scheme.codebook_rule != "exact":
        return Codec(base.fmt, codebook_rule=scheme.codebook_rule)
    return base
