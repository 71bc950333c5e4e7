"""Bit codes of format values: encode exact format values, decode codes to values.

Layout of a float code: [sign][exponent field E bits][mantissa field M bits], the
sign absent for unsigned formats. Integers use two's complement in the low b bits.

    normal     field >= 1:  (-1)^s * (2^M + mant) * 2^(field - bias - M)
    subnormal  field == 0:  (-1)^s * mant * 2^(emin - M)      (no subnormals: field 0 is normal)
    IEEE       field all ones: mant == 0 -> inf, else NaN (encode writes the quiet NaN 1 << (M-1))
    FN         all-ones field and mantissa -> NaN (per sign)
    FNUZ       the negative-zero code (1 << (bits - 1)) -> NaN; no other specials
    extended   the magnitude code above max_finite_code -> ±inf (P3109 binary{K}p{P}se / ue)

NaN codes that encode writes (nan_code):
    canonical  the quiet NaN with the value's sign: IEEE top field with the mantissa's top bit
               (e5m2 0x7E, fp16 0x7E00, bf16 0x7FC0, fp32 0x7FC00000), FN all ones with the sign
               (e4m3 0x7F / 0xFF), FNUZ and signed P3109 their one NaN 0x80, unsigned formats their
               all-ones code (ue8m0, unsigned P3109: 0xFF)
    all_ones   the all-ones code 2^bits - 1 wherever it is a NaN (IEEE, FN: e5m2 0xFF, fp16 0xFFFF,
               e4m3 0xFF), else the format's one NaN (FNUZ, signed P3109: 0x80): gfloat's code_of_nan
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from precisionlab.formats import Encoding, FloatFormat, IntFormat, get_float_format
from precisionlab.rounding.engine import Domain, holds_all_values


def code_dtype(bits: int) -> type[np.unsignedinteger]:
    """uint8 up to 8 bits, uint16 up to 16, uint32 up to 32, uint64 above."""
    for width, dtype in ((8, np.uint8), (16, np.uint16), (32, np.uint32)):
        if bits <= width:
            return dtype
    return np.uint64


NAN_CODES = ("canonical", "all_ones")


def check_nan_code(choice: str) -> str:
    if choice not in NAN_CODES:
        raise ValueError(f"nan_code must be one of {', '.join(NAN_CODES)}, got {choice!r}")
    return choice


def all_ones_nan_code(fmt: FloatFormat) -> int:
    """2^bits - 1 where that code is a NaN (IEEE and FN), else the format's one NaN code (FNUZ)."""
    if fmt.encoding is Encoding.FNUZ:
        return nan_code(fmt)
    return nan_code(fmt) | ((1 << fmt.bits) - 1)


def nan_code(fmt: FloatFormat) -> int:
    """The canonical (positive, quiet) NaN code."""
    if fmt.encoding is Encoding.FNUZ:
        return 1 << (fmt.bits - 1)
    top = fmt.top_exponent_field << fmt.man_bits
    if fmt.encoding is Encoding.IEEE:
        return top | (1 << (fmt.man_bits - 1))
    if fmt.encoding is Encoding.FN:
        return top | ((1 << fmt.man_bits) - 1)
    raise ValueError(f"{fmt.name} has no NaN")


def encode_float_values(values: np.ndarray, fmt: FloatFormat, dom: Domain, nan: str = "canonical") -> np.ndarray:
    """Codes of values that are exact members of fmt (as produced by the rounding engine); `nan`
    chooses the NaN code (see the module docstring)."""
    udt = dom.uint_dtype
    u = values.view(udt)
    mag_bits = u & udt(dom.sign_bit - 1)
    negative = (u & udt(dom.sign_bit)) != 0
    mag = mag_bits.view(dom.float_dtype)
    M = fmt.man_bits
    shift = dom.man_bits - M

    domain_bias = dom.emax
    field = (mag_bits >> udt(dom.man_bits)).astype(np.int64) - domain_bias + fmt.bias
    mant = ((mag_bits & udt((1 << dom.man_bits) - 1)) >> udt(shift)).astype(np.int64)
    if fmt.subnormals:
        sub = mag < float(fmt.min_normal)
        scaled = np.ldexp(mag[sub].astype(np.float64), M - fmt.emin)
        mant[sub] = scaled.astype(np.int64)
        field[sub] = 0
    codes = (field << M) | mant

    is_inf = mag == np.inf
    if is_inf.any():
        codes[is_inf] = fmt.inf_code
    is_nan = np.isnan(mag)
    if fmt.signed:
        codes |= negative.astype(np.int64) << (fmt.bits - 1)
    if is_nan.any():
        base = nan_code(fmt)
        if nan == "all_ones":
            codes[is_nan] = _as_int64(all_ones_nan_code(fmt))
        elif fmt.encoding is Encoding.FNUZ or not fmt.signed:
            codes[is_nan] = base
        else:
            codes[is_nan] = base | (negative[is_nan].astype(np.int64) << (fmt.bits - 1))
    return codes.astype(code_dtype(fmt.bits))


