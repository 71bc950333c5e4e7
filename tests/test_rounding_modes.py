"""The directed modes (toward_positive, toward_negative), to_odd, the saturate_propagate policy, P3109's
names for modes and policies, and nan_code: against the exact rational reference (tests/reference.py),
numbers derived from the standards' definitions, and the round-to-odd double-rounding theorem."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import precisionlab as pl
from precisionlab.formats import FloatFormat, Overflow

from .reference import NEW_MODES, ref_format, same_bits

SIGNED = ["fp32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1", "e6m9",
          "e4m3ieee", "binary8p3se", "binary8p4se", "binary8p1se", "binary8p7sf", "binary4p2sf", "binary10p4se",
          "binary16p11se", "e7m0fnuz", "e4m0fn", "e3m0finite"]
UNSIGNED = ["ue8m0", "binary8p1ue", "binary8p3uf", "binary8p8uf", "binary8p8ue", "binary3p1ue", "ue2m1finite",
            "ue4m0fn", "binary12p9ue"]
POLICIES = [None, "saturate", "saturate_propagate"]


def reference(x: np.ndarray, name: str, mode: str, overflow: str | None = None) -> np.ndarray:
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    ref = dataclasses.replace(ref_format(fmt), ties_up=name == "ue8m0")
    return np.array([ref.round(float(v), mode, overflow) for v in x])


def sample(name: str, seed: int, signs: tuple[float, ...] = (-1.0, 1.0)) -> np.ndarray:
    """Random magnitudes over the whole range, every kind of grid point from the reference (members,
    midpoints, the top, the grid point past the top), each nudged by 2^-40 either way, and specials."""
    ref = ref_format(pl.get_format(name))
    rng = np.random.default_rng(seed)
    lo, hi = math.log2(ref.min_positive) - 2, math.log2(ref.max_finite) + 1.5
    random = np.exp2(rng.uniform(lo, hi, 120))
    members = np.array([float(ref.neighbours(float(v))[0]) for v in random if v <= ref.max_finite])
    mids = np.array([float(ref.midpoint_above(Fraction(v))) for v in random])
    top = float(ref.max_finite)
    beyond = float(ref.midpoint_above(ref.max_finite) * 2 - ref.max_finite)  # the grid point above the top
    base = np.concatenate([random, members, mids, [top, beyond, top * 3, float(ref.min_positive) / 3]])
    nudged = np.concatenate([base, base * (1 + 2.0**-40), base * (1 - 2.0**-40)])
    signed = np.concatenate([s * nudged for s in signs])
    return np.concatenate([signed, [0.0, -0.0, np.inf, -np.inf]])


@pytest.mark.parametrize("mode", NEW_MODES)
@pytest.mark.parametrize("name", SIGNED + UNSIGNED)
def test_new_modes_match_exact_rounding(name: str, mode: str) -> None:
    x = sample(name, seed=len(name) + len(mode))
    ours = pl.round_to(x, name, rounding=mode)
    expected = reference(x, name, mode)
    bad = ~same_bits(ours, expected)
    assert not bad.any(), (x[bad][:4], ours[bad][:4], expected[bad][:4])
    x32 = x[np.abs(x) < 3e38].astype(np.float32)
    ours32 = pl.round_to(x32, name, rounding=mode)
    assert same_bits(ours32, reference(x32.astype(np.float64), name, mode)).all()


def edges(name: str) -> np.ndarray:
    """Where the overflow policy acts: around the top, past it, the infinities, and (for unsigned formats)
    the negatives that round to zero and those that do not."""
    ref = ref_format(pl.get_format(name))
    top, tiny = float(ref.max_finite), float(ref.min_positive)
    beyond = float(ref.midpoint_above(ref.max_finite) * 2 - ref.max_finite)
    base = np.array([top, top * (1 + 2.0**-30), (top + beyond) / 2, beyond, beyond * 1.5, top * 8, 1.0, tiny / 3,
                     tiny * 0.75])
    return np.concatenate([base, -base, [np.inf, -np.inf, 0.0, -0.0]])


def _policies(name: str) -> list[str]:
    fmt = pl.get_format(name)
    return ["saturate", "saturate_propagate", "SatNone"] + ["inf"] * fmt.has_inf + ["nan"] * fmt.has_nan


@pytest.mark.parametrize(("name", "overflow"), [(n, p) for n in SIGNED + UNSIGNED for p in _policies(n)])
def test_every_mode_and_policy_at_the_edges_matches_exact_rounding(name: str, overflow: str) -> None:
    x = edges(name)
    policy = None if overflow == "SatNone" else overflow
    for mode in (*NEW_MODES, "nearest_even", "nearest_away", "toward_zero"):
        ours = pl.round_to(x, name, rounding=mode, overflow=overflow)
        expected = reference(x, name, mode, policy)
        bad = ~same_bits(ours, expected)
        assert not bad.any(), (mode, x[bad][:4], ours[bad][:4], expected[bad][:4])


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "bf16", "fp16", "binary8p3se", "binary8p1ue", "e5m2fnuz"])
def test_new_modes_on_torch_tensors_take_the_exact_engine(name: str) -> None:
    """torch's own cast rounds to nearest even only: every other mode must come from the engine."""
    torch = pytest.importorskip("torch")
    x = sample(name, seed=5)
    x = x[np.abs(x) < 3e38]
    for mode in (*NEW_MODES, "toward_zero"):
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            t = torch.from_numpy(x).to(dtype)
            host = t.to(torch.float64).numpy()
            ours = pl.round_to(t, name, rounding=mode)
            assert ours.dtype in (dtype, torch.float32, torch.float64)
            expected = reference(host, name, mode)
            assert same_bits(ours.to(torch.float64).numpy(), expected).all(), (mode, dtype)


