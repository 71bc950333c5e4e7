"""Choose quantization parameters (scales, zero points) from per-block statistics.

Every scale is rounded once, to nearest-even, into its scale format and *stored*; the
elements are then computed as x / s with that stored scale, so codes are golden (what a
kernel that reads the stored scale must produce). Rounding the exact quotient once equals
a kernel's fp32 division followed by a cast to fp16 / bf16 / e4m3 (fp32 carries at least
2p + 2 bits for those p, so the double rounding is innocuous).

    integer, symmetric   s = amax / (2^(b-1) - 1)        (range=full: 2^(b-1) - 1/2; full_neg: 2^(b-1))
    integer, asymmetric  lo = min(x_min, 0), hi = max(x_max, 0)
                         s = (hi - lo) / (2^b - 1),   z = clip(qmin - rint(lo / s), qmin, qmax)
    float min (min=)     m = fmt_min(x_min)  (nearest-even into the min format: no clamp to 0, the
                         offset need not represent zero),  s = (x_max - x_min) / (2^b - 1)
                         (codes 0 .. 2^b - 1; KIVI, GGUF Q4_1 / Q5_1's layout)
    float element        s = amax / max_finite(element)          (DeepSeek-V3: amax / 448)
    nf4                  s = amax                                  (absmax; codebook spans [-1, 1])
    MX (ue8m0)           X = 2^(floor(log2 amax) - emax_elem)      FLOOR, OCP MX v1.0
                         X = 2^ceil(log2(amax / max_elem))          RCEIL
                         exponent clamped to ue8m0's [-127, 127]; MXINT8 elements are int8
                         in 1.6 fixed point (value = code * 2^-6), so emax_elem = 0
    NVFP4                g = amax_tensor / (6 * 448)  stored in fp32 (the decode direction)
                         s_b = e4m3(amax_block / (6 * g)),  elements divided by fp32(s_b * g)
                         minscale=normal raises s_b to at least 2^-6 (torchao); the default
                         keeps e4m3 subnormal scales (Transformer Engine)

Every scale is rounded to nearest-even, or up with scaleround=up (never below the ideal scale, so
no block maximum clips; the price is up to one step of the scale format in resolution).

Edge cases (every scheme): an all-zero block has scale 1, zero point 0 and zero codes; a
nonzero block whose scale would round to 0 gets the scale format's smallest positive
value; a scale beyond the format's range saturates at its max finite; a block holding
NaN or ±inf is an error (nonfinite=error) or gets a NaN scale and zero codes, so it
dequantizes to NaN (nonfinite=nan, the MX and NVFP4 default, as the OCP spec sets X to NaN).
A block is *floored* when its ideal scale lies below the smallest scale the scheme can store (the
format's smallest positive value; 2^-127 for ue8m0; 2^-6 for nvfp4:minscale=normal): its scale is
raised to that floor and its codes use only part of the range (`QParams.floored`).
A finite value beyond float32's range (float64 input) is an error: the stored scales and the
dequantized values are float32, so no scheme can represent it (`check_float32_range`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionlab.formats import FloatFormat, IntFormat, get_format
from precisionlab.quant.elements import Codec
from precisionlab.quant.scheme import MXRule, Scheme
from precisionlab.rounding import decode, encode, round_to

UE8M0_EXP_RANGE = (-127, 127)


@dataclass
class QParams:
    """Parameters of a grid of blocks (arrays of the grid's shape)."""

    scale: np.ndarray
    """The stored scale values (float32): s, MX's X, NVFP4's e4m3 block scale."""
    divisor: np.ndarray
    """What the elements are divided by (float32): s; X·unit for MXINT8; fp32(s_b·g) for NVFP4."""
    zero_point: np.ndarray | None = None
    """Integer zero points (float32 holding integers) for asymmetric schemes."""
    bad: np.ndarray | None = None
    """Blocks holding NaN or ±inf (nonfinite=nan): NaN scale, zero codes."""
    floored: np.ndarray | None = None
    """Blocks whose ideal scale is below the scheme's smallest storable scale (raised to it)."""
    minimum: np.ndarray | None = None
    """Float block offsets m (min=), float32 values of the min format: x_hat = q * s + m."""
    flat: np.ndarray | None = None
    """Blocks whose span is zero (min=): every code is 0, so each element reads back as m."""


def element_emax(codec: Codec) -> int:
    """Exponent of the element's largest binade: floor(log2(max value in real units))."""
    return math.frexp(codec.real_max)[1] - 1


def round_scale(ideal: np.ndarray, scale_format: str, up: bool = False) -> np.ndarray:
    """Round ideal scales (float64, > 0) into the scale format, to nearest-even or (up=True) to the smallest
    value >= ideal; never to 0, saturating at max."""
    fmt = get_format(scale_format)
    assert isinstance(fmt, FloatFormat)
    ideal = ideal.astype(np.float64)
    rounding = "toward_zero" if up else "nearest_even"
    rounded = np.asarray(round_to(ideal, fmt, rounding=rounding, overflow="saturate", nan="zero"), dtype=np.float64)
    if up:  # one code up where truncation went below (positive codes are ordered like their values)
        below = (rounded < ideal) & (rounded < fmt.max_finite)
        if below.any():
            codes = np.asarray(encode(rounded[below], fmt))
            rounded[below] = np.asarray(decode(codes + codes.dtype.type(1), fmt), dtype=np.float64)
    rounded = np.where((rounded == 0) & (ideal > 0), fmt.min_subnormal, rounded)
    return rounded


def floored(ideal: np.ndarray, smallest: float, real: np.ndarray) -> np.ndarray | None:
    """Blocks (where `real`) whose ideal scale is below the smallest storable one; None when there are none."""
    mask = real & (ideal < smallest)
    return mask if mask.any() else None


def symmetric(amax: np.ndarray, scheme: Scheme, codec: Codec) -> QParams:
    """s = amax / max_code (integers: 2^(b-1) - 1, or the range's divisor; floats: max finite; nf4: 1)."""
    a = amax.astype(np.float64)
    bad = ~np.isfinite(a)
    zero = a == 0
    ideal = np.where(bad | zero, 1.0, a) / codec.scale_divisor
    s = np.where(zero, 1.0, round_scale(ideal, scheme.scale, scheme.scale_round == "up"))
    floor_mask = floored(ideal, _smallest(scheme.scale), ~(bad | zero))
    s = _poison(s, bad, scheme)
    return QParams(s.astype(np.float32), s.astype(np.float32), None, bad if bad.any() else None, floor_mask)


def asymmetric(lo: np.ndarray, hi: np.ndarray, scheme: Scheme, codec: Codec) -> QParams:
    """s = (max(hi,0) - min(lo,0)) / (2^b - 1); z = clip(qmin - rint(lo / s), qmin, qmax)."""
    fmt = codec.fmt
    assert isinstance(fmt, IntFormat)
    low = np.minimum(lo.astype(np.float64), 0.0)
    high = np.maximum(hi.astype(np.float64), 0.0)
    bad = ~(np.isfinite(low) & np.isfinite(high))
    span = np.where(bad, 1.0, high - low)
    zero = span == 0
    ideal = np.where(zero, 1.0, span) / (fmt.max_value - fmt.min_value)
    s = np.where(zero, 1.0, round_scale(ideal, scheme.scale, scheme.scale_round == "up"))
    floor_mask = floored(ideal, _smallest(scheme.scale), ~(bad | zero))
    z = np.clip(fmt.min_value - np.rint(np.where(bad, 0.0, low) / s), fmt.min_value, fmt.max_value)
    z = np.where(zero | bad, 0.0, z)
    s = _poison(s, bad, scheme)
    return QParams(s.astype(np.float32), s.astype(np.float32), z.astype(np.float32), bad if bad.any() else None,
                   floor_mask)


def float_min(lo: np.ndarray, hi: np.ndarray, scheme: Scheme, codec: Codec) -> QParams:
    """m = fmt_min(x_min), s = (x_max - x_min) / (2^b - 1) (see the module docstring): a float offset, no zero point.

    A block with x_max = x_min has scale 1 and zero codes (it reads back as m); a block holding NaN / inf gets
    a NaN scale and m = 0 (nonfinite=nan) or is an error."""
    fmt = codec.fmt
    assert isinstance(fmt, IntFormat) and not fmt.signed
    low, high = lo.astype(np.float64), hi.astype(np.float64)
    bad = ~(np.isfinite(low) & np.isfinite(high))
    span = np.where(bad, 0.0, high - low)
    flat = span == 0
    ideal = np.where(flat, 1.0, span) / fmt.max_value
    s = np.where(flat, 1.0, round_scale(ideal, scheme.scale, scheme.scale_round == "up"))
    floor_mask = floored(ideal, _smallest(scheme.scale), ~(bad | flat))
    assert scheme.min_format is not None
    minimum = np.asarray(round_to(np.where(bad, 0.0, low), get_format(scheme.min_format), rounding="nearest_even",
                                  overflow="saturate"), dtype=np.float32)
    s = _poison(s, bad, scheme)
    scale = s.astype(np.float32)
    return QParams(scale, scale, None, bad if bad.any() else None, floor_mask, minimum, flat | bad)


def microscaling(amax: np.ndarray, scheme: Scheme, codec: Codec) -> QParams:
    """OCP MX shared scale X = 2^e (FLOOR or RCEIL, see the module docstring)."""
    a = amax.astype(np.float64)
    bad = ~np.isfinite(a)
    zero = a == 0
    safe = np.where(bad | zero, 1.0, a)
    if scheme.mx is MXRule.RCEIL:
        exponent = _ceil_log2_ratio(safe, codec.real_max)
    else:
        exponent = np.frexp(safe)[1].astype(np.int64) - 1 - element_emax(codec)
    floor_mask = floored(exponent.astype(np.float64), UE8M0_EXP_RANGE[0], ~(bad | zero))  # the exponent floor 2^-127
    exponent = np.clip(exponent, *UE8M0_EXP_RANGE)
    x = np.where(zero, 1.0, np.ldexp(1.0, exponent))
    x = _poison(x, bad, scheme)
    divisor = x * codec.unit
    return QParams(x.astype(np.float32), divisor.astype(np.float32), None, bad if bad.any() else None, floor_mask)


def _ceil_log2_ratio(amax: np.ndarray, max_value: float) -> np.ndarray:
    """Smallest e with amax <= max_value * 2^e (exact: the products are powers-of-two scalings)."""
    mant, exp = np.frexp(amax / max_value)
    e = np.where(mant == 0.5, exp - 1, exp).astype(np.int64)
    e = np.where(amax > np.ldexp(max_value, e), e + 1, e)
    e = np.where(amax <= np.ldexp(max_value, e - 1), e - 1, e)
    return e


FLOAT32_MAX = float(get_format("fp32").max_finite)


def check_float32_range(*stats: np.ndarray | float) -> None:
    """ValueError when a finite statistic (amax, or a block's min / max) is beyond float32's range."""
    for values in stats:
        magnitude = np.abs(np.asarray(values, dtype=np.float64))
        finite = magnitude[np.isfinite(magnitude)]
        if finite.size and float(finite.max()) > FLOAT32_MAX:
            raise ValueError(f"the input holds |x| = {float(finite.max()):.3g}, beyond float32's range "
                             f"({FLOAT32_MAX:.4g}): quantized scales and dequantized values are float32")


def nvfp4_tensor_scale(amax_tensor: float) -> float:
    """g = fp32(amax / (6 * 448)); 1 for an all-zero (or all non-finite) tensor."""
    if not math.isfinite(amax_tensor) or amax_tensor == 0:
        return 1.0
    check_float32_range(amax_tensor)
    g = float(np.float32(amax_tensor / (6.0 * 448.0)))
    return g if g > 0 else float(np.float32(2.0**-149))


def nvfp4(amax: np.ndarray, tensor_scale: float, scheme: Scheme, codec: Codec) -> QParams:
    """s_b = e4m3(amax_b / (6 g)) (floored at 2^-6 with minscale=normal); divisor fp32(s_b * g)."""
    a = amax.astype(np.float64)
    bad = ~np.isfinite(a)
    zero = a == 0
    ideal = np.where(bad | zero, 1.0, a) / (codec.max_value * tensor_scale)
    s = np.where(zero, 1.0, round_scale(ideal, "e4m3", scheme.scale_round == "up"))
    smallest = _smallest("e4m3")
    if scheme.minscale == "normal":
        smallest = 2.0 ** get_format("e4m3").emin  # type: ignore[union-attr]
        s = np.maximum(s, smallest)
    floor_mask = floored(ideal, smallest, ~(bad | zero))
    s = _poison(s, bad, scheme)
    divisor = (s.astype(np.float32) * np.float32(tensor_scale)).astype(np.float32)
    return QParams(s.astype(np.float32), divisor, None, bad if bad.any() else None, floor_mask)


def _smallest(scale_format: str) -> float:
    """The smallest positive value of a scale format (its floor)."""
    return float(get_format(scale_format).min_subnormal)  # type: ignore[union-attr]


def _poison(s: np.ndarray, bad: np.ndarray, scheme: Scheme) -> np.ndarray:
    if not bad.any():
        return s
    if scheme.nonfinite == "error":
        raise ValueError(f"the input holds NaN or inf in {int(bad.sum())} block(s); scheme {scheme} uses "
                         "nonfinite=error (add :nonfinite=nan to store those blocks as NaN)")
    return np.where(bad, np.nan, s)