def _as_int64(code: int) -> int:
    """A code below 2^64 as the int64 with its bits (the work array is int64; fp64's all-ones NaN
    code 2^64 - 1 is -1 there and comes back as 0xFFFFFFFFFFFFFFFF in the uint64 result)."""
    return code - (1 << 64) if code >= 1 << 63 else code


def decode_float_codes(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Values (float64) of integer codes; codes must be < 2^bits."""
    c = codes.astype(np.uint64)
    M, E = fmt.man_bits, fmt.exp_bits
    mant = (c & np.uint64((1 << M) - 1)).astype(np.float64)
    field = ((c >> np.uint64(M)) & np.uint64((1 << E) - 1)).astype(np.int64)
    if fmt.subnormals:
        normal = field > 0
        significand = np.where(normal, mant + 2.0**M, mant)
        exponent = np.where(normal, field - fmt.bias - M, fmt.emin - M)
    else:
        significand = mant + 2.0**M
        exponent = field - fmt.bias - M
    values = np.ldexp(significand, exponent)
    top = field == fmt.top_exponent_field
    if fmt.encoding is Encoding.IEEE:
        values[top & (mant == 0)] = np.inf
        values[top & (mant != 0)] = np.nan
    elif fmt.encoding is Encoding.FN:
        values[top & (mant == (1 << M) - 1)] = np.nan
    if fmt.extended:
        values[(c & np.uint64((1 << (E + M)) - 1)) == np.uint64(fmt.inf_code)] = np.inf
    if fmt.signed:
        negative = ((c >> np.uint64(fmt.bits - 1)) & np.uint64(1)).astype(bool)
        values[negative] = -values[negative]
        if fmt.encoding is Encoding.FNUZ:
            values[c == np.uint64(1 << (fmt.bits - 1))] = np.nan
    return values


@lru_cache(maxsize=64)
def decode_table(fmt: FloatFormat) -> np.ndarray:
    """Every code's value, for formats of at most 16 bits (read-only)."""
    table = decode_float_codes(np.arange(fmt.code_count, dtype=np.uint64), fmt)
    table = table.astype(np.float32 if value_dtype(fmt) == np.float32 else np.float64)
    table.flags.writeable = False
    return table


def value_dtype(fmt: FloatFormat | IntFormat) -> type[np.floating]:
    """float32 when it holds every value of fmt, else float64."""
    if isinstance(fmt, IntFormat):
        return np.float32 if fmt.bits <= 24 else np.float64
    return np.float32 if holds_all_values(fmt, get_float_format("fp32")) else np.float64


def decode_float(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    out_dtype = value_dtype(fmt)
    if fmt.bits <= 16:
        return decode_table(fmt).take(codes.astype(np.intp))
    ieee = fmt.encoding is Encoding.IEEE and fmt.signed
    if ieee and (fmt.exp_bits, fmt.man_bits, fmt.bias) == (8, 23, 127):
        return codes.astype(np.uint32).view(np.float32).copy()
    if ieee and (fmt.exp_bits, fmt.man_bits, fmt.bias) == (11, 52, 1023):
        return codes.astype(np.uint64).view(np.float64).copy()
    return decode_float_codes(codes, fmt).astype(out_dtype)


def encode_int_values(values: np.ndarray, fmt: IntFormat) -> np.ndarray:
    ints = values.astype(np.int64) & ((1 << fmt.bits) - 1)
    return ints.astype(code_dtype(fmt.bits))


def decode_int_codes(codes: np.ndarray, fmt: IntFormat) -> np.ndarray:
    c = codes.astype(np.int64) & ((1 << fmt.bits) - 1)
    if fmt.signed:
        c = np.where(c >= (1 << (fmt.bits - 1)), c - (1 << fmt.bits), c)
    return c.astype(value_dtype(fmt))

