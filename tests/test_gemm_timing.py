"""The timing helpers of precisionlab.gemm.timing keep to their budget (warm-up included) and time a
too-slow kernel at a size that fits. Kernels are stand-ins that sleep a known time."""

from __future__ import annotations

import math
import time

from precisionlab.gemm.timing import Timing, fitting_shape, median_seconds
from precisionlab.labs.gemm import distinct_timings


def test_median_seconds_counts_the_warm_up_in_its_budget() -> None:
    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.04)

    start = time.perf_counter()
    seconds = median_seconds(slow, budget_s=0.1)
    elapsed = time.perf_counter() - start
    # warm-up (0.04) + one timed call (0.04) leave less than another call's worth of the 0.1 s budget;
    # the helper used to make a warm-up and three repeats (0.16 s) whatever the budget
    assert len(calls) == 2
    assert seconds >= 0.04 and elapsed < 0.1 + 0.04 * 2


def test_median_seconds_fills_the_budget_with_quick_calls() -> None:
    calls = []
    median_seconds(lambda: calls.append(time.sleep(0.002)), budget_s=0.05, max_repeats=50)
    assert 4 <= len(calls) <= 26


def test_fitting_shape_shrinks_a_kernel_too_slow_for_the_budget() -> None:
    def kernel(m: int, n: int, k: int) -> None:
        time.sleep(m * n * k * 1e-9)  # 1024³ would take 1.07 s a call

    assert fitting_shape(kernel, 1024, 1024, 1024, budget_s=0.1) == (256, 256, 256)
    assert fitting_shape(kernel, 1, 2048, 2048, budget_s=0.1) == (1, 2048, 2048)  # a GEMV fits as asked
    assert fitting_shape(kernel, 128, 128, 128, budget_s=1e-9) == (128, 128, 128)  # nothing smaller to try


def test_one_timing_per_library_precision_and_shape() -> None:
    def t(name: str, shape: str) -> Timing:
        return Timing(name, "torch", "bf16", 1e-3, 2.0 * math.prod(int(d) for d in shape.split("x")), 1.0, shape)

    kept = distinct_timings([t("a", "256x256x256"), t("b", "1x2048x2048"), t("c", "256x256x256")])
    assert [k.name for k in kept] == ["a", "b"]
