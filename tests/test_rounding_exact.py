"""Rounding against exact rational arithmetic, every mode and overflow policy, and the array contract."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import precisionlab as pl
from precisionlab.formats import FloatFormat

from .reference import ref_format, same_bits

FLOATS = ["fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1", "e6m9",
          "e4m3ieee"]
MODES = ["nearest_even", "nearest_away", "toward_zero"]


def reference(x: np.ndarray, name: str, mode: str, overflow: str | None = None) -> np.ndarray:
    """The exact rounding, from the format's defining fields only: the reference derives its
    own limits (max finite, specials, the default overflow policy)."""
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    ref = ref_format(fmt)
    return np.array([ref.round(float(v), mode, overflow) for v in x])


def mixed_sample(name: str, seed: int) -> np.ndarray:
    """Random magnitudes across the whole range, the midpoint above each, midpoints nudged by 2^-40,
    and the top of the range: every limit and grid point from the reference, none from src."""
    ref = ref_format(pl.get_format(name))
    rng = np.random.default_rng(seed)
    lo, hi = math.log2(ref.min_positive) - 2, math.log2(ref.max_finite) + 1
    random = np.exp2(rng.uniform(lo, hi, 400)) * rng.choice([-1.0, 1.0], 400)
    midpoints = np.array([math.copysign(float(ref.midpoint_above(abs(Fraction(v)))), v) for v in random])
    nudged = np.concatenate([midpoints * (1 + 2.0**-40), midpoints * (1 - 2.0**-40)])
    top = float(ref.max_finite)
    overflow_tie = float(ref.midpoint_above(ref.max_finite))
    edges = [0.0, -0.0, top, -top, overflow_tie, -overflow_tie, overflow_tie * (1 - 2.0**-40), top * 2]
    return np.concatenate([random, midpoints, nudged, edges])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", FLOATS)
def test_float64_input_matches_exact_rounding(name: str, mode: str) -> None:
    x = mixed_sample(name, seed=len(name) * 7 + len(mode))
    ours = pl.round_to(x, name, rounding=mode)
    assert same_bits(ours, reference(x, name, mode)).all()


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "e3m2"])
def test_float32_input_matches_exact_rounding(name: str) -> None:
    x = mixed_sample(name, seed=3)
    x = x[np.abs(x) < 3e38].astype(np.float32)
    for mode in MODES:
        ours = pl.round_to(x, name, rounding=mode)
        assert same_bits(ours, reference(x.astype(np.float64), name, mode)).all(), mode


@pytest.mark.parametrize("name", ["e5m10b1020", "e10m52b1020", "e3m2b1020", "e4m3b-5"])
def test_custom_biases_far_from_the_default_round_exactly(name: str) -> None:
    # With a bias near 1023 the subnormal quantum is so small that its reciprocal overflows float64.
    x = mixed_sample(name, seed=11)
    for mode in MODES:
        ours = pl.round_to(x, name, rounding=mode)
        assert same_bits(ours, reference(x, name, mode)).all(), mode
    codes = np.arange(min(pl.get_format(name).code_count, 1024), dtype=np.uint64)  # zero and the subnormals
    values = pl.decode(codes, name)
    keep = ~np.isnan(values)
    np.testing.assert_array_equal(pl.encode(values[keep], name), codes[keep])


NO_MANTISSA = ["e7m0fnuz", "e4m0fn", "e3m0finite", "ue4m0fn", "ue5m0b20finite", "ue8m0"]


@pytest.mark.parametrize("name", NO_MANTISSA)
def test_no_mantissa_formats_match_exact_rounding(name: str) -> None:
    """Ties go to the even code (P3109, gfloat); ue8m0 keeps ml_dtypes' ties-up rule (README)."""
    fmt = pl.get_format(name)
    ref = dataclasses.replace(ref_format(fmt), ties_up=name == "ue8m0")
    x = mixed_sample(name, seed=len(name))
    for mode in MODES:
        expected = np.array([ref.round(float(v), mode) for v in x])
        assert same_bits(pl.round_to(x, name, rounding=mode), expected).all(), mode
        x32 = x[np.abs(x) < 3e38].astype(np.float32)
        expected32 = np.array([ref.round(float(v), mode) for v in x32])
        assert same_bits(pl.round_to(x32, name, rounding=mode), expected32).all(), mode


