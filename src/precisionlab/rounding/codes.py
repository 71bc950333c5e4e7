"""Bit codes of format values: encode exact format values, decode codes to values.

Layout of a float code: [sign][exponent field E bits][mantissa field M bits], the
sign absent for unsigned formats. Integers use two's complement in the low b bits.

    normal     field >= 1:  (-1)^s * (2^M + mant) * 2^(field - bias - M)
    subnormal  field == 0:  (-1)^s * mant * 2^(emin - M)      (no subnormals: field 0 is normal)
    IEEE       field all ones: mant == 0 -> inf, else NaN (encode writes the quiet NaN 1 << (M-1))
    FN         all-ones field and mantissa -> NaN (per sign)
    FNUZ       the negative-zero code (1 << (bits - 1)) -> NaN; no other specials
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from precisionlab.formats import Encoding, FloatFormat, IntFormat
from precisionlab.rounding.engine import F32, Domain


def code_dtype(bits: int) -> type[np.unsignedinteger]:
    """uint8 up to 8 bits, uint16 up to 16, uint32 up to 32, uint64 above."""
    for width, dtype in ((8, np.uint8), (16, np.uint16), (32, np.uint32)):
        if bits <= width:
            return dtype
    return np.uint64


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


def encode_float_values(values: np.ndarray, fmt: FloatFormat, dom: Domain) -> np.ndarray:
    """Codes of values that are exact members of fmt (as produced by the rounding engine)."""
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
        codes[is_inf] = fmt.top_exponent_field << M
    is_nan = np.isnan(mag)
    if fmt.signed:
        codes |= negative.astype(np.int64) << (fmt.bits - 1)
    if is_nan.any():
        base = nan_code(fmt)
        if fmt.encoding is Encoding.FNUZ or not fmt.signed:
            codes[is_nan] = base
        else:
            codes[is_nan] = base | (negative[is_nan].astype(np.int64) << (fmt.bits - 1))
    return codes.astype(code_dtype(fmt.bits))


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
    fits = fmt.man_bits <= F32.man_bits and fmt.emax <= F32.emax and fmt.min_subnormal >= 2.0**-149
    return np.float32 if fits else np.float64


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