@pytest.mark.parametrize("name", ["e4m3", "e2m1", "ue8m0", "binary8p3se", "binary8p1ue", "binary8p7sf", "binary4p2uf"])
def test_float32_table_path_agrees_with_float64_path_in_the_new_modes(name: str) -> None:
    fmt = pl.get_format(name)
    bits = np.random.default_rng(len(name)).integers(0, 2**32, 1 << 17, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    with np.errstate(invalid="ignore"):  # numpy warns when widening signalling NaNs
        wide = x.astype(np.float64)
    for mode in NEW_MODES:
        for overflow in POLICIES:
            via_table = pl.round_to(x, name, rounding=mode, overflow=overflow)
            assert same_bits(via_table, pl.round_to(wide, name, rounding=mode, overflow=overflow)).all(), mode


def test_directed_modes_by_hand() -> None:
    # e4m3 around 1: 1, 1.125; around -1: -1.125, -1; 0.3 between 0.28125 and 0.3125
    x = np.array([1.05, -1.05, 0.3, -0.3, 1.0, 2.0**-12, -(2.0**-12)])
    assert list(pl.round_to(x, "e4m3", rounding="toward_positive")) == [1.125, -1.0, 0.3125, -0.28125, 1.0,
                                                                         2.0**-9, -0.0]
    assert list(pl.round_to(x, "e4m3", rounding="toward_negative")) == [1.0, -1.125, 0.28125, -0.3125, 1.0,
                                                                         0.0, -(2.0**-9)]
    # IEEE 754: rounding toward +inf never turns a finite negative into -inf, nor toward -inf a positive
    assert list(pl.round_to(np.array([1e6, -1e6]), "fp16", rounding="toward_positive")) == [math.inf, -65504.0]
    assert list(pl.round_to(np.array([1e6, -1e6]), "fp16", rounding="toward_negative")) == [65504.0, -math.inf]
    assert list(pl.round_to(np.array([math.inf, -math.inf]), "fp16", rounding="toward_negative")) == [math.inf,
                                                                                                       -math.inf]


def test_to_odd_by_hand() -> None:
    # e4m3 codes: 1.0 = 0x38 (even), 1.125 = 0x39 (odd), 1.25 = 0x3A (even)
    x = np.array([1.0, 1.01, 1.125, 1.2, 1.24, 1.26, -1.01, 2.0**-12])
    assert list(pl.round_to(x, "e4m3", rounding="to_odd")) == [1.0, 1.125, 1.125, 1.125, 1.125, 1.375, -1.125,
                                                               2.0**-9]
    # No mantissa: the odd code is the odd biased exponent. e7m0fnuz (bias 64): 1 = 0x40, 2 = 0x41.
    assert list(pl.round_to(np.array([1.5, 2.5, 3.0]), "e7m0fnuz", rounding="to_odd")) == [2.0, 2.0, 2.0]


@settings(max_examples=300, deadline=None)
@given(x=st.floats(min_value=-6e4, max_value=6e4, allow_nan=False, allow_subnormal=True))
def test_to_odd_then_nearest_is_one_rounding_to_nearest(x: float) -> None:
    """Boldo and Melquiond: rounding to odd at p + 2 bits (same exponent range) and then to nearest even at
    p bits gives the single rounding to nearest. e5m4 -> e5m2, and binary8p3 through a 2-bit-wider grid."""
    via_odd = pl.round_to(pl.round_to(x, "e5m4", rounding="to_odd"), "e5m2")
    assert same_bits(np.array([via_odd]), np.array([pl.round_to(x, "e5m2")])).all()
    wide = pl.get_format("e5m4fnuzinf", bias=16)  # binary8p3se's exponents with two more mantissa bits
    via_odd = pl.round_to(pl.round_to(x, wide, rounding="to_odd"), "binary8p3se")
    assert same_bits(np.array([via_odd]), np.array([pl.round_to(x, "binary8p3se")])).all()


def test_new_modes_on_integer_formats() -> None:
    x = np.array([2.5, -2.5, 3.2, -3.2, 4.0, 200.0, -200.0, -0.2, 0.2])
    assert list(pl.round_to(x, "int8", rounding="toward_positive")) == [3, -2, 4, -3, 4, 127, -128, 0, 1]
    assert list(pl.round_to(x, "int8", rounding="toward_negative")) == [2, -3, 3, -4, 4, 127, -128, -1, 0]
    assert list(pl.round_to(x, "int8", rounding="to_odd")) == [3, -3, 3, -3, 4, 127, -128, -1, 1]
    assert list(pl.encode(np.array([-0.5]), "int4", rounding="toward_negative")) == [0xF]  # -1


# --------------------------------------------------------------------------- names and policies
@pytest.mark.parametrize(("alias", "mode"), [
    ("TowardPositive", "toward_positive"), ("roundTowardNegative", "toward_negative"), ("ToOdd", "to_odd"),
    ("rp", "toward_positive"), ("rm", "toward_negative"), ("ceil", "toward_positive"), ("floor", "toward_negative"),
    ("rto", "to_odd"), ("NearestTiesToEven", "nearest_even"), ("NearestTiesToAway", "nearest_away"),
    ("TowardZero", "toward_zero")])
def test_mode_aliases(alias: str, mode: str) -> None:
    x = np.array([0.3, -0.3, 1.0625, 1e6])
    assert same_bits(pl.round_to(x, "e4m3", rounding=alias), pl.round_to(x, "e4m3", rounding=mode)).all()


def test_p3109_saturation_names_map_onto_the_policies() -> None:
    """The draft's Saturate step: SatFinite clamps everything, ±inf included, to ±M_hi; SatPropagate clamps
    finite values and keeps ±inf where the format has it (M_hi where it has none); SatNone (OvfInf in the
    interim reports) gives ±inf where the format has it, else NaN: the format's default."""
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan])
    for name, top in (("binary8p3se", 49152.0), ("binary8p3sf", 57344.0), ("e4m3", 448.0), ("fp16", 65504.0)):
        fmt = pl.get_format(name)
        inf = math.inf if fmt.has_inf else top
        assert same_bits(pl.round_to(x, name, overflow="SatFinite"), [top, -top, top, -top, np.nan]).all()
        assert same_bits(pl.round_to(x, name, overflow="SatPropagate"), [top, -top, inf, -inf, np.nan]).all()
        for name_of_default in ("SatNone", "OvfInf", None):
            expected = [math.inf, -math.inf] * 2 if fmt.has_inf else [np.nan] * 4
            assert same_bits(pl.round_to(x, name, overflow=name_of_default), [*expected, np.nan]).all()
    assert pl.round_to(1e6, "e2m1", overflow="SatPropagate") == 6.0  # no inf, no NaN: saturate either way


