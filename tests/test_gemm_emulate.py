"""The GEMM emulation against exact rational arithmetic (Fractions) on small cases.

The reference here is written independently of precisionlab: a Fraction rounded to a
p-bit significand with a minimum exponent, one rounding per accumulation step.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from precisionlab.gemm import (
    Variant,
    accumulate,
    add_rounded,
    emulated_matmul,
    random_inputs,
    store,
    tolerance,
)
from precisionlab.rounding.exact_sum import accumulator_format, odd_sum

from .reference import round_rational

FP32, FP16, E8M13 = "fp32", "fp16", "e8m13"


def round_frac(x: Fraction, fmt: str, mode: str = "nearest_even") -> Fraction:
    """x rounded once to the format (tests/reference.py), as a Fraction for the next exact step."""
    return Fraction(round_rational(x, fmt, mode))


def exact_gemm(a: np.ndarray, b: np.ndarray, acc: str, mode: str = "nearest_even",
               chunk: int | None = None) -> np.ndarray:
    """acc_k = round(acc_{k-1} + a_k·b_k) per output; with chunk, partials go into an fp32 sum."""
    m, depth = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            main, partial = Fraction(0), Fraction(0)
            for k in range(depth):
                partial = round_frac(partial + Fraction(float(a[i, k])) * Fraction(float(b[k, j])), acc, mode)
                if chunk is not None and (k + 1) % chunk == 0:
                    main, partial = round_frac(main + round_frac(partial, FP32), FP32), Fraction(0)
            if chunk is None:
                result = round_frac(partial, FP32)
            else:
                result = main if depth % chunk == 0 else round_frac(main + round_frac(partial, FP32), FP32)
            out[i, j] = float(result)
    return out


def wide_range(rng: np.random.Generator, shape: tuple[int, int], dtype: type, binades: int = 12) -> np.ndarray:
    """Mixed-sign values over many binades: makes float64 sums inexact and exercises round-to-odd."""
    mant = rng.uniform(-1, 1, shape)
    return (mant * np.exp2(rng.integers(-binades, binades, shape))).astype(dtype)


def test_sum_to_odd_brackets_the_exact_sum() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, 2000) * np.exp2(rng.integers(-40, 40, 2000))
    b = rng.uniform(-1, 1, 2000) * np.exp2(rng.integers(-40, 40, 2000))
    s = odd_sum(a, b)
    for x, y, r in zip(a, b, s, strict=True):
        exact = Fraction(float(x)) + Fraction(float(y))
        if Fraction(float(r)) == exact:
            continue
        assert int(np.float64(r).view(np.int64)) & 1 == 1
        lo, hi = sorted((float(np.nextafter(r, -np.inf)), float(np.nextafter(r, np.inf))))
        assert Fraction(lo) < exact < Fraction(hi)


@pytest.mark.parametrize(("name", "fmt"), [("fp32", FP32), ("fp16", FP16), ("e8m13", E8M13)])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero"])
def test_add_rounded_is_one_correct_rounding(name: str, fmt: str, mode: str) -> None:
    rng = np.random.default_rng(5)
    acc = np.array([float(round_frac(Fraction(float(v)), fmt)) for v in rng.uniform(1, 64, 400)])
    term = np.ldexp(rng.uniform(-1, 1, 400), rng.integers(-30, 2, 400)) * np.ldexp(1.0, -0)
    got = add_rounded(acc, term, accumulator_format(name), mode)
    for x, t, g in zip(acc, term, got, strict=True):
        assert Fraction(float(g)) == round_frac(Fraction(float(x)) + Fraction(float(t)), fmt, mode)


def test_fp32_storage_fp32_acc_matches_exact_sequential_sum() -> None:
    rng = np.random.default_rng(11)
    a, b = wide_range(rng, (3, 24), np.float32), wide_range(rng, (24, 4), np.float32)
    got = emulated_matmul(a, b, Variant("fp32", "fp32"))
    np.testing.assert_array_equal(got, exact_gemm(a, b, FP32))


def test_fp16_storage_fp16_acc_matches_exact_sequential_sum() -> None:
    rng = np.random.default_rng(12)
    a, b = wide_range(rng, (3, 40), np.float16, 4), wide_range(rng, (40, 5), np.float16, 4)
    got = emulated_matmul(a, b, Variant("fp16_acc16", "fp16", accumulator="fp16"))
    np.testing.assert_array_equal(got, exact_gemm(a, b, FP16))


def test_bf16_storage_rounds_inputs_once_then_accumulates_in_fp32() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(13)
    a, b = rng.uniform(0, 1, (2, 30)), rng.uniform(0, 1, (30, 3))
    a16, b16 = a.astype(ml_dtypes.bfloat16).astype(np.float64), b.astype(ml_dtypes.bfloat16).astype(np.float64)
    got = emulated_matmul(a16, b16, Variant("bf16", "bf16"))
    np.testing.assert_array_equal(got, exact_gemm(a16, b16, FP32))


@pytest.mark.parametrize("mode", ["toward_zero", "nearest_even"])
def test_narrow_accumulator_with_promotion_matches_exact(mode: str) -> None:
    rng = np.random.default_rng(14)
    a, b = rng.uniform(0, 1, (2, 26)).astype(np.float16), rng.uniform(0, 1, (26, 3)).astype(np.float16)
    variant = Variant("x", "fp16", accumulator="e8m13", promote_every=8, acc_rounding=mode)
    got = emulated_matmul(a, b, variant)
    np.testing.assert_array_equal(got, exact_gemm(a, b, E8M13, mode, chunk=8))
    unpromoted = emulated_matmul(a, b, Variant("y", "fp16", accumulator="e8m13", acc_rounding=mode))
    np.testing.assert_array_equal(unpromoted, exact_gemm(a, b, E8M13, mode))


def test_fp16_accumulator_stalls_at_32() -> None:
    """Seed fact: summing 1e-2 in fp16 stalls at 32, where ulp/2 = 2^-6 > 0.01."""
    depth = 4096
    a = np.ones((1, depth), dtype=np.float16)
    b = np.full((depth, 1), 0.01, dtype=np.float16)
    stalled = emulated_matmul(a, b, Variant("fp16_acc16", "fp16", accumulator="fp16"))
    assert stalled[0, 0] == 32.0
    wide = emulated_matmul(a, b, Variant("fp16", "fp16"))
    exact = depth * Fraction(float(np.float16(0.01)))
    assert abs(Fraction(float(wide[0, 0])) - exact) / exact < 1e-5
    assert exact > 40


def test_per_tensor_scales_follow_the_dequantization_rule() -> None:
    rng = np.random.default_rng(15)
    a, b = rng.uniform(0, 3, (2, 16)), rng.uniform(0, 5, (16, 3))
    variant = Variant("t", "e4m3", scaling="tensor")
    ops = store(a, b, variant)
    sa, sb = float(ops.a_scale.reshape(())), float(ops.b_scale.reshape(()))
    assert sa == float(np.float32(a.max() / 448)) and sb == float(np.float32(b.max() / 448))
    assert np.abs(ops.a).max() == 448 and np.abs(ops.b).max() == 448
    acc = exact_gemm(ops.a, ops.b, FP32)
    scale = round_frac(Fraction(sa) * Fraction(sb), FP32)
    expect = np.vectorize(lambda c: float(round_frac(Fraction(float(c)) * scale, FP32)))(acc)
    np.testing.assert_array_equal(emulated_matmul(a, b, variant), expect)


def test_block_scales_promote_each_block_with_its_scales() -> None:
    rng = np.random.default_rng(16)
    a, b = rng.uniform(0, 1, (2, 256)), rng.uniform(0, 1, (256, 3))
    a[:, 128:] *= 50  # the second K-block gets its own, larger scale
    variant = Variant("b", "e4m3", scaling="block")
    ops = store(a, b, variant)
    assert ops.a_scale.shape == (2, 2) and ops.b_scale.shape == (2, 3)
    got = emulated_matmul(a, b, variant)
    for i in range(2):
        for j in range(3):
            main = Fraction(0)
            for blk in range(2):
                partial = Fraction(0)
                for k in range(128 * blk, 128 * (blk + 1)):
                    partial = round_frac(partial + Fraction(float(ops.a[i, k])) * Fraction(float(ops.b[k, j])), FP32)
                scale = round_frac(Fraction(float(ops.a_scale[i, blk])) * Fraction(float(ops.b_scale[blk, j])), FP32)
                main = round_frac(main + round_frac(partial * scale, FP32), FP32)
            assert Fraction(float(got[i, j])) == main


def test_checkpoints_equal_separate_runs() -> None:
    a, b = random_inputs(3, 4, 300, seed=2)
    variant = Variant("p", "fp16", accumulator="e8m13", promote_every=128)
    results = accumulate(store(a, b, variant), variant, [100, 256, 300])
    for k in (100, 256, 300):
        np.testing.assert_array_equal(results[k], emulated_matmul(a[:, :k], b[:k], variant))


def test_bad_shapes_and_variants_raise() -> None:
    with pytest.raises(ValueError, match="M×K"):
        emulated_matmul(np.ones((2, 3)), np.ones((4, 2)), Variant("fp32", "fp32"))
    with pytest.raises(ValueError, match="scaling"):
        Variant("x", "fp16", scaling="row")
    with pytest.raises(ValueError, match="significant bits"):
        accumulator_format("fp64")
    with pytest.raises(ValueError, match="storage"):
        Variant("x", "fp64")
    a, b = random_inputs(4, 5, 6)
    assert a.min() > 0 and b.min() > 0 and math.isfinite(float(a.max()))


def test_double_rounding_trap_is_avoided() -> None:
    """acc = 1 + 2^-23, term = (1 + 2^-23)·2^-24·(1 - 2^-23) = 2^-24·(1 - 2^-46): the exact sum lies just
    below an fp32 midpoint; rounding to float64 first lands on the midpoint and ties to the wrong side."""
    one_up = 1 + 2.0**-23
    a = np.array([[one_up, one_up]], dtype=np.float32)
    b = np.array([[1.0], [2.0**-24 * (1 - 2.0**-23)]], dtype=np.float32)
    got = emulated_matmul(a, b, Variant("fp32", "fp32"))
    assert got[0, 0] == one_up
    np.testing.assert_array_equal(got, exact_gemm(a, b, FP32))
    naive = np.float32(np.float64(one_up) + np.float64(a[0, 1]) * np.float64(b[1, 0]))
    assert naive != np.float32(one_up)  # the trap is real: plain float64 accumulation gets it wrong


def test_tolerance_is_the_first_order_bound_and_holds() -> None:
    """tol = 2u_s + u_s² + K·u_32 by hand: fp16 u_s = 2^-11, e4m3 u_s = 2^-4, fp32 u = 2^-24. On all-positive
    data the fp32-accumulation pipelines stay inside it and the fp16 accumulator does not."""
    assert tolerance(Variant("fp16", "fp16"), 256) == 2 * 2.0**-11 + 2.0**-22 + 256 * 2.0**-24
    assert tolerance(Variant("e", "e4m3", scaling="tensor"), 128) == 2 * 2.0**-4 + 2.0**-8 + 128 * 2.0**-24
    a, b = random_inputs(8, 8, 512, seed=4)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for variant in (Variant("fp16", "fp16"), Variant("bf16", "bf16"), Variant("e", "e4m3", scaling="tensor")):
        assert np.max(np.abs(emulated_matmul(a, b, variant) - ref) / ref) <= tolerance(variant, 512)
    acc16 = Variant("fp16_acc16", "fp16", accumulator="fp16")
    assert np.max(np.abs(emulated_matmul(a, b, acc16) - ref) / ref) > tolerance(acc16, 512)
