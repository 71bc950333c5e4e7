"""Emulated accumulation: cost per sequential addition of the ways to emulate it, in one run.

    python3 benchmarks/bench_accumulate.py [n]

Peers (same terms, same results where they apply):
  round_to per step   the general exact API, one call per addition (what a naive emulator does)
  numpy lanes loop    numerics.sequential_sum / kahan_sum's numpy loop: round-to-odd + fast
                      nearest-even on every lane at once (used beyond SCALAR_SERIES series)
  float loop          the same sums over Python floats, one series at a time: TwoSum +
                      grid.scalar_rounder (the default for at most SCALAR_SERIES series)
  numpy accumulate    numpy's own float16 add.accumulate (only when the terms are members)
Prints microseconds per step and ratios against the float loop; never asserts times.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import precisionlab as pl
from _timing import timed
from precisionlab.numerics import accumulate, kahan_sum, sequential_sum
from precisionlab.rounding.exact_sum import odd_sum


def round_to_loop(terms: np.ndarray, fmt: str) -> float:
    s = np.zeros(1)
    for t in terms:
        s = np.asarray(pl.round_to(odd_sum(s, t), fmt), dtype=np.float64)
    return float(s[0])


def numpy_lanes(func: Callable[[], Any]) -> Callable[[], Any]:
    """func with the float loop switched off, so every series goes through the numpy lanes loop."""

    def forced() -> Any:
        saved, accumulate.SCALAR_SERIES = accumulate.SCALAR_SERIES, 0
        try:
            return func()
        finally:
            accumulate.SCALAR_SERIES = saved

    return forced


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 13
    rng = np.random.default_rng(0)
    terms = rng.random(n).astype(np.float32).astype(np.float64) * rng.random(n).astype(np.float32)
    members16 = terms.astype(np.float16).astype(np.float64)

    def one() -> float:
        return float(sequential_sum(terms, "bf16"))

    def three() -> np.ndarray:
        return sequential_sum(terms, ["fp16", "bf16", "fp32"])

    def kahan() -> np.ndarray:
        return kahan_sum(terms, ["fp16", "bf16"])

    t_round_to, r_naive = timed(lambda: round_to_loop(terms, "bf16"), repeat=1)
    timings = {}
    results = {}
    for label, func in (("1 lane", one), ("3 lanes", three), ("Kahan", kahan)):
        timings["numpy " + label], results["numpy " + label] = timed(numpy_lanes(func), repeat=3)
        timings["float " + label], results["float " + label] = timed(func, repeat=5)
    t_native, r_native = timed(lambda: float(sequential_sum(members16, "fp16")), repeat=5)
    assert r_naive == results["float 1 lane"] == results["numpy 1 lane"], "peers disagree"
    for label in ("3 lanes", "Kahan"):
        assert np.array_equal(results["float " + label], results["numpy " + label], equal_nan=True), label
    assert r_native == round_to_loop(members16, "fp16"), "peers disagree"

    print(f"n = {n} sequential additions, results identical across peers")
    print(f"{'method':52} {'us/step':>9} {'vs float loop':>14}")
    rows = [
        ("round_to per step (bf16, 1 lane)", t_round_to, timings["float 1 lane"]),
        ("numpy lanes loop (bf16, 1 lane)", timings["numpy 1 lane"], timings["float 1 lane"]),
        ("float loop (bf16, 1 lane)", timings["float 1 lane"], timings["float 1 lane"]),
        ("numpy lanes loop (fp16+bf16+fp32, 3 lanes)", timings["numpy 3 lanes"], timings["float 3 lanes"]),
        ("float loop (fp16+bf16+fp32, 3 lanes)", timings["float 3 lanes"], timings["float 3 lanes"]),
        ("numpy lanes Kahan (fp16+bf16, 2 lanes, 4 ops/step)", timings["numpy Kahan"], timings["float Kahan"]),
        ("float loop Kahan (fp16+bf16, 2 lanes, 4 ops/step)", timings["float Kahan"], timings["float Kahan"]),
        ("numpy float16 accumulate (member terms)", t_native, timings["float 1 lane"]),
    ]
    for label, seconds, reference in rows:
        print(f"{label:52} {seconds / n * 1e6:9.3f} {seconds / reference:14.2f}")


if __name__ == "__main__":
    main()