def test_saturate_propagate_is_an_overflow_policy() -> None:
    assert pl.Overflow("saturate_propagate") is Overflow.SATURATE_PROPAGATE
    t = pytest.importorskip("torch").tensor([1e6, float("inf"), -float("inf")])
    assert pl.round_to(t, "e5m2", overflow="saturate_propagate").tolist() == [57344.0, math.inf, -math.inf]
    assert pl.round_to(t, "e4m3", overflow="saturate_propagate").tolist() == [448.0, 448.0, -448.0]
    assert pl.round_to(np.array([300.0]), "int8", overflow="saturate_propagate")[0] == 127
    with pytest.raises(ValueError, match="unknown overflow policy"):
        pl.round_to(1.0, "e4m3", overflow="satprop")


# --------------------------------------------------------------------------- NaN codes
# canonical: the quiet NaN (IEEE 754: the top trailing-significand bit set) with the value's sign, OCP's
# all-ones code with the sign, FNUZ's single 0x80; all_ones: 2^bits - 1 where that code is a NaN.
NAN_CODES = [
    ("e5m2", 0x7E, 0xFE, 0xFF), ("fp16", 0x7E00, 0xFE00, 0xFFFF), ("bf16", 0x7FC0, 0xFFC0, 0xFFFF),
    ("fp32", 0x7FC00000, 0xFFC00000, 0xFFFFFFFF),
    ("fp64", 0x7FF8000000000000, 0xFFF8000000000000, (1 << 64) - 1), ("e4m3", 0x7F, 0xFF, 0xFF),
    ("e4m3fnuz", 0x80, 0x80, 0x80),
    ("ue8m0", 0xFF, 0xFF, 0xFF),
    # P3109: the negative-zero code when signed, the all-ones code when unsigned, in both domains
    ("binary8p3se", 0x80, 0x80, 0x80), ("binary8p4sf", 0x80, 0x80, 0x80), ("binary8p1ue", 0xFF, 0xFF, 0xFF),
    ("binary8p3uf", 0xFF, 0xFF, 0xFF), ("binary10p4se", 0x200, 0x200, 0x200), ("binary6p6ue", 0x3F, 0x3F, 0x3F),
]


