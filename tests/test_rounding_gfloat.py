"""Mantissa-free formats against gfloat (graphcore-research), the independent reference for the
P3109 drafts' rounding: every code, every midpoint, one float32 / float64 ulp either side.

With no mantissa bits there is no even mantissa; a tie goes to the neighbour with the even code,
as the P3109 drafts and gfloat define it (the tie between 0 and the smallest value goes to 0).
ue8m0 alone keeps ml_dtypes' float8_e8m0fnu rule, ties up (tests/test_rounding_peers.py), where
gfloat's OCP e8m0 ties to the even code: that difference is pinned below.

gfloat decides ties-to-away by the float64 sum delta + 0.5 >= 1, which rounds up a delta 2^-54
below one half: so nearest_away is compared for float32 inputs only (float64 inputs meet the exact
reference in tests/test_rounding_exact.py).

Left out, where gfloat's scalar reference does not model the format: negative inputs to unsigned
formats (gfloat returns them unchanged; precisionlab gives NaN) and, for formats without a zero
code, inputs below the smallest value (gfloat returns a power of two the format lacks;
precisionlab gives the smallest value).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import Encoding, FloatFormat, get_float_format

from .reference import same_bits

gfloat = pytest.importorskip("gfloat")
from gfloat.formats import Signedness, format_info_ocp_e8m0, format_info_p3109  # noqa: E402
from gfloat.types import Domain, FormatInfo, RoundMode  # noqa: E402

MODES = {"nearest_even": RoundMode.TiesToEven, "nearest_away": RoundMode.TiesToAway,
         "toward_zero": RoundMode.TowardZero}

# (precisionlab format, how gfloat spells the same definition)
SIGNED_P3109_K8P1 = format_info_p3109(8, 1, Signedness.Signed, Domain.Finite)
UNSIGNED_P3109_K8P1 = format_info_p3109(8, 1, Signedness.Unsigned, Domain.Finite)
NO_MANTISSA = ["e7m0fnuz", "e4m0fnuz", "e5m0b3fnuz", "e4m0fn", "e3m0finite", "ue4m0fn", "ue5m0b20finite",
               "ue8m0b126fn", "p3109-unsigned"]


def our_format(name: str) -> FloatFormat:
    if name == "p3109-unsigned":  # P3109 K8P1 unsigned: a zero, no sign, NaN at the top code
        return FloatFormat(name, 8, 0, 128, Encoding.FN, signed=False, subnormals=True)
    return get_float_format(name)


def gfloat_format(fmt: FloatFormat) -> FormatInfo:
    """The same definition in gfloat's terms, written from the encoding's rules (FN: the top code of
    each sign is NaN; FNUZ: no -0, its code is the NaN; FINITE: every code a number)."""
    nz = fmt.encoding is not Encoding.FNUZ
    high_nans = 1 if fmt.encoding is Encoding.FN else 0
    return FormatInfo(fmt.name, k=fmt.exp_bits + fmt.man_bits + int(fmt.signed), precision=fmt.man_bits + 1,
                      bias=fmt.bias, is_signed=fmt.signed, domain=Domain.Finite, has_nz=nz and fmt.signed,
                      num_high_nans=high_nans, has_subnormals=fmt.subnormals, is_twos_complement=False)


def probes(fi: FormatInfo, dtype: type[np.floating]) -> np.ndarray:
    """Every finite value of the format, every midpoint between neighbours and one past the top,
    1.5x the top, with one ulp of dtype either side, both signs, and ±inf, NaN, ±0."""
    values = np.unique([gfloat.decode_float(fi, c).fval for c in range(1 << fi.k)])
    values = values[np.isfinite(values)]
    mids = (values[:-1] + values[1:]) / 2
    with np.errstate(over="ignore"):
        base = np.concatenate([values, mids, [values[-1] * 1.5, values[-1] * 3]]).astype(dtype)
    near = np.concatenate([base, np.nextafter(base, dtype(np.inf)), np.nextafter(base, dtype(-np.inf))])
    return np.concatenate([near, -near, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], dtype=dtype)])


def comparable(x: np.ndarray, fmt: FloatFormat, fi: FormatInfo) -> np.ndarray:
    keep = np.ones(x.shape, dtype=bool)
    if not fmt.signed:
        keep &= ~np.signbit(x) | np.isnan(x)
    if not fmt.subnormals:
        smallest = gfloat.decode_float(fi, 0).fval
        keep &= ~(np.abs(x) < smallest)
    if fi.num_nans == 0:
        keep &= ~np.isnan(x)
    return x[keep]


def gfloat_round(fi: FormatInfo, x: np.ndarray, mode: str, saturate: bool) -> np.ndarray:
    return np.array([gfloat.round_float(fi, float(v), MODES[mode], sat=saturate) for v in x])


@pytest.mark.parametrize("name", NO_MANTISSA)
def test_every_code_decodes_as_gfloat(name: str) -> None:
    fmt = our_format(name)
    fi = gfloat_format(fmt)
    expected = np.array([gfloat.decode_float(fi, c).fval for c in range(fmt.code_count)])
    assert same_bits(pl.decode(np.arange(fmt.code_count), fmt), expected).all()


def test_e7m0fnuz_is_p3109_k8p1() -> None:
    for ours, theirs in ((our_format("e7m0fnuz"), SIGNED_P3109_K8P1), (our_format("p3109-unsigned"),
                                                                       UNSIGNED_P3109_K8P1)):
        mapped = gfloat_format(ours)
        for field in ("k", "precision", "bias", "is_signed", "has_nz", "num_high_nans", "has_subnormals"):
            assert getattr(mapped, field) == getattr(theirs, field), (ours.name, field)


INPUTS_AND_MODES = [(dtype, mode) for dtype in (np.float32, np.float64) for mode in MODES
                    if not (dtype is np.float64 and mode == "nearest_away")]  # see the module docstring


@pytest.mark.parametrize(("dtype", "mode"), INPUTS_AND_MODES, ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("name", NO_MANTISSA)
def test_rounding_matches_gfloat_on_every_midpoint(name: str, dtype: type[np.floating], mode: str) -> None:
    fmt = our_format(name)
    fi = gfloat_format(fmt)
    x = comparable(probes(fi, dtype), fmt, fi)
    policies = ["saturate"] + (["nan"] if fmt.has_nan else [])
    for overflow in policies:
        ours = pl.round_to(x, fmt, rounding=mode, overflow=overflow)
        expected = gfloat_round(fi, x, mode, saturate=overflow == "saturate")
        bad = ~same_bits(ours, expected)
        assert not bad.any(), (overflow, x[bad][:4], ours[bad][:4], expected[bad][:4])


def test_the_tie_between_zero_and_the_smallest_value_goes_to_zero() -> None:
    # e7m0fnuz: 0 (code 0x00) and 2^-63 (code 0x01); their midpoint 2^-64 goes to the even code.
    x = np.array([2.0**-64, -(2.0**-64), 2.0**-64 * (1 + 2.0**-20)])
    assert list(pl.round_to(x, "e7m0fnuz")) == [0.0, 0.0, 2.0**-63]
    assert list(pl.round_to(x.astype(np.float32), "e7m0fnuz")) == [0.0, 0.0, 2.0**-63]
    assert gfloat.round_float(SIGNED_P3109_K8P1, 2.0**-64) == 0.0


def test_ue8m0_ties_up_where_gfloat_ties_to_the_even_code() -> None:
    # 3 lies between 2 (code 128) and 4 (code 129); 0.75 between 0.5 (126) and 1 (127).
    x = np.array([3.0, 0.75, 6.0])
    assert list(pl.round_to(x, "ue8m0")) == [4.0, 1.0, 8.0]  # ml_dtypes' rule, kept for ue8m0
    assert [gfloat.round_float(format_info_ocp_e8m0, float(v)) for v in x] == [2.0, 0.5, 8.0]
    # another bias moves the even codes: 2|4 are fields 127|128, 0.5|1 125|126, 4|8 128|129
    assert list(pl.round_to(x, "ue8m0b126fn")) == [4.0, 1.0, 4.0]
    assert math.isnan(pl.round_to(0.0, "ue8m0"))
