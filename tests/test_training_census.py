"""The underflow census against a direct count with ml_dtypes / numpy casts, and hand-derived edges."""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from precisionlab.training.census import (
    CLASSES,
    census,
    classify,
    from_histogram,
    from_values,
    load_gradients,
    max_power_of_two_scale,
)
from precisionlab.training.example import example_histogram, lognormal_parameters

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e5m2": ml_dtypes.float8_e5m2}


def direct_count(values32: np.ndarray, fmt: str) -> dict[str, float]:
    """Classify by casting float32 values with numpy / ml_dtypes (one rounding from float32)."""
    dtype = DTYPES[fmt]
    with np.errstate(over="ignore"):
        rounded = np.abs(values32.astype(dtype).astype(np.float64))
    smallest_normal = float(ml_dtypes.finfo(dtype).smallest_normal)
    zero_in = values32 == 0
    overflow = ~np.isfinite(rounded)
    flushed = (rounded == 0) & ~zero_in
    subnormal = (rounded > 0) & (rounded < smallest_normal)
    normal = np.isfinite(rounded) & (rounded >= smallest_normal)
    n = values32.size
    return {"input_zero": zero_in.sum() / n, "zero": flushed.sum() / n, "subnormal": subnormal.sum() / n,
            "normal": normal.sum() / n, "overflow": overflow.sum() / n}


def wide_sample(seed: int = 1, n: int = 200_000) -> np.ndarray:
    """float32 values whose magnitudes are log-uniform over 10^-12 .. 10^6, both signs, some zeros."""
    rng = np.random.default_rng(seed)
    mags = 10.0 ** rng.uniform(-12, 6, n)
    values = (np.where(rng.random(n) < 0.5, -1.0, 1.0) * mags).astype(np.float32)
    values[rng.random(n) < 0.01] = 0.0
    return values


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "e5m2"])
def test_census_matches_direct_count(fmt: str) -> None:
    values = wide_sample()
    row = census(from_values(values), fmt)
    expected = direct_count(values, fmt)
    for name in CLASSES:
        assert row.fraction(name) == pytest.approx(expected[name], abs=0, rel=0), name
    assert sum(row.fraction(c) for c in CLASSES) == pytest.approx(1.0)


@pytest.mark.parametrize("exponent", [-3, 8, 16, 24])
def test_scaled_census_matches_direct_count_of_scaled_values(exponent: int) -> None:
    values = wide_sample(seed=2, n=50_000)
    scaled = (values.astype(np.float64) * 2.0**exponent).astype(np.float32)  # exact: a power of two
    row = census(from_values(values), "fp16", exponent)
    expected = direct_count(scaled, "fp16")
    for name in CLASSES:
        assert row.fraction(name) == expected[name], name


def test_fp16_edges_derived_by_hand() -> None:
    # fp16: min subnormal q = 2^-24, min normal 2^-14, max 65504, next binade's half-ulp puts inf at 65520.
    q = 2.0**-24
    cases = {
        q / 2: "zero",                      # a tie: rounds to the even neighbour, 0
        q / 2 * (1 + 2.0**-20): "subnormal",  # just above the tie: rounds to q
        2.0**-14 * (1 - 2.0**-12): "normal",  # rounds up into the normal range
        2.0**-14 * (1 - 2.0**-10): "subnormal",  # the largest subnormal, exactly
        65519.0: "normal",                  # rounds down to 65504
        65520.0: "overflow",                # the tie at the top rounds to inf
        0.0: "input_zero",
    }
    kinds = classify(np.array(list(cases)), "fp16")
    assert [CLASSES[k] for k in kinds] == list(cases.values())


def test_histogram_weights_equal_repeated_values() -> None:
    mags = np.array([1e-9, 3e-8, 2e-6, 1e-3, 0.25, 7e4])
    counts = np.array([5, 3, 11, 2, 7, 1])
    row_hist = census(from_histogram(mags, counts), "fp16")
    row_vals = census(from_values(np.repeat(mags, counts)), "fp16")
    assert row_hist == row_vals


def test_example_histogram_census_is_its_direct_count() -> None:
    sample = example_histogram()
    # numpy's float64 -> float16 cast rounds once, so it is an independent direct count here.
    repeated = np.repeat(sample.magnitudes, sample.weights.astype(np.int64))
    rounded = repeated.astype(np.float16).astype(np.float64)
    n = rounded.size
    row = census(sample, "fp16")
    assert row.subnormal == np.count_nonzero((rounded > 0) & (rounded < 2.0**-14)) / n
    assert row.zero == np.count_nonzero(rounded == 0) / n
    assert row.overflow == np.count_nonzero(~np.isfinite(rounded)) / n


def test_lognormal_parameters_solve_the_two_equations() -> None:
    mu, sigma = lognormal_parameters(0.05, 0.5)
    dist = NormalDist(mu, sigma)
    assert dist.cdf(math.log10(2.0**-25)) == pytest.approx(0.05, rel=1e-9)
    assert dist.cdf(math.log10(2.0**-14)) == pytest.approx(0.55, rel=1e-9)


def exact_max_exponent(amax: float) -> int:
    """Largest k with amax * 2^k < 65520 (fp16's overflow threshold), by exact Fractions."""
    threshold = Fraction(65504) + Fraction(2 ** (15 - 10), 2)
    k = -200
    while Fraction(amax) * Fraction(2) ** (k + 1) < threshold:
        k += 1
    return k


@pytest.mark.parametrize("amax", [0.75, 1.0, 0.9997, 65519 / 2**16, 65520 / 2**16, 3e-8, 1e5, 65504.0, 1e-300])
def test_max_power_of_two_scale_matches_exact_threshold(amax: float) -> None:
    assert max_power_of_two_scale(amax, "fp16") == exact_max_exponent(amax)


def test_max_power_of_two_scale_rejects_zero() -> None:
    with pytest.raises(ValueError, match="> 0"):
        max_power_of_two_scale(0.0)


def test_load_npy_and_csv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    values = np.array([1e-9, -2e-6, 0.5, 0.0], dtype=np.float32)
    np.save(tmp_path / "g.npy", values)
    sample = load_gradients(tmp_path / "g.npy")
    assert sample.total == 4 and sample.max_magnitude == pytest.approx(0.5)
    (tmp_path / "h.csv").write_text("magnitude,count\n# comment\n1e-9,10\n\n0.5,2\n")
    hist = load_gradients(tmp_path / "h.csv")
    assert hist.total == 12 and list(hist.magnitudes) == [1e-9, 0.5]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("empty.npy", np.array([], dtype=np.float32), "no values"),
    ("ints.npy", np.arange(4), "floating point"),
    ("nan.npy", np.array([1.0, np.nan]), "finite"),
])
def test_bad_npy_files(tmp_path, name: str, content: np.ndarray, message: str) -> None:  # type: ignore[no-untyped-def]
    np.save(tmp_path / name, content)
    with pytest.raises((ValueError, TypeError), match=message):
        load_gradients(tmp_path / name)


@pytest.mark.parametrize(("text", "message"), [
    ("", "no magnitude,count rows"),
    ("1e-6,3\nabc,4\n", "row 2"),
    ("1e-6\n", "columns"),
    ("-1e-6,3\n", ">= 0"),
    ("1e-6,-3\n", "counts"),
])
def test_bad_csv_files(tmp_path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "h.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_gradients(path)


def test_unknown_extension(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "g.txt"
    path.write_text("1.0\n")
    with pytest.raises(ValueError, match=r"\.npy"):
        load_gradients(path)
