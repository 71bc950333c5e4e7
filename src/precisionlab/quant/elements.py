"""Element codecs: scaled values v = x / s to codes, and codes back to (unscaled) values.

    integer, symmetric   q = clip(rint(v), -(2^(b-1) - 1), 2^(b-1) - 1)          (rint: ties to even)
                         range=full / full_neg: clip to -2^(b-1) .. 2^(b-1) - 1
    integer, asymmetric  q = clip(rint(v) + z, qmin, qmax)       stored as q's b-bit two's complement
    float (fp8/fp6/fp4)  q = round-to-nearest-even of v in the element format, saturating at ±max
    codebook (nf4)       q = index of the nearest codebook value (ties to the smaller value)

Codes are the element format's own bit patterns (`precisionlab.encode` conventions):
integers in two's complement in the low b bits, floats as sign|exponent|mantissa, nf4 as
its table index. Float rounding of float32 input goes through a 2^17-entry table built
once by the exact engine (the result depends only on the top 16 bits of v and whether
any lower bit is set); float64 input is rounded exactly, once, by `precisionlab.encode`.
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
    int_range: str = "narrow"
    """Symmetric integer convention (`quant.scheme.INT_RANGES`): narrow, full or full_neg."""

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
            return np.take(_code_table(fmt), table_index(v.reshape(-1).view(np.uint32))).reshape(v.shape)
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
