"""gfloat (graphcore-research), the reference implementation of the IEEE P3109 drafts, against
precisionlab: the whole P3109 family of widths 2 to 8 (signed and unsigned, finite and extended),
and mantissa-free formats: every code, every midpoint, one float32 / float64 ulp either side,
10^5 random values, each rounding mode gfloat 0.5 has, saturating and not.

gfloat's `round_ndarray` is the reference for the family (its scalar `round_float` is checked
against it on the same probes); the draft's rules are also written out independently in
tests/reference.py, which tests/test_rounding_modes.py uses for to_odd (gfloat 0.5.2 has no ToOdd).

With no mantissa bits there is no even mantissa; a tie goes to the neighbour with the even code,
as the P3109 drafts and gfloat define it (the tie between 0 and the smallest value goes to 0).
ue8m0 alone keeps ml_dtypes' float8_e8m0fnu rule, ties up (tests/test_rounding_peers.py), where
gfloat's OCP e8m0 ties to the even code: that difference is pinned below.

gfloat decides ties-to-away by the float64 sum delta + 0.5 >= 1, which rounds up a delta 2^-54
below one half: so nearest_away is compared for float32 inputs only (float64 inputs meet the exact
reference in tests/test_rounding_exact.py).

Left out, where gfloat does not model the format: negative inputs to unsigned formats (gfloat
returns them unchanged, a value the format lacks; precisionlab follows the draft's Saturate step,
pinned below) and, for formats without a zero code, inputs below the smallest value (gfloat returns
a power of two the format lacks; precisionlab gives the smallest value). gfloat also builds formats
precisionlab refuses (signed P = K, binary2p1se, binary2p2ue: formats/p3109.py says why) and reports
a max of 0.5 for binary2p1se, which no code of it holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import Encoding, FloatFormat, get_float_format, p3109_formats

from .reference import binomial_interval, same_bits

gfloat = pytest.importorskip("gfloat")
from gfloat.formats import Signedness, format_info_ocp_e8m0, format_info_p3109  # noqa: E402
from gfloat.types import Domain, FormatInfo, RoundMode  # noqa: E402

MODES = {"nearest_even": RoundMode.TiesToEven, "nearest_away": RoundMode.TiesToAway,
         "toward_zero": RoundMode.TowardZero, "toward_positive": RoundMode.TowardPositive,
         "toward_negative": RoundMode.TowardNegative}

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


# --------------------------------------------------------------------------- the P3109 family
P3109 = [f for width in range(2, 9) for f in p3109_formats(width)]
P3109_IDS = [f.name for f in P3109]


def gfloat_p3109(fmt: FloatFormat) -> FormatInfo:
    """gfloat's own constructor for the format with the same K, P, signedness and domain."""
    return format_info_p3109(fmt.bits, fmt.man_bits + 1, Signedness.Signed if fmt.signed else Signedness.Unsigned,
                             Domain.Extended if fmt.extended else Domain.Finite)


def test_the_family_of_widths_2_to_8_is_every_p3109_format_but_the_refused_three() -> None:
    # K in 2..8: signed P in 1..K-1 and unsigned P in 1..K, each finite and extended: 126 formats;
    # binary2p1se and binary2p2ue are refused (formats/p3109.py), signed P = K is not in the draft.
    assert len(P3109) == sum(2 * (k - 1) + 2 * k for k in range(2, 9)) - 2 == 124
    assert "binary2p1se" not in P3109_IDS and "binary2p2ue" not in P3109_IDS


@pytest.mark.parametrize("fmt", P3109, ids=P3109_IDS)
def test_p3109_limits_match_gfloat(fmt: FloatFormat) -> None:
    fi = gfloat_p3109(fmt)
    assert (fmt.max_finite, fmt.min_normal, fmt.min_subnormal, fmt.eps) == \
        (fi.max, fi.smallest_normal, fi.smallest_subnormal, fi.eps)
    assert (fmt.has_inf, fmt.has_nan, fmt.has_negative_zero) == (fi.num_infs > 0, fi.num_nans > 0, fi.has_nz)
    assert fmt.bias == fi.bias and fmt.exp_bits == fi.expBits and fmt.bits == fi.k


