"""The overflow edge on every path: round on the grid with the exponent unbounded above, then the policy.

Every deterministic mode, every family (IEEE, fn, fnuz, finite, mantissa-free, unsigned, P3109 signed
and unsigned in both domains, integers), every overflow policy the format has, and every way a value
reaches the engine: Python floats, numpy scalars, arrays small enough for the binary search, arrays
for the table and bit kernels, arrays of several chunks, float32 and float64, and torch tensors
(torch's own cast under nearest-even where torch has the format). Expected values: the exact
rational reference (tests/reference.py) for floats; for integers, the mode on exact rationals, then
the clamp to [min, max] (integers always saturate).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import FloatFormat, IntFormat
from precisionlab.rounding import chunks

from .reference import pow2, ref_format, same_bits

MODES = ("nearest_even", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd")
FLOATS = ["fp16", "bf16", "e5m2", "e4m3", "e4m3fnuz", "e5m2fnuz", "e2m1", "e3m2", "ue8m0", "e7m0fnuz",
          "binary8p4se", "binary8p3sf", "binary8p4ue", "binary8p3uf", "binary8p1ue", "binary10p4se", "tf32", "fp32"]
INTEGERS = ["int8", "uint8", "int4", "uint4", "int2"]
SIZES = (1, 7, 300, 3000, chunks.CHUNK + 77)
"""A single element, the binary search, a direct form or one chunk, and two chunks."""


def edge_values(name: str) -> list[float]:
    """Both sides of the top: max_finite, a hair above it, the midpoint to the next grid point and its
    float64 neighbours, 3/8 of the way, the next grid point, past it, far past it, and the infinities."""
    fmt = pl.get_format(name)
    if isinstance(fmt, IntFormat):
        top, low = float(fmt.max_value), float(fmt.min_value)
        base = [top, top + 0.25, top + 0.5, top + 0.75, top + 1, top + 1.5, top * 4 + 9, 1e30]
        return base + [low - (v - top) for v in base] + [math.inf, -math.inf, 0.0]
    ref = ref_format(fmt)
    top = ref.max_finite
    gap = pow2(math.frexp(float(top))[1] - 1 - ref.M)  # the grid step in max_finite's binade
    mid = float(top + gap / 2)
    magnitudes = [float(top), float(top + gap / 4096), mid, math.nextafter(mid, 0), math.nextafter(mid, math.inf),
                  float(top + gap * 3 / 8), float(top + gap), float(top + gap * 5 / 2), float(top) * 64]
    return magnitudes + [-v for v in magnitudes] + [math.inf, -math.inf]


def expected_float(name: str, x: np.ndarray, mode: str, overflow: str | None) -> np.ndarray:
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    ref = dataclasses.replace(ref_format(fmt), ties_up=name == "ue8m0")
    return np.array([ref.round(float(v), mode, overflow) for v in x])


def round_integer(value: float, mode: str, low: int, high: int) -> float:
    """The mode on the exact rational value, then the clamp to [low, high] (±inf clamp too)."""
    if math.isinf(value):
        return float(high if value > 0 else low)
    q = Fraction(value)
    negative = q < 0
    magnitude = abs(q)
    floor = magnitude.numerator // magnitude.denominator
    frac = magnitude - floor
    up = {"nearest_even": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and floor % 2 == 1),
          "nearest_away": frac >= Fraction(1, 2), "toward_zero": False,
          "toward_positive": frac > 0 and not negative, "toward_negative": frac > 0 and negative,
          "to_odd": frac > 0 and floor % 2 == 0}[mode]
    n = -(floor + up) if negative else floor + up
    return float(min(max(n, low), high)) + 0.0


def expected(name: str, x: np.ndarray, mode: str, overflow: str | None) -> np.ndarray:
    fmt = pl.get_format(name)
    if isinstance(fmt, IntFormat):
        return np.array([round_integer(float(v), mode, fmt.min_value, fmt.max_value) for v in x])
    return expected_float(name, x, mode, overflow)


def policies(name: str) -> list[str | None]:
    fmt = pl.get_format(name)
    if isinstance(fmt, IntFormat):
        return [None, "saturate", "saturate_propagate"]
    return [None, "saturate", "saturate_propagate"] + ["inf"] * fmt.has_inf + ["nan"] * fmt.has_nan


def inputs(name: str, dtype: type[np.floating]) -> np.ndarray:
    fmt = pl.get_format(name)
    values = np.array(edge_values(name))
    if not getattr(fmt, "signed", True):
        values = values[values >= 0]  # the bottom of an unsigned range is tests/test_rounding_modes.py's
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    return np.unique(cast[np.isfinite(cast) == np.isfinite(values)])  # drop values beyond float32 itself


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", FLOATS + INTEGERS)
def test_every_mode_and_policy_at_the_top_on_every_numpy_path(name: str, dtype: type[np.floating]) -> None:
    x = inputs(name, dtype)
    for mode in MODES:
        for overflow in policies(name):
            want = expected(name, x.astype(np.float64), mode, overflow)
            for n in SIZES:
                tiled = np.resize(x, n)
                got = pl.round_to(tiled, name, rounding=mode, overflow=overflow)
                bad = ~same_bits(got, np.resize(want, n))
                assert not bad.any(), (mode, overflow, n, tiled[bad][:3], got[bad][:3], np.resize(want, n)[bad][:3])
            for value, wanted in zip(x[:: max(1, x.size // 6)], want[:: max(1, x.size // 6)], strict=True):
                scalar = pl.round_to(float(value) if dtype is np.float64 else dtype(value), name, rounding=mode,
                                     overflow=overflow)
                assert same_bits(np.array([float(scalar)]), np.array([wanted]))[0], (mode, overflow, value, scalar)


TORCH_DTYPES = ("float32", "float64", "bfloat16", "float16")


@pytest.mark.parametrize("name", ["fp16", "bf16", "e5m2", "e4m3", "e4m3fnuz", "e5m2fnuz", "binary8p4se", "e2m1",
                                  "int8"])
def test_every_mode_and_policy_at_the_top_on_torch_tensors(name: str) -> None:
    torch = pytest.importorskip("torch")
    x = inputs(name, np.float64)
    for dtype_name in TORCH_DTYPES:
        dtype = getattr(torch, dtype_name)
        values = torch.from_numpy(x).to(dtype)
        host = np.resize(values.to(torch.float64).numpy(), 3000)  # the values as the tensor holds them
        t = torch.from_numpy(host).to(dtype)
        for mode in MODES:
            for overflow in policies(name):
                got = pl.round_to(t, name, rounding=mode, overflow=overflow).to(torch.float64).numpy()
                want = np.resize(expected(name, values.to(torch.float64).numpy(), mode, overflow), 3000)
                bad = ~same_bits(got, want)
                assert not bad.any(), (dtype_name, mode, overflow, host[bad][:3], got[bad][:3], want[bad][:3])


@pytest.mark.parametrize("name", INTEGERS)
def test_infinity_into_an_integer_raises_no_warning_in_any_mode(name: str) -> None:
    # to_odd tested the parity of floor(inf) with fmod, which is NaN and warned "invalid value".
    fmt = pl.get_format(name)
    assert isinstance(fmt, IntFormat)
    x = np.array([np.inf, -np.inf, 1e300, 2.5])
    for mode in MODES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = pl.round_to(x, name, rounding=mode)
        assert list(got[:3]) == [fmt.max_value, fmt.min_value, fmt.max_value], mode
