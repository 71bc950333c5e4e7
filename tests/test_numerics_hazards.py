"""numerics.stall / overflow / updates / blocked / variance / crosscheck: every expected number
derived here (exact rationals, numpy / ml_dtypes scalar arithmetic, the formats' definitions)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from precisionlab.numerics.blocked import additions_on_longest_path, blocked_sum_fp32, gamma, worst_case_bound
from precisionlab.numerics.crosscheck import all_codes, count_mismatches, vendor_mismatches
from precisionlab.numerics.overflow import boundary_margin, exp_overflow, softmax_in_format
from precisionlab.numerics.stall import repeated_sum
from precisionlab.numerics.updates import POWERS_OF_TEN, apply_updates, one_plus, smallest_surviving_update
from precisionlab.numerics.variance import (
    one_pass_variance_fp32,
    reference_variance,
    shifted_variance_fp32,
    two_pass_variance_fp32,
    welford_variance_fp32,
)

# --- stall ------------------------------------------------------------------------------------


def scalar_chain(term: object, count: int) -> tuple[float, int | None]:
    """Repeated addition with a numeric type's own scalar arithmetic (numpy / ml_dtypes)."""
    s = type(term)(0)  # type: ignore[call-arg]
    for step in range(1, count + 1):
        nxt = s + term  # type: ignore[operator]
        if nxt == s:
            return float(s), step
        s = nxt
    return float(s), None


def test_fp16_stalls_at_exactly_32_by_derivation_and_by_numpy_half_arithmetic() -> None:
    t = float(np.float16(0.01))
    # below 32 the spacing is 2^-6 and t rounds up to one gap; at 32 the spacing is 2^-5, half of it exceeds t
    assert 2.0**-6 / 2 < t < 2.0**-6 and t < 2.0**-5 / 2
    result = repeated_sum(0.01, "fp16", 10**6)
    assert result.value == 32.0
    value, step = scalar_chain(np.float16(0.01), 10**6)
    assert (result.value, result.stall_step) == (value, step)
    assert result.term == t
    assert result.exact == pytest.approx(10**6 * t)


def test_bf16_stalls_at_exactly_4() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = float(ml_dtypes.bfloat16(0.01))
    assert 2.0**-6 / 2 < t < 2.0**-6 and t < 2.0**-5 / 2  # bf16 spacing in [2, 4) is 2^-6, in [4, 8) 2^-5
    result = repeated_sum(0.01, "bf16", 10**6)
    assert result.value == 4.0
    assert (result.value, result.stall_step) == scalar_chain(ml_dtypes.bfloat16(0.01), 10**6)


def test_fp32_does_not_stall_and_ends_near_9865() -> None:
    result = repeated_sum(0.01, "fp32", 10**6)
    value, step = scalar_chain(np.float32(0.01), 10**6)  # numpy float32 scalar addition, a million times
    assert step is None and result.stall_step is None
    assert result.value == value
    assert abs(value - 9865) < 1  # the issue's "near 9865"


def test_emulated_chain_agrees_with_native_on_tf32_like_fp16() -> None:
    # tf32 has fp16's 10 mantissa bits and fp32's range: from 0.01 rounded the same, it stalls at 32 too
    assert float(np.float16(0.01)) == repeated_sum(0.01, "tf32", 10).term
    assert repeated_sum(0.01, "tf32", 10**6).value == 32.0


# --- overflow ------------------------------------------------------------------------------------


def first_grid_point_above(threshold: Fraction) -> float:
    """Smallest k/100 with exp(k/100) > threshold, i.e. k = floor(100·ln T) + 1 (ln T is irrational)."""
    return (math.floor(100 * math.log(threshold)) + 1) / 100


@pytest.mark.parametrize(
    ("name", "boundary", "expected"),
    [
        # T = max + ulp(max)/2, the midpoint above max (a tie at T goes to the even side: up to overflow
        # from fp16's odd 65504, np.float16(65520) is inf; exp(k/100) is never exactly T, so either way
        # the first non-finite grid point is the first one above T)
        ("fp16", Fraction(65504) + 16, 11.10),
        ("bf16", (2 - Fraction(1, 2**8)) * Fraction(2) ** 127, 88.73),
        ("fp32", (2 - Fraction(1, 2**24)) * Fraction(2) ** 127, 88.73),
        # e4m3: 448 = 1.110b·2^8; 464 is the tie with the NaN pattern 1.111b·2^8 and rounds to 448
        ("e4m3", Fraction(464), None),
        ("e5m2", Fraction(57344) + 4096, None),
        ("e4m3fnuz", Fraction(248), None),
    ],
)
def test_exp_overflow_first_x(name: str, boundary: Fraction, expected: float | None) -> None:
    derived = first_grid_point_above(boundary)
    if expected is not None:
        assert derived == expected
    result = exp_overflow(name)
    assert result.first_x == derived
    assert math.isinf(result.stored_at_first_x) if name in ("fp16", "bf16", "fp32", "e5m2") \
        else math.isnan(result.stored_at_first_x)
    assert boundary_margin(name) > 1e-6


