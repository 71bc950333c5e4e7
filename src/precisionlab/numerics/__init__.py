"""Numerics: emulated accumulation and the hazards of finite precision, usable on their own.

    from precisionlab.numerics import sequential_sum, pairwise_sum, kahan_sum, repeated_sum
    sequential_sum(terms, "fp16")                 # every addition rounded once to fp16
    sequential_sum(terms, ["fp16", "bf16"])       # two lanes, one loop; result shape (2, ...)
    repeated_sum(0.01, "fp16", 10**6).value       # 32.0: the stall

Modules: grid (fast nearest-even rounding per lane), accumulate (sequential / pairwise /
Kahan sums and dot products), stall (repeated addition to its fixed point), blocked (fp32
sums reduced as B blocks), variance (one-pass, two-pass, Welford in fp32), overflow (exp
overflow search, softmax), updates (1 + t survival), crosscheck (fp8 decode against
ml_dtypes and torch). TwoSum and round-to-odd (two_sum, round_to_odd, odd_sum) live in
rounding.exact_sum and are re-exported here.
"""

from precisionlab.numerics.accumulate import add_rounded, kahan_sum, pairwise_sum, sequential_dot, sequential_sum
from precisionlab.numerics.grid import Grid, make_grid, round_grid
from precisionlab.numerics.stall import RepeatedSum, repeated_sum
from precisionlab.rounding.exact_sum import odd_sum, round_to_odd, two_sum

__all__ = [
    "Grid",
    "RepeatedSum",
    "add_rounded",
    "kahan_sum",
    "make_grid",
    "odd_sum",
    "pairwise_sum",
    "repeated_sum",
    "round_grid",
    "round_to_odd",
    "sequential_dot",
    "sequential_sum",
    "two_sum",
]