def test_seed_examples_of_single_rounding() -> None:
    assert pl.round_to(1 + 2.0**-8 + 2.0**-40, "bf16") == 1.0078125
    assert pl.round_to(1 + 2.0**-4 + 2.0**-40, "e4m3") == 1.125
    assert pl.round_to(1 + 2.0**-8, "bf16") == 1.0  # the exact tie goes to the even mantissa


def test_nearest_away_is_tf32_rna() -> None:
    tie = 1 + 2.0**-11  # halfway between two tf32 neighbours
    assert pl.round_to(tie, "tf32", rounding="nearest_away") == 1 + 2.0**-10
    assert pl.round_to(tie, "tf32") == 1.0
    assert pl.round_to(-tie, "tf32", rounding="nearest_away") == -(1 + 2.0**-10)


@pytest.mark.parametrize("name", ["fp16", "e4m3", "e5m2", "e2m1", "bf16"])
def test_overflow_policies(name: str) -> None:
    fmt = pl.get_format(name)
    big = np.array([fmt.max_finite * 4, -fmt.max_finite * 4, np.inf, -np.inf, np.nan] if fmt.has_nan
                   else [fmt.max_finite * 4, -fmt.max_finite * 4, np.inf, -np.inf])
    saturated = pl.round_to(big, name, overflow="saturate")
    assert list(saturated[:4]) == [fmt.max_finite, -fmt.max_finite, fmt.max_finite, -fmt.max_finite]
    if fmt.has_nan:
        assert np.isnan(saturated[4])  # NaN stays NaN under saturate
        assert np.isnan(pl.round_to(big, name, overflow="nan")[:4]).all()
    else:
        with pytest.raises(ValueError, match="has no NaN"):
            pl.round_to(big, name, overflow="nan")
    if fmt.has_inf:
        assert list(pl.round_to(big[:2], name)) == [np.inf, -np.inf]
    else:
        with pytest.raises(ValueError, match="no infinity"):
            pl.round_to(big, name, overflow="inf")


def test_default_overflow_follows_the_format() -> None:
    assert pl.round_to(1e6, "fp16") == math.inf
    assert math.isnan(pl.round_to(1e6, "e4m3"))  # NaN but no inf, as ml_dtypes
    assert pl.round_to(1e6, "e2m1") == 6.0  # neither: saturate
    assert pl.round_to(464.0, "e4m3") == 448.0  # the tie above 448 rounds to even 448, not to NaN
    assert math.isnan(pl.round_to(464.01, "e4m3"))
    assert pl.round_to(65519.99, "fp16") == 65504.0 and pl.round_to(65520.0, "fp16") == math.inf


def test_toward_zero_never_overflows_a_finite_value() -> None:
    assert pl.round_to(1e6, "fp16", rounding="toward_zero") == 65504.0
    assert pl.round_to(-1e6, "e4m3", rounding="toward_zero") == -448.0
    assert pl.round_to(math.inf, "fp16", rounding="toward_zero") == math.inf


def test_fnuz_has_no_negative_zero() -> None:
    out = pl.round_to(np.array([-0.0, -1e-9]), "e4m3fnuz")
    assert not np.signbit(out).any()
    assert list(pl.encode(np.array([-0.0, -1e-9]), "e4m3fnuz")) == [0, 0]
    assert np.signbit(pl.round_to(np.array([-1e-9]), "e4m3"))[0]


