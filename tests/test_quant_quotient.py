"""Every code is one exact rounding of x / s: checked against exact rational arithmetic on elements placed
on, and one ulp either side of, every decision boundary of the element (where a rounded quotient double-rounds).

The reference shares nothing with the quantizer's rounding: q = Fraction(x) / Fraction(divisor), the nearest
value of the element's finite values (ties: the even code for integers and floats, the smaller value for nf4),
saturating at ±max. The divisor is the stored scale (NVFP4: fp32(s_b * g), MXINT8: X * 2^-6), as documented.
"""

from __future__ import annotations

import bisect
import itertools
from fractions import Fraction

import numpy as np
import pytest

from precisionlab import decode
from precisionlab.formats import IntFormat, get_format
from precisionlab.formats.codebook import NF4
from precisionlab.quant import quantize
from precisionlab.quant.scheme import parse_scheme

SCHEMES = ["nvfp4", "nvfp4:minscale=normal", "int8:row:scale=fp32", "int4:g32", "int8:g16:scale=bf16",
           "int4:g32:asym", "uint4:g64", "e4m3:block16x64", "e4m3:tile1x128", "e5m2:g32", "e2m3:g32", "e3m2:g32",
           "e2m1:g16:scale=e4m3", "nf4:g64", "mxfp4", "mxint8"]


def _divisor_grid(q) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The documented divisor of each block: s; fp32(s_b * g) for NVFP4; X * 2^-6 for MXINT8."""
    s = q.scales.astype(np.float32)
    if q.tensor_scale is not None:
        return (s * np.float32(q.tensor_scale)).astype(np.float32)
    if q.scheme.preset == "mxint8":
        return (s * np.float32(2.0**-6)).astype(np.float32)
    return s


def _per_element(grid: np.ndarray, shape: tuple[int, int], rows: int, cols: int) -> np.ndarray:
    return np.repeat(np.repeat(grid, rows, axis=0), cols, axis=1)[: shape[0], : shape[1]]


def _block_shape(spec: str, shape: tuple[int, int]) -> tuple[int, int]:
    s = parse_scheme(spec)
    if s.granularity.value == "row":
        return 1, shape[1]
    return (s.block_rows if s.granularity.value == "block" else 1), s.group


def _element_values(spec: str) -> tuple[list[Fraction], list[int] | None, object]:
    """(finite values ascending, their codes' parity order key or None for nf4, the format)."""
    s = parse_scheme(spec)
    if s.element == "nf4":
        return [Fraction(float(v)) for v in NF4.table], None, NF4
    fmt = get_format(s.element)
    if isinstance(fmt, IntFormat):
        top = 2 ** (fmt.bits - 1) - 1
        lo, hi = (fmt.min_value, fmt.max_value) if not s.symmetric else (-top, top)
        values = list(range(lo, hi + 1))
        return [Fraction(v) for v in values], [v % 2 for v in values], fmt
    codes = np.arange(1 << fmt.bits)
    vals = np.asarray(decode(codes, fmt), dtype=np.float64)
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))
    pairs = sorted((Fraction(float(v)), int(c) % 2) for v, c in zip(vals[keep], codes[keep], strict=True))
    return [p[0] for p in pairs], [p[1] for p in pairs], fmt


def _nearest(q: Fraction, values: list[Fraction], parity: list[int] | None) -> Fraction:
    """The exact rounding of q: nearest value, saturating; a tie to the even code (nf4: the smaller value)."""
    if q <= values[0]:
        return values[0]
    if q >= values[-1]:
        return values[-1]
    i = bisect.bisect_left(values, q)
    if values[i] == q:
        return q
    below, above = values[i - 1], values[i]
    if q - below < above - q:
        return below
    if q - below > above - q:
        return above
    if parity is None:
        return below
    return below if parity[i - 1] == 0 else above