@pytest.mark.parametrize("fmt", P3109, ids=P3109_IDS)
def test_p3109_every_code_decodes_and_encodes_as_gfloat(fmt: FloatFormat) -> None:
    fi = gfloat_p3109(fmt)
    codes = np.arange(fmt.code_count)
    expected = np.array([gfloat.decode_float(fi, int(c)).fval for c in codes])
    values = pl.decode(codes, fmt)
    assert same_bits(values, expected).all()
    assert same_bits(gfloat.decode_ndarray(fi, codes), expected).all()
    # gfloat's encode writes its code_of_nan for NaN: the all-ones code, or 0x80 for signed formats
    np.testing.assert_array_equal(pl.encode(values, fmt, nan_code="all_ones"), gfloat.encode_ndarray(fi, values))
    np.testing.assert_array_equal(pl.encode(values, fmt), gfloat.encode_ndarray(fi, values))  # one NaN code


def signed_comparable(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    return x if fmt.signed else x[~np.signbit(x) | np.isnan(x)]


@pytest.mark.parametrize("fmt", P3109, ids=P3109_IDS)
def test_p3109_rounding_matches_gfloat_on_every_midpoint(fmt: FloatFormat) -> None:
    fi = gfloat_p3109(fmt)
    for dtype in (np.float32, np.float64):
        x = signed_comparable(probes(fi, dtype), fmt)
        for mode, gfloat_mode in MODES.items():
            for saturate in (False, True):
                ours = pl.round_to(x, fmt, rounding=mode, overflow="saturate" if saturate else None)
                with np.errstate(over="ignore"):
                    expected = gfloat.round_ndarray(fi, x, gfloat_mode, saturate)
                bad = ~same_bits(ours, expected)
                assert not bad.any(), (dtype, mode, saturate, x[bad][:4], ours[bad][:4], expected[bad][:4])
    x32 = signed_comparable(probes(fi, np.float32), fmt)
    for mode in ("nearest_even", "toward_positive", "toward_negative"):  # the scalar reference agrees
        scalar = gfloat_round(fi, x32, mode, saturate=False)
        assert same_bits(pl.round_to(x32, fmt, rounding=mode), scalar).all(), mode


RANDOM_VALUES = 100_000


@pytest.mark.parametrize("fmt", P3109, ids=P3109_IDS)
def test_p3109_rounding_matches_gfloat_on_random_values(fmt: FloatFormat) -> None:
    """10^5 values log-uniform from 1/8 of the smallest value to 4x the largest, half of them float32."""
    fi = gfloat_p3109(fmt)
    rng = np.random.default_rng(fmt.bits * 100 + fmt.man_bits * 4 + 2 * fmt.signed + fmt.extended)
    magnitudes = np.exp2(rng.uniform(math.log2(fi.smallest) - 3, math.log2(fi.max) + 2, RANDOM_VALUES))
    x = magnitudes * (rng.choice([-1.0, 1.0], RANDOM_VALUES) if fmt.signed else 1.0)
    half = RANDOM_VALUES // 2
    for sample in (x[:half].astype(np.float32), x[half:]):
        for mode, gfloat_mode in MODES.items():
            for saturate in (False, True):
                ours = pl.round_to(sample, fmt, rounding=mode, overflow="saturate" if saturate else None)
                with np.errstate(over="ignore"):
                    expected = gfloat.round_ndarray(fi, sample, gfloat_mode, saturate)
                assert same_bits(ours, expected).all(), (sample.dtype, mode, saturate)


def test_gfloat_scalar_ties_away_is_inexact_for_float64_inputs() -> None:
    # delta + 0.5 >= 1.0 rounds up when delta is 2^-54 below one half, which a float64 subnormal of the
    # format can be; round_ndarray's delta >= 0.5 is exact, and so is precisionlab.
    fi = format_info_p3109(8, 3)
    x = (0.5 - 2.0**-54) * 2.0**-17  # just below half of the smallest subnormal, 2^-17
    assert gfloat.round_float(fi, x, RoundMode.TiesToAway) == 2.0**-17
    assert gfloat.round_ndarray(fi, np.array([x]), RoundMode.TiesToAway)[0] == 0.0
    assert pl.round_to(x, "binary8p3se", rounding="nearest_away") == 0.0


def test_negatives_into_unsigned_p3109_formats_follow_the_drafts_saturate_step() -> None:
    """gfloat returns a negative input unchanged (a value the format lacks). The draft rounds it on the
    signed grid and saturates the result into [0, max]: a rounding to zero is 0; below zero, SatFinite /
    SatPropagate give 0, so do TowardZero and TowardPositive, and SatNone otherwise gives NaN."""
    fi = format_info_p3109(8, 3, Signedness.Unsigned, Domain.Extended)
    x = np.array([-0.3, -2.0**-40, -0.0, -np.inf])
    assert list(gfloat.round_ndarray(fi, x[:2], RoundMode.TiesToEven, False)) == [-0.3125, -0.0]
    fmt = "binary8p3ue"
    assert same_bits(pl.round_to(x, fmt), [np.nan, 0.0, 0.0, np.nan]).all()
    assert same_bits(pl.round_to(x, fmt, overflow="satfinite"), [0.0, 0.0, 0.0, 0.0]).all()
    assert same_bits(pl.round_to(x, fmt, overflow="satpropagate"), [0.0, 0.0, 0.0, 0.0]).all()
    assert same_bits(pl.round_to(x, fmt, rounding="toward_zero"), [0.0, 0.0, 0.0, np.nan]).all()
    assert same_bits(pl.round_to(x, fmt, rounding="toward_positive"), [0.0, 0.0, 0.0, np.nan]).all()
    assert same_bits(pl.round_to(x, fmt, rounding="toward_negative"), [np.nan, np.nan, 0.0, np.nan]).all()
    assert list(pl.encode(x, fmt)) == [0xFF, 0, 0, 0xFF]  # the unsigned format's one NaN is its top code


# --------------------------------------------------------------------------- stochastic rounding at the top
SR_BITS = 12
"""gfloat's Stochastic mode rounds up when round(delta * 2^SR_BITS) + srbits >= 2^SR_BITS; with every
srbits in 0 .. 2^SR_BITS - 1 once, its outcomes are the exact distribution for inputs whose delta is a
multiple of 2^-SR_BITS (all of those below)."""
SR_SAMPLES = 40_000
P3109_8BIT = [f for f in P3109 if f.bits == 8]


def gfloat_stochastic_outcomes(fi: FormatInfo, x: float, saturate: bool) -> dict[float, float]:
    """{value: probability} of gfloat's stochastic rounding of x, over every srbits value."""
    srbits = np.arange(1 << SR_BITS)
    with np.errstate(over="ignore"):
        values = gfloat.round_ndarray(fi, np.full(srbits.size, x), RoundMode.Stochastic, saturate, srbits, SR_BITS)
    keys, counts = np.unique(values, return_counts=True, equal_nan=True)
    return {float(k): c / srbits.size for k, c in zip(keys, counts, strict=True)}


@pytest.mark.parametrize("fmt", P3109_8BIT, ids=[f.name for f in P3109_8BIT])
def test_p3109_stochastic_rounding_past_the_top_matches_gfloat(fmt: FloatFormat) -> None:
    """Just past max_finite both round on the grid with the exponent unbounded above, then saturate or
    overflow (binary8p4se: 230 is 224 with p 5/8 and +inf with 3/8)."""
    fi = gfloat_p3109(fmt)
    top = fi.max
    gap = math.ldexp(1.0, math.frexp(top)[1] - 1 - fmt.man_bits)  # the grid step in max_finite's binade
    signs = (1.0, -1.0) if fmt.signed else (1.0,)
    for x in (top + gap / 4096, top + gap * 3 / 8, top + gap * 1.5):
        for sign in signs:
            for saturate in (False, True):
                expected = gfloat_stochastic_outcomes(fi, sign * x, saturate)
                samples = pl.round_to(np.full(SR_SAMPLES, sign * x), fmt, rounding="stochastic",
                                      overflow="saturate" if saturate else None, rng=fmt.man_bits + int(x))
                for value, probability in expected.items():
                    count = int(same_bits(samples, np.full(SR_SAMPLES, value)).sum())
                    if probability in (0.0, 1.0):
                        assert count == SR_SAMPLES * probability, (sign * x, saturate, value)
                        continue
                    k_lo, k_hi = binomial_interval(SR_SAMPLES, probability, 1e-9)
                    assert k_lo <= count <= k_hi, (sign * x, saturate, value, probability * SR_SAMPLES, count)
                assert sum(int(same_bits(samples, np.full(SR_SAMPLES, v)).sum()) for v in expected) == SR_SAMPLES


def test_binary8p4se_230_in_gfloat() -> None:
    fi = format_info_p3109(8, 4)
    assert gfloat_stochastic_outcomes(fi, 230.0, False) == {224.0: 0.625, math.inf: 0.375}
    assert gfloat_stochastic_outcomes(fi, 230.0, True) == {224.0: 1.0}