@pytest.mark.parametrize("name", ["e4m3fnuz", "e5m2fnuz"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fnuz_keeps_the_sign_of_every_nan_payload(name: str, dtype: type[np.floating]) -> None:
    # A payload large enough to carry into the sign bit once read as -0 and lost its sign.
    width, man = (np.uint32, 23) if dtype == np.float32 else (np.uint64, 52)
    total = 8 * np.dtype(width).itemsize
    exponent = ((1 << (total - 1 - man)) - 1) << man
    mantissas = [(1 << man) - 1, (1 << man) - 12345, 1 << (man - 1), 1]
    x = np.array([(1 << (total - 1)) | exponent | m for m in mantissas], dtype=width).view(dtype)
    for _ in range(2):  # the general path, then the fast path
        out = pl.round_to(x, name)
        assert np.isnan(out).all() and np.signbit(out).all()


def test_unsigned_formats_without_nan_saturate_below_their_smallest_value() -> None:
    # ue8m0 gives NaN for 0 and negatives; a format with no NaN code cannot, so it saturates there
    x = np.array([-3.0, -1e-9, -0.0, 0.0, 0.3, 7.0, -np.inf])
    assert list(pl.round_to(x, "ue2m1finite")) == [0.0, 0.0, 0.0, 0.0, 0.5, 6.0, 0.0]
    assert list(pl.round_to(x.astype(np.float32), "ue3m0finite")) == [0.125] * 4 + [0.25, 8.0, 0.125]
    assert list(pl.encode(x, "ue2m1finite")) == [0, 0, 0, 0, 1, 7, 0]
    assert np.isnan(pl.round_to(x, "ue8m0")[:4]).all()


def test_integer_targets_round_and_saturate() -> None:
    x = np.array([0.5, 1.5, 2.5, -2.5, 126.7, 300.0, -300.0, -0.2, np.inf])
    assert list(pl.round_to(x, "int8")) == [0.0, 2.0, 2.0, -2.0, 127.0, 127.0, -128.0, 0.0, 127.0]
    assert list(pl.round_to(x[:4], "int8", rounding="nearest_away")) == [1.0, 2.0, 3.0, -3.0]
    assert list(pl.round_to(np.array([9.0, -9.0, 3.4]), "int4")) == [7.0, -8.0, 3.0]
    assert list(pl.round_to(np.array([-3.0, 20.0]), "uint4")) == [0.0, 15.0]
    with pytest.raises(ValueError, match="int8"):
        pl.round_to(np.array([np.nan]), "int8")
    assert list(pl.encode(np.array([-1.0, -128.0, 127.0]), "int8")) == [0xFF, 0x80, 0x7F]
    assert list(pl.decode(np.array([0xF, 0x8, 0x7]), "int4")) == [-1.0, -8.0, 7.0]


def test_output_type_dtype_and_shape() -> None:
    x16 = np.array([[1.1, 2.2], [3.3, 4.4]], dtype=np.float16)
    assert pl.round_to(x16, "e5m2").dtype == np.float16  # float16 holds every e5m2 value
    assert pl.round_to(x16, "bf16").dtype == np.float32  # but not bf16's range
    assert pl.round_to(x16, "e4m3").shape == (2, 2)
    assert pl.round_to(np.float32(0.1), "bf16").dtype == np.float32
    assert isinstance(pl.round_to(0.1, "bf16"), float)
    assert pl.round_to(np.zeros(3, np.float32), "fp64").dtype == np.float64
    assert pl.round_to(np.zeros((0, 4), np.float32), "e4m3").shape == (0, 4)


@pytest.mark.parametrize("bad", [np.arange(4), np.array([1 + 2j]), np.array([True]), "0.5", [0.5]])
def test_bad_inputs_raise_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        pl.round_to(bad, "e4m3")


def test_bad_modes_and_policies() -> None:
    with pytest.raises(ValueError, match="nearest_even"):
        pl.round_to(1.0, "e4m3", rounding="nearest-even-ish")
    with pytest.raises(ValueError, match="overflow policy"):
        pl.round_to(1.0, "e4m3", overflow="clamp")
    with pytest.raises(TypeError, match="rng"):
        pl.round_to(1.0, "e4m3", rounding="stochastic", rng="seed")  # type: ignore[arg-type]


def test_large_arrays_use_the_chunked_parallel_path_consistently() -> None:
    x = np.random.default_rng(5).standard_normal(3 * (1 << 20) + 17).astype(np.float32) * 100
    for name in ("e4m3", "bf16", "fp16", "e2m1"):
        big = pl.round_to(x, name)
        small = np.concatenate([pl.round_to(part, name) for part in np.array_split(x, 997)])
        assert same_bits(big, small).all()


# --------------------------------------------------------------------------- encode / decode
def test_tf32_codes_are_19_bits() -> None:
    codes = pl.encode(np.array([1.0, -2.0, 0.1]), "tf32")
    assert codes.dtype == np.uint32
    assert codes[0] == 127 << 10  # sign 0, exponent field 127, mantissa 0
    assert codes[1] == (1 << 18) | (128 << 10)
    assert pl.decode(codes, "tf32")[2] == pl.round_to(0.1, "tf32")


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1",
                                  "ue8m0", "e6m9", "e4m3ieee"])
