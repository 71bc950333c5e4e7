"""One fp32 sum reduced as B blocks: the summation-order hazard.

    partial_b = sequential fp32 sum of block b (n/B consecutive values)
    result    = sequential fp32 sum of partial_1..partial_B

Every B gives a different, equally valid result, because fp32 addition is not
associative: (a + b) + c and a + (b + c) round differently. A test of a reduction must
therefore compare against a float64 reference with a tolerance derived from n, never
for bit equality. For this two-level order the worst-case bound (Higham, Accuracy and
Stability of Numerical Algorithms, §4.2) is

    |result - exact| <= γ_k · Σ|x_i|,   γ_k = k·u / (1 - k·u),  k = (n/B - 1) + (B - 1),

with u = 2^-24 for fp32; the typical error is closer to sqrt(k)·u·Σ|x_i|.
"""

from __future__ import annotations

import math

import numpy as np

UNIT_ROUNDOFF_FP32 = 2.0**-24
"""u = ulp(1)/2 for fp32 round-to-nearest."""


def blocked_sum_fp32(values: np.ndarray, blocks: int) -> float:
    """Sum float32 values as `blocks` equal blocks, each sequential in fp32, partials sequential in fp32."""
    x = np.asarray(values)
    if x.dtype != np.float32:
        raise TypeError(f"values must be float32, got {x.dtype}")
    if x.ndim != 1:
        raise ValueError("values must be one-dimensional")
    if blocks <= 0 or x.size % blocks:
        raise ValueError(f"blocks must be a positive divisor of n = {x.size}, got {blocks}")
    partials = np.add.accumulate(x.reshape(blocks, -1), axis=1)[:, -1]  # sequential within each block
    return float(np.add.accumulate(partials)[-1])


def additions_on_longest_path(n: int, blocks: int) -> int:
    """k = (n/B - 1) + (B - 1): roundings a single value can pass through in the blocked sum."""
    return n // blocks - 1 + blocks - 1


def gamma(k: int, u: float = UNIT_ROUNDOFF_FP32) -> float:
    """γ_k = k·u / (1 - k·u), the worst-case relative growth of k roundings (needs k·u < 1)."""
    if k * u >= 1:
        return math.inf
    return k * u / (1 - k * u)


def worst_case_bound(values: np.ndarray, blocks: int, u: float = UNIT_ROUNDOFF_FP32) -> float:
    """γ_k · Σ|x_i|: the absolute error no blocked fp32 sum of these values can exceed."""
    x = np.asarray(values, dtype=np.float64)
    return gamma(additions_on_longest_path(x.size, blocks), u) * math.fsum(np.abs(x))
