"""Stochastic rounding: round on the grid with the exponent unbounded above, then the overflow policy.

A value x between grid neighbours lo < hi rounds up with probability p = (x - lo) / (hi - lo), so
the number of round-ups among n independent roundings is Binomial(n, p), and E[round(x)] = x inside
±max_finite. The grid goes on past max_finite (its binade continues, then the next ones), so just
past the top hi is the grid point above max_finite: x rounds down to max_finite with probability
1 - p and up with probability p, and a result past max_finite is an overflow, which the policy
decides (saturate: ±max_finite; inf: ±inf; nan: NaN): the two steps of P3109's Project and of every
deterministic mode. In binary8p4se (max 224, next grid point 240) 230 gives +inf with p = 6/16.
The grid neighbours come from exact rationals here and the overflow values from the exact
reference (tests/reference.py), never from precisionlab.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl

from .reference import RefFormat, binomial_interval, floor_log2, pow2, ref_format, same_bits

N = 200_000
ALPHA = 1e-9
"""Each count must fall inside the binomial's central 1 - 1e-9 interval: a correct engine fails
one of these cases about once in 10^8 runs, and the seeds are fixed anyway."""

INSIDE = [
    ("e4m3", 0.3), ("e4m3", -0.3), ("e4m3", 440.0), ("e4m3", -447.0), ("e4m3", 0.001),
    ("bf16", 1.0 + 2.0**-9 + 2.0**-11), ("bf16", -3.0e38), ("fp16", 1e-6), ("fp16", 65500.0), ("fp16", -65503.0),
    ("e2m1", 0.2), ("e2m1", 5.5), ("e5m2fnuz", 57000.0), ("e7m0fnuz", 3.0), ("e7m0fnuz", 2.0**-64 * 1.25),
    ("ue8m0", 3.0), ("e3m2", 27.0),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "x"), INSIDE)
def test_inside_the_range_the_round_ups_are_binomial(name: str, x: float, dtype: type[np.floating]) -> None:
    ref = ref_format(pl.get_format(name))
    if dtype is np.float32 and float(np.float32(x)) != x:
        x = float(np.float32(x))
    lo, hi = ref.neighbours(x)
    assert lo < hi, "pick a value between two members"
    p = float((Fraction(x) - lo) / (hi - lo))
    samples = pl.round_to(np.full(N, x, dtype=dtype), name, rounding="stochastic", rng=len(name) + int(abs(x)))
    values = set(np.unique(samples).tolist())
    assert values <= {float(lo), float(hi)}, values
    k_lo, k_hi = binomial_interval(N, p, ALPHA)
    ups = int(np.count_nonzero(samples == float(hi)))
    assert k_lo <= ups <= k_hi, (p * N, ups, (k_lo, k_hi))


def test_members_never_move_and_a_seed_reproduces() -> None:
    x = np.linspace(-3, 3, 1001)
    a = pl.round_to(x, "e4m3", rounding="stochastic", rng=42)
    b = pl.round_to(x, "e4m3", rounding="stochastic", rng=np.random.default_rng(42))
    np.testing.assert_array_equal(a, b)
    exact = pl.round_to(np.array([0.5, 1.0, -2.0, 448.0, -448.0]), "e4m3", rounding="stochastic", rng=0)
    assert list(exact) == [0.5, 1.0, -2.0, 448.0, -448.0]


def grid_neighbours(ref: RefFormat, x: float | Fraction) -> tuple[Fraction, Fraction]:
    """(lower, upper) grid points around the magnitude of a finite x on the format's grid with the
    exponent unbounded above (x itself twice when it is a grid point): the binade of |x|, or the
    subnormal quantum below 2^emin, from the definitions alone."""
    magnitude = abs(Fraction(x))
    if magnitude == 0:
        return Fraction(0), Fraction(0)
    quantum = pow2(max(floor_log2(magnitude), ref.emin) - ref.M)
    steps = magnitude / quantum
    lower = (steps.numerator // steps.denominator) * quantum
    return lower, lower if lower == magnitude else lower + quantum


def past_the_top(ref: RefFormat) -> list[Fraction]:
    """Magnitudes just past max_finite: a hair above it (2^-12 of the gap to the next grid point), 3/8
    of the way to that point, and halfway into the gap after it (both neighbours past the range:
    every draw overflows)."""
    top = ref.max_finite
    _, above = grid_neighbours(ref, top * (1 + pow2(-60)))
    _, after = grid_neighbours(ref, above * (1 + pow2(-60)))
    gap = above - top
    return [top + gap / 4096, top + gap * 3 / 8, (above + after) / 2]


PAST = ["e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz", "fp16", "bf16", "e4m3ieee", "e2m1", "e3m2", "e2m3", "e7m0fnuz",
        "ue8m0", "binary8p4se", "binary8p3se", "binary8p7sf", "binary8p1se", "binary8p4ue", "binary8p3uf",
        "binary8p1ue", "binary6p3se", "binary10p4se", "tf32"]
"""One or more of every family: IEEE, fn, fnuz, finite (fp6, fp4), mantissa-free, unsigned, P3109 signed and
unsigned in both domains, wider than 8 bits."""
N_PAST = 40_000


def _policies(name: str) -> list[str | None]:
    ref = ref_format(pl.get_format(name))
    return [None, "saturate", "saturate_propagate"] + ["inf"] * ref.has_inf + ["nan"] * ref.has_nan


def _expected_outcomes(ref: RefFormat, x: Fraction, negative: bool,
                       policy: str | None) -> tuple[float, float, Fraction]:
    """(value when rounded down, value when rounded up, P(up)) on the unbounded grid, after the policy
    (the reference's overflow value for a result past max_finite)."""
    lower, upper = grid_neighbours(ref, x)
    sign = -1.0 if negative else 1.0

    def settle(v: Fraction) -> float:
        return sign * float(v) if v <= ref.max_finite else ref.overflow_value(negative, policy)

    return settle(lower), settle(upper), (x - lower) / (upper - lower)


def _float32_holds(x: Fraction) -> bool:
    return x <= Fraction(float(np.finfo(np.float32).max)) and Fraction(float(np.float32(float(x)))) == x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", PAST)
def test_past_max_finite_the_draw_is_on_the_unbounded_grid_and_the_policy_decides(
        name: str, dtype: type[np.floating]) -> None:
    ref = ref_format(pl.get_format(name))
    cases = [x for x in past_the_top(ref) if dtype is np.float64 or _float32_holds(x)]
    assert [grid_neighbours(ref, x)[0] for x in cases[:2]] == [ref.max_finite] * min(2, len(cases))
    signs = (False, True) if ref.signed else (False,)
    for overflow in _policies(name):
        for negative in signs:
            values = np.array([-float(x) if negative else float(x) for x in cases], dtype=dtype)
            samples = pl.round_to(np.repeat(values, N_PAST), name, rounding="stochastic", overflow=overflow,
                                  rng=len(name) + 11 * negative).reshape(len(cases), N_PAST)
            for x, row in zip(cases, samples, strict=True):
                down, up, p_up = _expected_outcomes(ref, x, negative, overflow)
                is_up = same_bits(row, np.full(N_PAST, up))
                assert (is_up | same_bits(row, np.full(N_PAST, down))).all(), (float(x), overflow, np.unique(row))
                if same_bits(np.array([down]), np.array([up]))[0]:
                    continue  # both neighbours settle on one value (saturation, or both past the top)
                k_lo, k_hi = binomial_interval(N_PAST, float(p_up), ALPHA)
                ups = int(np.count_nonzero(is_up))
                assert k_lo <= ups <= k_hi, (name, float(x), overflow, float(p_up) * N_PAST, ups)


N_BAR = 200_000
"""For 230 in binary8p4se: the share of overflows has standard deviation sqrt(0.375 * 0.625 / N) = 0.0011,
so the tolerance 0.006 is 5.5 of them (a correct engine misses it about once in 10^7 seeds)."""


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_binary8p4se_230_overflows_three_times_in_eight(dtype: type[np.floating]) -> None:
    ref = ref_format(pl.get_format("binary8p4se"))
    assert (ref.max_finite, grid_neighbours(ref, 230)) == (224, (224, 240))  # the definitions' grid
    p = float(Fraction(230 - 224, 240 - 224))
    for sign in (1.0, -1.0):
        samples = pl.round_to(np.full(N_BAR, sign * 230.0, dtype=dtype), "binary8p4se", rounding="stochastic",
                              rng=230 + int(sign))
        overflowed = np.isinf(samples)
        assert ((samples == sign * 224.0) | (samples == sign * np.inf)).all()
        assert abs(overflowed.mean() - p) <= 0.006, overflowed.mean()
        k_lo, k_hi = binomial_interval(N_BAR, p, ALPHA)
        assert k_lo <= int(overflowed.sum()) <= k_hi
        saturated = pl.round_to(np.full(1000, sign * 230.0, dtype=dtype), "binary8p4se", rounding="stochastic",
                                overflow="saturate", rng=1)
        assert (saturated == sign * 224.0).all()


@pytest.mark.parametrize(("name", "top", "gap", "beyond"), [
    ("binary8p4se", 224, 16, math.inf), ("e4m3", 448, 32, math.nan), ("e5m2", 57344, 4096, math.inf),
    ("fp16", 65504, 32, math.inf), ("e4m3fnuz", 240, 16, math.nan)])
def test_just_past_max_finite_stays_at_max_finite_but_for_the_grids_share(name: str, top: int, gap: int,
                                                                           beyond: float) -> None:
    # top * (1 + 2^-20) lies 2^-20 * top above max_finite, so it rounds up (and overflows) with
    # probability top * 2^-20 / gap (binary8p4se and e4m3: 14 * 2^-20 = 1.3e-5; fp16: 2047 * 2^-20 = 0.002):
    # nearly always the top. The tops and grid gaps are the formats' published limits (P3109 tables, OCP,
    # IEEE 754); in float32 x is first the nearest float32 (fp16's 65504 * (1 + 2^-20) is not one).
    for dtype in (np.float64, np.float32):
        x = dtype(top * (1 + 2.0**-20))
        p = float((Fraction(float(x)) - top) / gap)
        assert 0 < p < 0.0025
        samples = pl.round_to(np.full(N_BAR, x, dtype=dtype), name, rounding="stochastic", rng=20)
        at_top = samples == top
        assert (at_top | same_bits(samples, np.full(N_BAR, beyond))).all()
        k_lo, k_hi = binomial_interval(N_BAR, p, ALPHA)
        assert k_lo <= N_BAR - int(at_top.sum()) <= k_hi
        assert (pl.round_to(np.full(1000, x, dtype=dtype), name, rounding="stochastic", overflow="saturate",
                            rng=2) == top).all()


def test_scalars_follow_the_same_rule() -> None:
    rng = np.random.default_rng(5)
    n = 4000
    draws = [pl.round_to(230.0, "binary8p4se", rounding="stochastic", rng=rng) for _ in range(n)]
    draws32 = [pl.round_to(np.float32(-230.0), "binary8p4se", rounding="stochastic", rng=rng) for _ in range(n)]
    assert set(draws) == {224.0, math.inf} and set(float(v) for v in draws32) == {-224.0, -math.inf}
    k_lo, k_hi = binomial_interval(n, 0.375, ALPHA)
    assert k_lo <= draws.count(math.inf) <= k_hi
    assert k_lo <= sum(math.isinf(float(v)) for v in draws32) <= k_hi


def test_integers_saturate_past_their_range_in_every_draw() -> None:
    samples = pl.round_to(np.array([127.5, -128.5, 300.0] * 1000), "int8", rounding="stochastic", rng=3)
    assert list(np.unique(samples)) == [-128.0, 127.0]
    assert (samples.reshape(-1, 3) == [127.0, -128.0, 127.0]).all()
    for name, top in (("uint8", 255.0), ("int4", 7.0), ("uint4", 15.0)):
        x = np.full(5000, top + 0.375, dtype=np.float32)
        assert (pl.round_to(x, name, rounding="stochastic", rng=4) == top).all()


def test_tensors_follow_the_same_rule() -> None:
    torch = pytest.importorskip("torch")
    cases = [("e4m3", 460.0, 448.0, math.nan, Fraction(460 - 448, 480 - 448)),
             ("binary8p4se", 230.0, 224.0, math.inf, Fraction(3, 8))]
    n = 100_000
    for name, x, top, beyond, p in cases:
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            t = torch.full((n,), x, dtype=dtype)
            got = pl.round_to(t, name, rounding="stochastic", rng=0).to(torch.float64).numpy()
            up = same_bits(got, np.full(n, beyond))
            assert (up | (got == top)).all(), (name, dtype)
            k_lo, k_hi = binomial_interval(n, float(p), ALPHA)
            assert k_lo <= int(up.sum()) <= k_hi, (name, dtype, int(up.sum()))
            saturated = pl.round_to(t, name, rounding="stochastic", overflow="saturate", rng=0)
            assert (saturated == top).all()
