"""numerics' TwoSum / round-to-odd (rounding.exact_sum), grid and accumulate against an
exact rational model written here from the definitions (value = k·2^(e-M), nearest-even),
sharing no code with the fast paths."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.numerics import (
    accumulate,
    add_rounded,
    kahan_sum,
    make_grid,
    pairwise_sum,
    round_grid,
    round_to_odd,
    sequential_dot,
    sequential_sum,
    two_sum,
)
from precisionlab.numerics.grid import scalar_rounder

from .reference import round_rational

# (M, emin, max finite, overflow value) straight from each format's definition (seed table).
SPECS = {
    "fp16": (10, -14, Fraction(65504), math.inf),
    "bf16": (7, -126, (2 - Fraction(1, 2**7)) * Fraction(2) ** 127, math.inf),
    "fp32": (23, -126, (2 - Fraction(1, 2**23)) * Fraction(2) ** 127, math.inf),
    "tf32": (10, -126, (2 - Fraction(1, 2**10)) * Fraction(2) ** 127, math.inf),
    "e5m2": (2, -14, Fraction(57344), math.inf),
    "e4m3": (3, -6, Fraction(448), math.nan),
    "e4m3fnuz": (3, -7, Fraction(240), math.nan),
    "e2m1": (1, 0, Fraction(6), 6.0),
    "e8m30": (30, -126, (2 - Fraction(1, 2**30)) * Fraction(2) ** 127, math.inf),  # p = 31: TwoSum everywhere
}


def ref_sequential(terms: list[float], name: str) -> float:
    s = Fraction(0)
    for t in terms:
        s = Fraction(round_rational(s + Fraction(t), name))
    return float(s)


def ref_kahan(terms: list[float], name: str) -> float:
    s, c = Fraction(0), Fraction(0)
    for t in terms:
        y = Fraction(round_rational(Fraction(t) - c, name))
        u = Fraction(round_rational(s + y, name))
        c = Fraction(round_rational(Fraction(round_rational(u - s, name)) - y, name))
        s = u
    return float(s)


def ref_pairwise(terms: list[float], name: str) -> float:
    level = [Fraction(t) for t in terms]
    while len(level) > 1:
        pairs = [Fraction(round_rational(level[i] + level[i + 1], name)) for i in range(0, len(level) - 1, 2)]
        level = pairs + (level[-1:] if len(level) % 2 else [])
    return float(level[0])


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


# --- exact.py -------------------------------------------------------------------------------------


def test_two_sum_is_exact_and_round_to_odd_has_odd_last_bit() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(500) * 2.0 ** rng.integers(-40, 40, 500)
    b = rng.standard_normal(500) * 2.0 ** rng.integers(-40, 40, 500)
    hi, lo = two_sum(a, b)
    for x, y, h, low in zip(a, b, hi, lo, strict=True):
        assert Fraction(h) + Fraction(low) == Fraction(x) + Fraction(y)
    z = round_to_odd(hi, lo)
    inexact = lo != 0
    assert np.all((z.view(np.int64)[inexact] & 1) == 1)
    for x, y, v, flag in zip(a, b, z, inexact, strict=True):
        exact = Fraction(x) + Fraction(y)
        if flag:  # truncated toward zero, then made odd: |z| just below or above? never beyond the next float
            assert abs(Fraction(v) - exact) < abs(Fraction(np.spacing(v)))
        else:
            assert Fraction(v) == exact


# --- grid.py --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPECS))
def test_round_grid_matches_exact_rationals(name: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(3000) * 2.0 ** rng.integers(-30, 30, 3000)
    got = round_grid(x, make_grid(name))
    for value, r in zip(x.tolist(), got.tolist(), strict=True):
        assert same(r, round_rational(Fraction(value), name)), (name, value, r)


@pytest.mark.parametrize("name", ["fp16", "bf16", "e4m3", "e5m2", "e4m3fnuz"])
def test_round_grid_matches_ml_dtypes_on_float32_input(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz}[name]
    rng = np.random.default_rng(3)
    # float32 input: a single rounding in ml_dtypes too (no double rounding through float32)
    x = (rng.standard_normal(20000) * 2.0 ** rng.integers(-20, 20, 20000)).astype(np.float32)
    with np.errstate(over="ignore"):
        theirs = x.astype(dtype).astype(np.float64)
    ours = round_grid(x.astype(np.float64), make_grid(name))
    assert np.array_equal(ours, theirs, equal_nan=True)


def test_lanes_round_each_to_its_own_format() -> None:
    grid = make_grid(["fp16", "bf16"], lane_ndim=1)
    x = np.array([[1 + 2.0**-9, 70000.0], [1 + 2.0**-9, 70000.0]])
    got = round_grid(x, grid)
    assert got[0].tolist() == [1 + 2.0**-9, math.inf]  # fp16 keeps 2^-9 (M=10), overflows at 65520
    assert got[1].tolist() == [1.0, 70144.0]  # bf16: spacing 2^-7 near 1 (tie to even), 2^9 near 7e4


def test_grid_rejects_formats_it_cannot_emulate() -> None:
    for bad in ("fp64", "int8", "ue8m0"):
        with pytest.raises(ValueError):
            make_grid(bad)


# --- accumulate.py ---------------------------------------------------------------------------------


def random_terms(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.random(n).astype(np.float32).astype(np.float64)
    y = rng.uniform(-1, 1, n).astype(np.float32).astype(np.float64)
    return x * y  # exact products with up to 48 significant bits: rarely members of any narrow format


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32", "e5m2", "tf32"])
def test_sequential_sum_rounds_each_addition_once(name: str) -> None:
    terms = random_terms(300, 4)
    assert sequential_sum(terms, name) == ref_sequential(terms.tolist(), name)


def test_cumulative_gives_every_partial_sum_and_lanes_match_single_runs() -> None:
    terms = random_terms(120, 5)
    lanes = sequential_sum(terms, ["fp16", "bf16", "fp32", "fp64"], cumulative=True)
    assert lanes.shape == (4, 120)
    for index, name in enumerate(["fp16", "bf16", "fp32"]):
        assert lanes[index, 59] == ref_sequential(terms[:60].tolist(), name)
        assert lanes[index, -1] == sequential_sum(terms, name)
    running = 0.0
    for k, t in enumerate(terms.tolist()):  # fp64: plain float64 addition, in order
        running += t
        assert lanes[3, k] == running


def test_native_fp16_path_equals_exact_emulation() -> None:
    terms = np.random.default_rng(6).random(400).astype(np.float16).astype(np.float64)  # members: native path
    assert sequential_sum(terms, "fp16") == ref_sequential(terms.tolist(), "fp16")
    assert sequential_sum(terms, "fp32") == ref_sequential(terms.tolist(), "fp32")


def test_batch_axes_are_independent_lanes() -> None:
    terms = np.stack([random_terms(50, 7), random_terms(50, 8)])
    got = sequential_sum(terms, "bf16")
    assert got.tolist() == [ref_sequential(row.tolist(), "bf16") for row in terms]
    assert sequential_sum(terms.T, "bf16", axis=0).tolist() == got.tolist()


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_kahan_matches_exact_model(name: str) -> None:
    terms = random_terms(200, 9)
    assert kahan_sum(terms, name) == ref_kahan(terms.tolist(), name)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 101])
def test_pairwise_matches_exact_model(n: int) -> None:
    terms = random_terms(n, 10)
    for name in ("fp16", "bf16"):
        assert pairwise_sum(terms, name) == ref_pairwise(terms.tolist(), name)
    fp32_terms = terms.astype(np.float32).astype(np.float64)  # members of fp32: numpy's own float32 path
    assert pairwise_sum(fp32_terms, "fp32") == ref_pairwise(fp32_terms.tolist(), "fp32")


def test_kahan_and_pairwise_beat_sequential_in_fp16() -> None:
    terms = np.random.default_rng(11).random(4096) * 0.5  # positive: sequential fp16 error grows with n
    exact = math.fsum(terms)
    seq = abs(sequential_sum(terms, "fp16") - exact)
    assert abs(kahan_sum(terms, "fp16") - exact) < seq / 10
    assert abs(pairwise_sum(terms, "fp16") - exact) < seq / 10


def test_sequential_dot_uses_exact_products() -> None:
    rng = np.random.default_rng(12)
    x, y = rng.random(100).astype(np.float32), rng.random(100).astype(np.float32)
    expected = ref_sequential([float(Fraction(float(a)) * Fraction(float(b))) for a, b in zip(x, y, strict=True)],
                              "fp16")
    assert sequential_dot(x, y, "fp16") == expected
    with pytest.raises(ValueError, match="26 significand bits"):
        sequential_dot(np.array([1 / 3]), np.array([1.0]), "fp16")


def test_add_rounded_single_rounding_where_float64_sum_is_inexact() -> None:
    # a bf16 midpoint plus a tiny term: float64 drops the tiny part (a tie), the exact sum is above the tie
    a = np.float64(2.0**30 * (1 + 2.0**-8))
    b = np.float64(2.0**-30)
    got = float(add_rounded(a, b, make_grid("bf16")))
    assert got == round_rational(Fraction(float(a)) + Fraction(float(b)), "bf16") == 2.0**30 * (1 + 2.0**-7)
    assert float(pl.round_to(float(a + b), "bf16")) == 2.0**30  # rounding the float64 sum double-rounds


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        sequential_sum(np.float64(1.0), "fp16")
    with pytest.raises(ValueError):
        pairwise_sum(np.array([]), "fp16")
    with pytest.raises(ValueError):
        sequential_sum(np.ones(3), [])
    with pytest.raises(ValueError, match="unknown format"):
        sequential_sum(np.ones(3), "fp17")


# --- the Python-float loops (few series) against the exact model and the numpy loops ------------------


def ref_add(a: float, b: float, name: str) -> float:
    """fl(a + b) from the exact rational sum; a non-finite operand gives the IEEE float result, then the
    format's overflow policy (inf becomes its overflow value)."""
    v = a + b
    if math.isfinite(a) and math.isfinite(b):
        exact = Fraction(a) + Fraction(b)
        if exact == 0:  # IEEE: -0 only for -0 + -0; fnuz formats have no -0
            return 0.0 if name.endswith("fnuz") else v
        return round_rational(exact, name)
    overflow = SPECS[name][3]
    return math.copysign(overflow, v) if math.isinf(v) and not math.isnan(overflow) else (
        math.nan if math.isinf(v) else v)


