"""Stochastic rounding: unbiased inside the range, deterministic past it.

Inside ±max_finite a value x between neighbours lo < hi rounds up with probability
p = (x - lo) / (hi - lo), so the number of round-ups among n independent roundings is
Binomial(n, p) and E[round(x)] = x. Past max_finite no member lies above x, so no rounding
can be unbiased there: the value is an overflow and follows the overflow policy,
deterministically (saturate: ±max_finite; inf: ±inf; nan: NaN). The neighbours and the
overflow values come from the exact reference (tests/reference.py), not from precisionlab.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl

from .reference import binomial_interval, ref_format, same_bits

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


PAST = {
    "e4m3": [449.0, 460.0, 464.0, 470.0, 1e6, math.inf],  # 460 gave NaN 37.5% of the time
    "e4m3fnuz": [241.0, 250.0, 1e9],
    "e5m2": [57345.0, 60000.0, 61440.0, math.inf],
    "fp16": [65504.5, 65510.0, 65519.99, 65520.0, 1e6, math.inf],  # 65510 gave inf 18.5% of the time
    "bf16": [3.3896e38, 1e300, math.inf],
    "e2m1": [6.5, 7.0, 100.0, math.inf],
    "e7m0fnuz": [2.0**63 * 1.01, 2.0**63 * 1.5, 2.0**70],
}


def _policies(name: str) -> list[str | None]:
    ref = ref_format(pl.get_format(name))
    return [None, "saturate"] + ["inf"] * ref.has_inf + ["nan"] * ref.has_nan


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(PAST))
def test_past_max_finite_the_overflow_policy_decides_deterministically(name: str,
                                                                       dtype: type[np.floating]) -> None:
    ref = ref_format(pl.get_format(name))
    for value in PAST[name]:
        if dtype is np.float32 and math.isfinite(value) and value > float(np.finfo(np.float32).max):
            continue  # beyond float32 itself
        for sign in (1.0, -1.0):
            x = np.full(20_000, sign * value, dtype=dtype)
            for overflow in _policies(name):
                samples = pl.round_to(x, name, rounding="stochastic", overflow=overflow, rng=7)
                expected = np.full(x.shape, ref.overflow_value(sign < 0, overflow))
                assert same_bits(samples, expected).all(), (sign * value, overflow, np.unique(samples))


def test_integers_saturate_past_their_range_in_every_draw() -> None:
    samples = pl.round_to(np.array([127.5, -128.5, 300.0] * 1000), "int8", rounding="stochastic", rng=3)
    assert list(np.unique(samples)) == [-128.0, 127.0]
    assert (samples.reshape(-1, 3) == [127.0, -128.0, 127.0]).all()


def test_tensors_follow_the_same_rule() -> None:
    torch = pytest.importorskip("torch")
    x = torch.full((10_000,), 460.0)
    assert torch.isnan(pl.round_to(x, "e4m3", rounding="stochastic", rng=0)).all()
    assert (pl.round_to(x, "e4m3", rounding="stochastic", overflow="saturate", rng=0) == 448.0).all()
