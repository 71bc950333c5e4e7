"""Variance in fp32 three ways, and the float64 reference: the cancellation hazard.

All results are population variances (divide by n); every fp32 operation is rounded
to fp32 (numpy float32 arithmetic). Two-pass sums are pairwise tree reductions, as a GPU
reduction forms them (numerics.accumulate.pairwise_sum); one-pass offers a streaming
(sequential) loop or tree sums.

    one-pass   E[x²] - E[x]²          (streaming or tree sums) two large, nearly equal numbers subtracted: with
                                      x ≈ 1e6 both are ≈ 1e12, whose fp32 spacing is 2^16,
                                      so a variance of 1/3 cannot survive (often < 0)
    two-pass   m = Σx/n;  Σ(x - m)²/n  subtract the mean first: the fix is algebraic
    Welford    m_k = m + (x - m)/k;  M2 += (x - m_old)(x - m_k);  var = M2/n
                                      one pass, numerically like two-pass (LayerNorm kernels)
    shifted    one-pass on y = x - K with K = x[0]   (shifted data: Chan, Golub & LeVeque, 1983)
                                      y is exact (Sterbenz: x within a factor 2 of K) and small,
                                      so nothing large is left to cancel, at any n

The reference is the exact mean and variance of the same stored fp32 data, computed with
math.fsum in float64 (two-pass), accurate to a few float64 ulps.
"""

from __future__ import annotations

import math

import numpy as np

from precisionlab.numerics.accumulate import pairwise_sum


def _as_fp32(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values)
    if x.dtype != np.float32:
        raise TypeError(f"values must be stored as float32, got {x.dtype}")
    if x.ndim != 1 or x.size == 0:
        raise ValueError("values must be a non-empty one-dimensional array")
    return x


def _sum32(x: np.ndarray) -> np.float32:
    """Pairwise (tree) fp32 sum."""
    return np.float32(pairwise_sum(x.astype(np.float64), "fp32"))


def _streaming_sum32(x: np.ndarray) -> np.float32:
    """Sequential fp32 sum, one running total (numpy's add.accumulate is sequential)."""
    return np.float32(np.add.accumulate(x)[-1])


def one_pass_variance_fp32(values: np.ndarray, reduction: str = "sequential") -> float:
    """fl32(E[x²] - E[x]²), E[·] = fp32 sum / n, x² rounded to fp32.

    reduction: 'sequential' (a streaming loop keeping running Σx and Σx², the usual
    one-pass code) or 'pairwise' (tree sums). Either way the answer is a multiple of the
    fp32 spacing at E[x²] (2^16 near 1e12), not the variance.
    """
    x = _as_fp32(values)
    if reduction not in ("sequential", "pairwise"):
        raise ValueError(f"reduction must be 'sequential' or 'pairwise', got {reduction!r}")
    total = _streaming_sum32 if reduction == "sequential" else _sum32
    n = np.float32(x.size)
    mean = total(x) / n
    mean_sq = total(x * x) / n
    return float(mean_sq - mean * mean)


def two_pass_variance_fp32(values: np.ndarray) -> float:
    """m = fl32(Σx / n); d = fl32(x - m); var = fl32(Σ fl32(d·d) / n), sums pairwise in fp32."""
    x = _as_fp32(values)
    n = np.float32(x.size)
    mean = _sum32(x) / n
    d = x - mean
    return float(_sum32(d * d) / n)


def welford_variance_fp32(values: np.ndarray) -> float:
    """Welford's online update in fp32, one value at a time (every operation rounded to fp32):

        delta = x - m;  m = m + delta / k;  M2 = M2 + delta · (x - m);   var = M2 / n
    """
    x = _as_fp32(values)
    mean = np.float32(0.0)
    m2 = np.float32(0.0)
    for k, value in enumerate(x.tolist(), start=1):
        v = np.float32(value)
        delta = v - mean
        mean = mean + delta / np.float32(k)
        m2 = m2 + delta * (v - mean)
    return float(m2 / np.float32(x.size))


def reference_variance(values: np.ndarray) -> float:
    """Population variance of the stored values in float64, two-pass with math.fsum."""
    x = np.asarray(values, dtype=np.float64)
    mean = math.fsum(x) / x.size
    d = x - mean
    return math.fsum(d * d) / x.size


def shifted_variance_fp32(values: np.ndarray) -> float:
    """One-pass E[y²] - E[y]² on y = fl32(x - x[0]), tree sums in fp32.

    Shifting by any value near the mean removes the large common part before anything is
    squared; with data within a factor of two of x[0] the shift itself is exact (Sterbenz).
    """
    x = _as_fp32(values)
    return one_pass_variance_fp32(x - x[0], "pairwise")