@pytest.mark.parametrize(("name", "positive", "negative", "all_ones"), NAN_CODES)
def test_nan_codes(name: str, positive: int, negative: int, all_ones: int) -> None:
    x = np.array([np.nan, -np.nan])
    assert list(pl.encode(x, name)) == [positive, negative]
    assert list(pl.encode(x, name, nan_code="canonical")) == [positive, negative]
    assert list(pl.encode(x, name, nan_code="all_ones")) == [all_ones, all_ones]
    assert all(np.isnan(pl.decode(np.array([positive, negative, all_ones], dtype=np.uint64), name)))


def test_the_64_bit_all_ones_nan_code_fits_its_code_array() -> None:
    # 2^64 - 1 does not fit the int64 work array: it raised OverflowError
    assert pl.encode(math.nan, "fp64", nan_code="all_ones") == (1 << 64) - 1
    assert pl.encode(np.float64(-np.nan), "fp64", nan_code="all_ones") == (1 << 64) - 1
    codes = pl.encode(np.array([np.nan, 1.0, -np.inf]), "fp64", nan_code="all_ones")
    assert codes.dtype == np.uint64 and list(codes) == [(1 << 64) - 1, 0x3FF0000000000000, 0xFFF0000000000000]
    assert np.isnan(pl.decode(codes[:1], "fp64")).all()
    torch = pytest.importorskip("torch")
    tensor = pl.encode(torch.tensor([math.nan, -math.nan], dtype=torch.float64), "fp64", nan_code="all_ones")
    assert tensor.dtype == torch.uint64 and list(tensor.numpy()) == [(1 << 64) - 1] * 2


def test_nan_code_is_checked_and_overflow_nans_take_it() -> None:
    with pytest.raises(ValueError, match="nan_code must be one of canonical, all_ones"):
        pl.encode(1.0, "e4m3", nan_code="quiet")
    assert list(pl.encode(np.array([1e6, -1e6]), "e4m3", nan_code="all_ones")) == [0xFF, 0xFF]
    assert list(pl.encode(np.array([1e6, -1e6]), "e4m3")) == [0x7F, 0xFF]


# --------------------------------------------------------------------------- P3109 formats around the API
def test_extended_formats_encode_infinity_below_the_nan() -> None:
    assert list(pl.encode(np.array([np.inf, -np.inf, 1e9]), "binary8p3se")) == [0x7F, 0xFF, 0x7F]
    assert list(pl.encode(np.array([np.inf, 1e40]), "binary8p1ue")) == [0xFE, 0xFE]
    assert list(pl.encode(np.array([np.inf]), "binary8p3se", overflow="saturate")) == [0x7E]
    assert pl.neighbours(49152.0, "binary8p3se") == (49152.0, 49152.0)
    assert pl.neighbours(50000.0, "binary8p3se") == (49152.0, math.inf)
    assert pl.neighbours(-50000.0, "binary8p3se") == (-math.inf, -49152.0)
    assert pl.neighbours(2.5, "binary8p8ue") == (1.9765625, math.inf)