def test_every_code_round_trips(name: str) -> None:
    fmt = pl.get_format(name)
    codes = np.arange(fmt.code_count, dtype=np.uint32)
    values = pl.decode(codes, name)
    finite = np.isfinite(values) | np.isinf(values)
    again = pl.encode(values[finite], name)
    np.testing.assert_array_equal(again, codes[finite])
    assert (np.diff(values[: fmt.code_count // 2][np.isfinite(values[: fmt.code_count // 2])]) > 0).all()


def test_decode_rejects_bad_codes() -> None:
    with pytest.raises(ValueError, match=r"0\.\.255"):
        pl.decode(np.array([256]), "e4m3")
    with pytest.raises(TypeError):
        pl.decode(np.array([1.0]), "e4m3")
    assert pl.decode(0x40, "e4m3") == 2.0 and pl.decode(0x40, "e4m3fnuz") == 1.0


def test_fp32_and_fp64_codes_are_the_ieee_bit_patterns() -> None:
    x = np.array([0.1, -3.4e38, 1e-45], dtype=np.float32)
    np.testing.assert_array_equal(pl.encode(x, "fp32"), x.view(np.uint32))
    y = np.array([0.1, -1e308, 5e-324])
    np.testing.assert_array_equal(pl.encode(y, "fp64"), y.view(np.uint64))
    np.testing.assert_array_equal(pl.decode(y.view(np.uint64), "fp64"), y)


# --------------------------------------------------------------------------- ulp and neighbours
def test_ulp() -> None:
    assert pl.ulp(1.0, "bf16") == 2.0**-7
    assert pl.ulp(1.0, "fp16") == 2.0**-10
    assert pl.ulp(448.0, "e4m3") == 32.0
    assert pl.ulp(0.0, "e4m3") == 2.0**-9  # the subnormal quantum
    assert pl.ulp(1e-3, "e4m3") == 2.0**-9
    assert pl.ulp(32.0, "fp16") == 2.0**-5
    assert math.isnan(pl.ulp(math.inf, "fp16"))
    assert pl.ulp(3.7, "int8") == 1.0


def test_neighbours() -> None:
    assert pl.neighbours(0.1, "bf16") == (0.099609375, 0.10009765625)
    assert pl.neighbours(-0.1, "bf16") == (-0.10009765625, -0.099609375)
    assert pl.neighbours(2.0, "e4m3") == (2.0, 2.0)
    assert pl.neighbours(0.001, "e4m3") == (0.0, 2.0**-9)
    below, above = pl.neighbours(500.0, "e4m3")
    assert below == 448.0 and math.isnan(above)
    assert pl.neighbours(70000.0, "fp16") == (65504.0, math.inf)


def test_neighbours_of_infinity() -> None:
    assert pl.neighbours(math.inf, "fp16") == (math.inf, math.inf)  # inf is an fp16 member
    assert pl.neighbours(-math.inf, "bf16") == (-math.inf, -math.inf)
    below, above = pl.neighbours(math.inf, "e4m3")  # no inf: nothing is >= inf
    assert below == 448.0 and math.isnan(above)
    below, above = pl.neighbours(-math.inf, "e2m1")
    assert math.isnan(below) and above == -6.0
    below, above = pl.neighbours(-math.inf, "ue4m3")  # unsigned: no -inf
    assert math.isnan(below) and above == 0.0


@pytest.mark.parametrize(("name", "negative_zero"), [("e4m3fnuz", False), ("e5m2fnuz", False), ("e4m3", True)])
def test_the_zero_neighbour_of_a_tiny_negative_has_the_formats_sign(name: str, negative_zero: bool) -> None:
    """FNUZ has one, unsigned zero: the upper neighbour of -1e-9 is +0 there, -0 in OCP e4m3."""
    below, above = pl.neighbours(-1e-9, name)
    assert below == -pl.get_format(name).min_subnormal and above == 0.0
    assert math.copysign(1.0, above) == (-1.0 if negative_zero else 1.0)


def _nan_or(values: list[float], pick) -> float:  # type: ignore[no-untyped-def]
    return pick(values) if values else math.nan


@pytest.mark.parametrize("x", [-1.0, -0.0, 0.0, 1e-40, 2.0**-127, 3.0, 2.0**127, 2.0**128])
def test_neighbours_of_ue8m0_from_its_members(x: float) -> None:
    """ue8m0 holds exactly 2^-127 … 2^127: no zero, no negatives, so below 2^-127 nothing is <= x."""
    members = [2.0**k for k in range(-127, 128)]
    expected = (_nan_or([m for m in members if m <= x], max), _nan_or([m for m in members if m >= x], min))
    got = pl.neighbours(x, "ue8m0")
    assert [g if not math.isnan(g) else "nan" for g in got] == [e if not math.isnan(e) else "nan" for e in expected]


# --------------------------------------------------------------------------- properties
finite_doubles = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(x=finite_doubles, name=st.sampled_from(["bf16", "fp16", "e4m3", "e5m2", "e2m1", "e3m2", "tf32"]))
def test_round_is_idempotent_and_within_half_an_ulp(x: float, name: str) -> None:
    fmt = pl.get_format(name)
    once = pl.round_to(x, name, overflow="saturate")
    assert pl.round_to(once, name, overflow="saturate") == once
    if abs(x) <= fmt.max_finite:
        assert abs(Fraction(once) - Fraction(x)) <= Fraction(pl.ulp(x, name)) / 2


@settings(max_examples=300, deadline=None)
@given(a=finite_doubles, b=finite_doubles, name=st.sampled_from(["bf16", "fp16", "e4m3", "e5m2fnuz", "e2m3"]))
def test_round_is_monotonic(a: float, b: float, name: str) -> None:
    lo, hi = min(a, b), max(a, b)
    for mode in MODES:
        r_lo = pl.round_to(lo, name, rounding=mode, overflow="saturate")
        r_hi = pl.round_to(hi, name, rounding=mode, overflow="saturate")
        assert r_lo <= r_hi


@settings(max_examples=200, deadline=None)
@given(x=st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32))
def test_numpy_float16_float32_float64_agree(x: float) -> None:
    for name in ("e4m3", "bf16", "e2m1"):
        r32 = pl.round_to(np.array([x], dtype=np.float32), name)
        r64 = pl.round_to(np.array([x], dtype=np.float64), name)
        assert same_bits(r32, r64).all()


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1", "ue8m0"])
def test_float32_table_path_agrees_with_float64_path_on_random_bit_patterns(name: str) -> None:
    # float32 input to a format of <= 8 bits goes through the 2^17-entry table; float64 input through
    # the bit-arithmetic path. Random bit patterns cover every binade, subnormals, inf and NaN payloads.
    fmt = pl.get_format(name)
    bits = np.random.default_rng(len(name)).integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    for mode in MODES:
        via_table = pl.round_to(x, name, rounding=mode)
        with np.errstate(invalid="ignore"):  # numpy warns when widening signalling NaNs
            wide = x.astype(np.float64)
        via_bits = pl.round_to(wide, name, rounding=mode)
        assert same_bits(via_table, via_bits).all(), mode


# --------------------------------------------------------------------------- wide Python ints
def _ref_int(n: int, name: str, mode: str) -> float:
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    return ref_format(fmt).round(n, mode)


def test_a_wide_int_is_rounded_once() -> None:
    """float(2^60 + 2^52 + 1) is 2^60 + 2^52, an exact bf16 tie that goes down to 2^60; the int itself
    lies just above the tie, so its single rounding is 2^60 + 2^53."""
    n = 2**60 + 2**52 + 1
    assert pl.round_to(n, "bf16") == 2**60 + 2**53 == _ref_int(n, "bf16", "nearest_even")
    assert pl.round_to(float(n), "bf16") == 2**60
    assert pl.neighbours(n, "bf16") == (2.0**60, 2.0**60 + 2**53)
    assert pl.round_to(n, "fp64") == float(n)  # Python's int -> float conversion is the single rounding


@settings(max_examples=300, deadline=None)
@given(n=st.integers(min_value=2**53, max_value=2**300).flatmap(lambda m: st.sampled_from([m, -m])),
       name=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "e4m3", "e5m2", "e8m30", "e11m40"]),
       mode=st.sampled_from(MODES))
def test_wide_ints_round_once_like_exact_arithmetic(n: int, name: str, mode: str) -> None:
    assert same_bits(np.array([pl.round_to(n, name, rounding=mode)]), np.array([_ref_int(n, name, mode)])).all()


@pytest.mark.parametrize(("name", "mode"),
                         [("fp64", "toward_zero"), ("e11m51", "nearest_even"), ("bf16", "stochastic")])
def test_a_wide_int_that_cannot_be_rounded_once_is_refused(name: str, mode: str) -> None:
    with pytest.raises(ValueError, match="more significant bits than float64"):
        pl.round_to(2**60 + 1, name, rounding=mode, rng=0)
    assert pl.round_to(2**60, name, rounding=mode, rng=0) == 2.0**60  # exact in float64: no problem