def test_saturating_formats_never_overflow() -> None:
    result = exp_overflow("e2m1")
    assert result.first_x is None and result.first_saturated_x == first_grid_point_above(Fraction(6))


def test_softmax_naive_overflows_and_max_subtracted_is_accurate() -> None:
    logits = [0.0, 5.0, 10.0, 11.1, 12.0]
    naive = softmax_in_format(logits, "fp16", subtract_max=False)
    assert not naive.finite
    stable = softmax_in_format(logits, "fp16", subtract_max=True)
    assert stable.finite
    ref = [math.exp(z - 12.0) for z in logits]
    total = math.fsum(ref)
    # each probability suffers a handful of fp16 roundings (relative 2^-11 each): a loose derived bound
    for p, r in zip(stable.probabilities, ref, strict=True):
        assert abs(p - r / total) <= 8 * 2.0**-11 * (r / total) + 2.0**-24


# --- 1 + t ---------------------------------------------------------------------------------------


def test_smallest_surviving_update_matches_the_half_ulp_rule() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    stored = {"fp16": np.float16, "fp32": np.float32, "bf16": ml_dtypes.bfloat16}
    half_ulp = {"fp16": 2.0**-11, "fp32": 2.0**-24, "bf16": 2.0**-8}
    expected_by_issue = {"fp16": 1e-3, "bf16": 1e-2, "fp32": 1e-7}
    for name, dtype in stored.items():
        survivors = [t for t in POWERS_OF_TEN if float(dtype(t)) > half_ulp[name]]
        assert smallest_surviving_update(name) == min(survivors) == expected_by_issue[name]
        # and the stored sums themselves, by the dtype's own arithmetic
        assert one_plus(list(POWERS_OF_TEN), name).tolist() == [float(dtype(1.0) + dtype(t)) for t in POWERS_OF_TEN]
    assert smallest_surviving_update("e2m1") is None  # ulp(1)/2 = 0.25 > 0.1


def test_fp32_master_weights_keep_updates_that_bf16_loses() -> None:
    assert apply_updates(1.0, 1e-3, 100, "bf16").tolist() == [1.0]
    master = apply_updates(1.0, 1e-3, 100, "fp32")[0]
    assert abs(master - 1.1) < 100 * 2.0**-23  # at most one fp32 rounding (<= ulp/2 near 1) per update


# --- summation order -------------------------------------------------------------------------------


def blocked_by_loop(values: np.ndarray, blocks: int) -> float:
    """The same order with numpy float32 scalar additions, one at a time."""
    partials = []
    for block in values.reshape(blocks, -1):
        s = np.float32(0)
        for v in block:
            s = s + v
        partials.append(s)
    total = np.float32(0)
    for p in partials:
        total = total + p
    return float(total)


def test_blocked_sums_equal_an_explicit_loop_and_stay_inside_the_bound() -> None:
    values = np.random.default_rng(1).random(4096).astype(np.float32)
    exact = sum(Fraction(float(v)) for v in values)
    results = []
    for blocks in (1, 4, 16, 64):
        got = blocked_sum_fp32(values, blocks)
        assert got == blocked_by_loop(values, blocks)
        k = 4096 // blocks - 1 + blocks - 1
        assert additions_on_longest_path(4096, blocks) == k
        bound = k * 2.0**-24 / (1 - k * 2.0**-24) * float(exact)  # Σ|x| = exact sum for positive values
        assert worst_case_bound(values, blocks) == pytest.approx(bound, rel=1e-12)
        assert abs(Fraction(got) - exact) <= Fraction(bound)
        results.append(got)
    assert len(set(results)) > 1  # not associative
    assert gamma(2**25) == math.inf
    with pytest.raises(ValueError):
        blocked_sum_fp32(values, 3)
    with pytest.raises(TypeError):
        blocked_sum_fp32(values.astype(np.float64), 4)


# --- variance ------------------------------------------------------------------------------------


def exact_variance(values: np.ndarray) -> Fraction:
    xs = [Fraction(float(v)) for v in values]
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / len(xs)


