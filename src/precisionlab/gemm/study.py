"""The GEMM lab's measurements as data: variant errors, a K sweep, a storage bit-width sweep.

Errors are relative to the float64 product of the original fp32 inputs ("how far is this
pipeline from exact arithmetic on the data I have"). The K sweep also reports the
accumulation-only error, against the exact product of the stored (scaled) operands, which
isolates what the accumulator does from what storage rounding did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from precisionlab.gemm.emulate import (
    Progress,
    accumulate,
    random_inputs,
    reference,
    relative_errors,
    store,
    tolerance,
)
from precisionlab.gemm.traffic import Traffic, variant_traffic
from precisionlab.gemm.variants import Variant


@dataclass(frozen=True)
class VariantResult:
    variant: Variant
    shape: tuple[int, int, int]
    max_rel_err: float
    mean_rel_err: float
    tolerance: float
    seconds: float
    traffic: Traffic

    @property
    def passed(self) -> bool:
        return self.max_rel_err <= self.tolerance

    @property
    def status(self) -> str:
        return status_label(self.passed, self.variant.expected_to_fail)


def status_label(passed: bool, expected_to_fail: bool) -> str:
    """PASS / FAIL, with a row that is meant to fail marked 'FAILED (expected)'."""
    if passed:
        return "PASS (unexpected)" if expected_to_fail else "PASS"
    return "FAILED (expected)" if expected_to_fail else "FAIL"


def run_variant(a: np.ndarray, b: np.ndarray, variant: Variant, tile: int,
                progress: Progress | None = None) -> VariantResult:
    """Emulate one variant on (A, B) and measure its error against the float64 reference."""
    m, k = a.shape
    n = b.shape[1]
    start = time.perf_counter()
    c = accumulate(store(a, b, variant), variant, progress=progress)[k]
    seconds = time.perf_counter() - start
    max_err, mean_err = relative_errors(c, reference(a, b))
    return VariantResult(variant, (m, n, k), max_err, mean_err, tolerance(variant, k), seconds,
                         variant_traffic(variant, m, n, k, tile))


def run_variants(variants: list[Variant], m: int, n: int, k: int, tile: int, seed: int = 0,
                 progress: Progress | None = None) -> list[VariantResult]:
    a, b = random_inputs(m, n, k, seed)
    return [run_variant(a, b, v, tile, progress) for v in variants]


@dataclass(frozen=True)
class SweepPoint:
    k: int
    max_rel_err: float
    acc_only_max_rel_err: float


def k_sweep(variant: Variant, ks: list[int], outputs: int, seed: int = 0,
            progress: Progress | None = None) -> list[SweepPoint]:
    """Error of an outputs×outputs GEMM at each K in ks, from one run over max(ks) (prefixes of K).

    A sequential accumulation's state after k steps is exactly the result for K = k, so a
    single pass yields every point.
    """
    if not ks or min(ks) <= 0:
        raise ValueError(f"K values must be positive, got {ks}")
    a, b = random_inputs(outputs, outputs, max(ks), seed)
    ops = store(a, b, variant)
    results = accumulate(ops, variant, ks, progress)
    a_deq, b_deq = ops.dequantized()
    points = []
    for k in sorted(set(ks)):
        total, _ = relative_errors(results[k], reference(a[:, :k], b[:k, :]))
        acc_only, _ = relative_errors(results[k], a_deq[:, :k] @ b_deq[:k, :])
        points.append(SweepPoint(k, total, acc_only))
    return points


def predicted_from_ulp(anchor_err: float, anchor_man_bits: int, man_bits: int) -> float:
    """Storage error predicted from ulp(1) = 2^-M, scaled from an anchor format: err·2^(M_anchor - M)."""
    return anchor_err * 2.0 ** (anchor_man_bits - man_bits)