def ref_sequential_partials(terms: list[float], name: str) -> list[float]:
    s, out = 0.0, []
    for t in terms:
        s = ref_add(s, t, name)
        out.append(s)
    return out


def ref_kahan_partials(terms: list[float], name: str) -> list[float]:
    s = c = 0.0
    out = []
    for t in terms:
        y = ref_add(t, -c, name)
        u = ref_add(s, y, name)
        c = ref_add(ref_add(u, -s, name), -y, name)
        s = u
        out.append(s)
    return out


def hazard_terms(name: str, n: int, seed: int) -> np.ndarray:
    """Terms around the format's subnormal range, its max_finite (overflow partway) and ties."""
    man_bits, emin, max_finite, _ = SPECS[name]
    rng = np.random.default_rng(seed)
    tiny = rng.standard_normal(n) * 2.0 ** (emin - man_bits + rng.integers(-3, man_bits + 3, n))
    big = rng.uniform(-0.2, 0.6, n) * float(max_finite)
    ties = (rng.integers(1, 2**man_bits, n) + 0.5) * 2.0 ** (emin - man_bits)  # midpoints of the format
    pick = rng.integers(0, 4, n)
    return np.choose(pick, [tiny, big, ties, random_terms(n, seed)])


def bits(a: np.ndarray) -> np.ndarray:
    """The float64 bit patterns, every NaN as one canonical NaN: which sign and payload inf - inf
    gets depends on the instruction that made it (numpy 2.2 and 2.4 differ), not on the format."""
    canonical = np.where(np.isnan(a), np.nan, np.asarray(a, dtype=np.float64))
    return np.ascontiguousarray(canonical, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_scalar_rounder_matches_exact_rationals(name: str) -> None:
    man_bits, emin, _, _ = SPECS[name]
    rng = np.random.default_rng(20)
    a = np.concatenate([rng.standard_normal(1500) * 2.0 ** rng.integers(-30, 30, 1500),
                        hazard_terms(name, 1500, 21), [0.0, -0.0, math.inf, -math.inf]])
    b = np.concatenate([rng.standard_normal(1500) * 2.0 ** rng.integers(-60, 30, 1500),
                        rng.standard_normal(1500) * 2.0 ** (emin - man_bits - 30), [-0.0, -0.0, 1.0, 1.0]])
    with np.errstate(invalid="ignore"):  # TwoSum's low part of inf + 1 is NaN (and unused: hi is inf)
        hi, lo = two_sum(a, b)
    fl = scalar_rounder(name)
    for x, y, h, low in zip(a.tolist(), b.tolist(), hi.tolist(), lo.tolist(), strict=True):
        assert same(fl(h, low), ref_add(x, y, name)), (name, x, y)
        assert same(fl(x, 0.0), ref_add(x, -0.0, name)), (name, x)  # x + -0 is x, signed zeros too
    assert same(fl(math.nan, 0.0), math.nan)


def test_scalar_rounder_breaks_a_float64_tie_by_the_low_part() -> None:
    fl = scalar_rounder("bf16")
    a, b = 2.0**30 * (1 + 2.0**-8), 2.0**-30  # a is a bf16 midpoint; float64 drops b
    assert fl(a + b, b) == 2.0**30 * (1 + 2.0**-7)
    assert fl(a - b, -b) == 2.0**30
    assert fl(a, 0.0) == 2.0**30  # a true tie: to even
    half_subnormal = 2.0**-25  # fp16: midway between 0 and its smallest subnormal 2^-24
    fp16 = scalar_rounder("fp16")
    assert fp16(half_subnormal, 2.0**-80) == 2.0**-24 and fp16(half_subnormal, 0.0) == 0.0
    assert same(fp16(-half_subnormal, 2.0**-80), -0.0)
    assert math.isinf(fp16(65520.0, 0.0)) and fp16(65520.0, -1e-9) == 65504.0  # the overflow tie
    assert scalar_rounder("e8m30")(float(np.nextafter(np.inf, 0)), 0.0) == math.inf  # rounds past 2^1024


@pytest.mark.parametrize("name", sorted(SPECS))
def test_few_series_loops_match_exact_model_and_numpy_loops(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    terms = hazard_terms(name, 400, 22)
    fast_seq = sequential_sum(terms, name, cumulative=True)
    fast_kahan = kahan_sum(terms, name, cumulative=True)
    for got, want in zip(fast_seq.tolist(), ref_sequential_partials(terms.tolist(), name), strict=True):
        assert same(got, want), name
    for got, want in zip(fast_kahan.tolist(), ref_kahan_partials(terms.tolist(), name), strict=True):
        assert same(got, want), name
    monkeypatch.setattr(accumulate, "SCALAR_SERIES", 0)  # the numpy loops: bit for bit the same, NaN where NaN
    assert np.array_equal(bits(sequential_sum(terms, name, cumulative=True)), bits(fast_seq))
    assert np.array_equal(bits(kahan_sum(terms, name, cumulative=True)), bits(fast_kahan))


def test_few_series_overflow_keeps_lane_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    terms = np.full(64, 3000.0) + random_terms(64, 23)  # fp16 overflows near step 22
    lanes = ["fp16", "bf16", "e4m3", "e2m1"]
    seq = sequential_sum(terms, lanes, cumulative=True)
    kahan = kahan_sum(terms, lanes, cumulative=True)
    assert math.isinf(seq[0, -1]) and math.isnan(kahan[0, -1])  # inf, then inf - inf in the compensation
    assert math.isfinite(seq[1, -1]) and math.isnan(seq[2, -1]) and seq[3, -1] == 6.0
    monkeypatch.setattr(accumulate, "SCALAR_SERIES", 0)
    assert np.array_equal(bits(sequential_sum(terms, lanes, cumulative=True)), bits(seq))
    assert np.array_equal(bits(kahan_sum(terms, lanes, cumulative=True)), bits(kahan))


@pytest.mark.parametrize("cumulative", [False, True])
def test_few_series_batch_shapes_match_numpy_loops(cumulative: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    terms = np.stack([random_terms(30, seed) for seed in range(24, 30)]).reshape(2, 3, 30)
    fast = [sequential_sum(terms, ["bf16"], axis=-1, cumulative=cumulative),
            kahan_sum(terms.transpose(2, 0, 1), "fp16", axis=0, cumulative=cumulative),
            kahan_sum(np.empty((2, 0)), ["fp16", "bf16"], cumulative=cumulative)]
    monkeypatch.setattr(accumulate, "SCALAR_SERIES", 0)
    slow = [sequential_sum(terms, ["bf16"], axis=-1, cumulative=cumulative),
            kahan_sum(terms.transpose(2, 0, 1), "fp16", axis=0, cumulative=cumulative),
            kahan_sum(np.empty((2, 0)), ["fp16", "bf16"], cumulative=cumulative)]
    for f, s in zip(fast, slow, strict=True):
        assert f.shape == s.shape and np.array_equal(bits(f), bits(s))