def _boundary_inputs(x: np.ndarray, divisor: np.ndarray, values: list[Fraction], dtype: type, keep: np.ndarray,
                     low: np.ndarray, high: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Elements at m * d and one ulp (of dtype) either side, for random decision boundaries m, where that lies
    strictly inside the block's [low, high]; each block's extremes (`keep`) are left alone, so its scale and
    zero point stay the same."""
    mids = np.array([float((a + b) / 2) for a, b in itertools.pairwise(values)])
    m = mids[rng.integers(0, mids.size, size=x.shape)]
    target = (m * divisor.astype(np.float64)).astype(dtype)
    step = rng.integers(-1, 2, size=x.shape)
    target = np.where(step > 0, np.nextafter(target, dtype(np.inf)), target)
    target = np.where(step < 0, np.nextafter(target, dtype(-np.inf)), target)
    use = ~keep & (target > low) & (target < high)
    return np.where(use, target, x.astype(dtype))


def _extremes(x: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each block's largest, smallest and largest-magnitude elements (a mask), and per element the block's
    lower and upper bound for replacements (min and max, narrowed to +-amax * (1 - 2^-10))."""
    keep = np.zeros(x.shape, dtype=bool)
    low = np.zeros(x.shape)
    high = np.zeros(x.shape)
    for r0 in range(0, x.shape[0], rows):
        for c0 in range(0, x.shape[1], cols):
            block = x[r0 : r0 + rows, c0 : c0 + cols]
            for flat in (np.argmax(block), np.argmin(block), np.argmax(np.abs(block))):
                r, c = np.unravel_index(flat, block.shape)
                keep[r0 + r, c0 + c] = True
            amax = float(np.abs(block).max()) * (1 - 2.0**-10)
            low[r0 : r0 + rows, c0 : c0 + cols] = max(float(block.min()), -amax)
            high[r0 : r0 + rows, c0 : c0 + cols] = min(float(block.max()), amax)
    return keep, low, high


def _decoded(q, spec: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    s = parse_scheme(spec)
    codes = q.codes.astype(np.int64)
    if s.element == "nf4":
        return NF4.table[codes].astype(np.float64)
    fmt = get_format(s.element)
    if isinstance(fmt, IntFormat):
        if fmt.signed:
            codes = np.where(codes >= 1 << (fmt.bits - 1), codes - (1 << fmt.bits), codes)
        rows, cols = _block_shape(spec, codes.shape)
        z = 0 if q.zero_points is None else _per_element(q.zero_points[0], codes.shape, rows, cols)
        return (codes - z).astype(np.float64)
    return np.asarray(decode(q.codes, fmt), dtype=np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", SCHEMES)
def test_codes_are_one_exact_rounding_of_the_quotient(spec: str, dtype: type) -> None:
    rng = np.random.default_rng(11)
    shape = (32, 256)
    x0 = (rng.standard_normal(shape) * np.exp(rng.uniform(-3, 3, (shape[0], 1)))).astype(np.float32)
    rows, cols = _block_shape(spec, shape)
    keep, low, high = _extremes(x0, rows, cols)
    q0 = quantize(x0.astype(dtype), spec)
    d = _per_element(_divisor_grid(q0), shape, rows, cols)
    values, parity, _ = _element_values(spec)
    z = None
    if q0.zero_points is not None:  # asymmetric: v = x / s is rounded to an integer, then z is added and clipped
        fmt = get_format(parse_scheme(spec).element)
        qmin, qmax = int(fmt.min_value), int(fmt.max_value)  # type: ignore[union-attr]
        span = range(-(2**fmt.bits), 2**fmt.bits + 1)  # every integer v / s can round to before clipping
        values, parity = [Fraction(k) for k in span], [k % 2 for k in span]
        z = _per_element(q0.zero_points[0], shape, rows, cols).astype(np.int64)
    x = _boundary_inputs(x0, d, values, dtype, keep, low, high, rng)
    q = quantize(x, spec)
    np.testing.assert_array_equal(q.scales, q0.scales)  # same blocks, same divisors
    if z is not None:
        np.testing.assert_array_equal(q.zero_points, q0.zero_points)
    got = _decoded(q, spec)
    wrong = []
    for (r, c), xv in np.ndenumerate(x):
        exact = Fraction(float(xv)) / Fraction(float(d[r, c]))
        rounded = _nearest(exact, values, parity)
        expected = float(rounded) if z is None else float(min(max(int(rounded) + z[r, c], qmin), qmax) - z[r, c])
        if got[r, c] != expected:
            wrong.append((r, c, float(xv), float(exact), expected, float(got[r, c])))
    assert not wrong, f"{len(wrong)} of {x.size} codes are not the exact rounding, e.g. {wrong[:3]}"


@pytest.mark.parametrize("element", ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1"])
def test_float64_code_table_equals_the_engine(element: str) -> None:
    # float64 quotients are encoded through a table on their top 16 bits and a sticky bit; the engine's own
    # exact float64 path is the reference, on values spread over every binade, their midpoints +- 1 ulp,
    # subnormals, the saturation range, zeros, inf and NaN
    from precisionlab import encode
    from precisionlab.quant.elements import codec

    rng = np.random.default_rng(3)
    fmt = get_format(element)
    v = np.ldexp(rng.uniform(1, 2, 50_000), rng.integers(-30, 30, 50_000)) * rng.choice([-1, 1], 50_000)
    values = np.asarray(decode(np.arange(256 if fmt.bits == 8 else 1 << fmt.bits), fmt), dtype=np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[1:] + finite[:-1]) / 2
    edges = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), finite,
                            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300, 5e-324]])
    v = np.concatenate([v, edges])
    got = codec(element).encode_symmetric(v)
    expected = np.asarray(encode(v, fmt, overflow="saturate", nan="zero"), dtype=np.uint8)
    np.testing.assert_array_equal(got, expected)