def test_variance_methods_against_exact_rationals() -> None:
    values = (1e6 + np.random.default_rng(5).uniform(-1, 1, 20_000)).astype(np.float32)
    exact = exact_variance(values)
    assert reference_variance(values) == pytest.approx(float(exact), rel=1e-12)
    assert abs(float(exact) - 1 / 3) < 0.02  # U(-1,1) variance 1/3, plus the fp32 grid of 1/16 near 1e6
    for reduction in ("sequential", "pairwise"):
        one_pass = one_pass_variance_fp32(values, reduction)
        # mean(x²) and mean(x)² lie in [2^39, 2^40), where fp32 spacing is 2^(39-23) = 65536
        assert one_pass % 65536 == 0
        assert one_pass <= 0 or one_pass > 1000 * float(exact)  # visibly wrong either way
    assert one_pass_variance_fp32(values, "sequential") != 0  # the streaming sums lose far more than 2^16
    for fixed in (two_pass_variance_fp32(values), welford_variance_fp32(values)):
        assert abs(fixed - float(exact)) < 0.05 * float(exact)
    with pytest.raises(TypeError):
        two_pass_variance_fp32(values.astype(np.float64))
    with pytest.raises(TypeError):
        shifted_variance_fp32(values.astype(np.float64))
    with pytest.raises(ValueError):
        one_pass_variance_fp32(values, "tree")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [30_000, 200_000])
def test_shifted_one_pass_is_accurate_where_two_pass_and_welford_drift(seed: int, n: int) -> None:
    values = (1e6 + np.random.default_rng(seed).uniform(-1, 1, n)).astype(np.float32)
    shifted = values.astype(np.float64) - float(values[0])
    assert np.array_equal(shifted.astype(np.float32).astype(np.float64), shifted)  # the shift is exact
    # y = x - x[0] lies in (-2, 2): E[y²] ~ 1 and E[y]² ~ 0.1 carry ~1e-7 relative error each in fp32
    # and nothing large cancels, so the one-pass result stays within ~1e-6 of the exact variance.
    exact = reference_variance(values)
    assert abs(shifted_variance_fp32(values) - exact) < 1e-5 * exact


# --- fp8 cross-check -----------------------------------------------------------------------------


def test_fp8_codes_by_bit_layout() -> None:
    ocp, fnuz = all_codes("e4m3"), all_codes("e4m3fnuz")
    # 0x40 = 0|1000|000: 2^(8 - bias), bias 7 against 8
    assert ocp[0x40] == 2.0 ** (8 - 7) and fnuz[0x40] == 2.0 ** (8 - 8)
    assert ocp[0x7E] == 448.0 == (1 + Fraction(6, 8)) * 2**8
    assert fnuz[0x7F] == 240.0 == (1 + Fraction(7, 8)) * 2**7
    assert ocp[0x80] == 0 and math.copysign(1, ocp[0x80]) < 0 and math.isnan(fnuz[0x80])
    normal = [c for c in range(256) if (c >> 3) & 0xF > 0 and not math.isnan(ocp[c]) and not math.isnan(fnuz[c])]
    assert {ocp[c] / fnuz[c] for c in normal} == {2.0}


def test_vendor_crosscheck_finds_no_mismatch() -> None:
    pytest.importorskip("ml_dtypes")
    for name in ("e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz"):
        assert vendor_mismatches(name)["ml_dtypes"] == 0
    a = np.array([0.0, 1.0, np.nan])
    assert count_mismatches(a, np.array([-0.0, 1.0, np.nan])) == 1  # -0 differs from +0, NaN equals NaN
    with pytest.raises(ValueError):
        all_codes("fp16")


def test_missing_libraries_are_reported_as_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from precisionlab.labs.limits.fp8 import fp8_crosscheck_section

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` now raises ImportError
    monkeypatch.setitem(sys.modules, "torch", None)
    assert vendor_mismatches("e4m3") == {"ml_dtypes": None, "torch": None}
    part = fp8_crosscheck_section()
    findings, (table,) = part.findings, part.tables
    assert findings["vendor_crosscheck.mismatches"] == "skipped: not installed"
    assert set(table.column("torch mismatches")) == {"skipped: not installed"}


def test_one_missing_library_is_skipped_and_the_other_still_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from precisionlab.labs.limits.fp8 import fp8_crosscheck_section

    pytest.importorskip("ml_dtypes")
    monkeypatch.setitem(sys.modules, "torch", None)  # torch absent, ml_dtypes present
    part = fp8_crosscheck_section()
    findings, (table,) = part.findings, part.tables
    assert findings["vendor_crosscheck.mismatches"] == 0
    assert findings["vendor_crosscheck.libraries"] == "ml_dtypes"
    assert table.column("ml_dtypes mismatches") == [0, 0, 0, 0]
    assert set(table.column("torch mismatches")) == {"skipped: not installed"}


def test_cli_json_says_skipped_when_neither_library_is_installed(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import json
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    result = run_cli("limits", "--json", "--min-log2-n", "1", "--max-log2-n", "2", "--order-n", "4096",
                     "--variance-n", "2", "--drift-n", "0", "--stall-count", "1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["findings"]["vendor_crosscheck.mismatches"] == "skipped: not installed"
    assert data["findings"]["vendor_crosscheck.libraries"] == "none"
    table = next(t for t in data["sections"] if t["key"] == "fp8_crosscheck")
    skipped = {row[col] for row in table["rows"] for col in (5, 6)}
    assert skipped == {"skipped: not installed"}
