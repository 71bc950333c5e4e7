"""Emulated accumulation: cost per sequential addition of the ways to emulate it, in one run.

    python3 benchmarks/bench_accumulate.py [n]

Peers (same terms, same results where they apply):
  round_to per step   the general exact API, one call per addition (what a naive emulator does)
  grid per step       numerics.sequential_sum: round-to-odd + fast nearest-even, lanes in one loop
  numpy accumulate    numpy's own float16/float32 add.accumulate (only when the terms are members)
Prints microseconds per step and ratios against the grid path; never asserts times.
"""

from __future__ import annotations

import sys

import numpy as np

import precisionlab as pl
from _timing import timed
from precisionlab.numerics import kahan_sum, sequential_sum
from precisionlab.rounding.exact_sum import odd_sum


def round_to_loop(terms: np.ndarray, fmt: str) -> float:
    s = np.zeros(1)
    for t in terms:
        s = np.asarray(pl.round_to(odd_sum(s, t), fmt), dtype=np.float64)
    return float(s[0])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 13
    rng = np.random.default_rng(0)
    terms = rng.random(n).astype(np.float32).astype(np.float64) * rng.random(n).astype(np.float32)
    members16 = terms.astype(np.float16).astype(np.float64)

    t_round_to, r1 = timed(lambda: round_to_loop(terms, "bf16"), repeat=1)
    t_grid, r2 = timed(lambda: float(sequential_sum(terms, "bf16")), repeat=5)
    t_grid3, _ = timed(lambda: sequential_sum(terms, ["fp16", "bf16", "fp32"]), repeat=5)
    t_kahan2, _ = timed(lambda: kahan_sum(terms, ["fp16", "bf16"]), repeat=5)
    t_native, r3 = timed(lambda: float(sequential_sum(members16, "fp16")), repeat=5)
    assert r1 == r2 and r3 == round_to_loop(members16, "fp16"), "peers disagree"

    print(f"n = {n} sequential additions, results identical across peers")
    print(f"{'method':44} {'us/step':>9} {'vs grid':>8}")
    rows = [
        ("round_to per step (bf16, 1 lane)", t_round_to),
        ("grid per step (bf16, 1 lane)", t_grid),
        ("grid per step (fp16+bf16+fp32, 3 lanes)", t_grid3),
        ("grid Kahan (fp16+bf16, 2 lanes, 4 ops/step)", t_kahan2),
        ("numpy float16 accumulate (member terms)", t_native),
    ]
    for label, seconds in rows:
        print(f"{label:44} {seconds / n * 1e6:9.3f} {seconds / t_grid:8.2f}")


if __name__ == "__main__":
    main()
