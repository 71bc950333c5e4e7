"""Running statistics of a linear layer's inputs over calibration batches, without keeping them.

For inputs X (n tokens, N features) seen batch by batch:

    xtx       sum X^T X                  (N, N) float64 -> hessian() = 2 X^T X / n  (GPTQ's H);
              each batch's X^T X is a float32 product (as GPTQ implementations accumulate),
              added to the float64 sum
    total     sum of x over tokens       (N,)           (the output norm with a bias)
    abs_sum   sum of |x|                 (N,)           -> mean_abs()  (AWQ's activation statistic)
    abs_max   max |x| over tokens        (N,)           (SmoothQuant's, LLM.int8()'s outlier test)
    samples   up to `keep` token rows, a uniform random subset of every token seen (reservoir
              sampling, seeded: the same rows every run), float32, for the methods whose error
              is not a function of X^T X (activation quantization)

Memory is N^2 float64 plus `keep` rows, whatever the number of batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.peers import as_numpy


class InputStatistics:
    """Statistics of one layer input (see the module docstring)."""

    def __init__(self, features: int, keep: int = 0, seed: int = 0) -> None:
        if features < 1:
            raise ValueError(f"features must be >= 1, got {features}")
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self.features = int(features)
        self.keep = int(keep)
        self.n = 0
        self.xtx = np.zeros((features, features), dtype=np.float64)
        self.total = np.zeros(features, dtype=np.float64)
        self.abs_sum = np.zeros(features, dtype=np.float64)
        self.abs_max = np.zeros(features, dtype=np.float64)
        self._samples = np.empty((keep, features), dtype=np.float32)
        self._rng = np.random.default_rng(seed)

    def add(self, x: Any) -> None:
        """Fold in a batch of inputs (..., features): numpy or torch, any float dtype."""
        arr = as_numpy(x)
        if arr.shape[-1] != self.features:
            raise ValueError(f"expected inputs with {self.features} features, got shape {arr.shape}")
        rows = arr.reshape(-1, self.features)
        if rows.shape[0] == 0:
            return
        if not np.isfinite(rows).all():
            raise ValueError("calibration inputs hold NaN or inf")
        x32 = rows.astype(np.float32)
        self.xtx += (x32.T @ x32).astype(np.float64)  # a batch's products in float32, the running sum in float64
        x64 = rows.astype(np.float64)
        self.total += x64.sum(axis=0)
        a = np.abs(x64)
        self.abs_sum += a.sum(axis=0)
        np.maximum(self.abs_max, a.max(axis=0), out=self.abs_max)
        self._sample(rows)
        self.n += rows.shape[0]

    def _sample(self, rows: np.ndarray) -> None:
        if not self.keep:
            return
        seen = self.n
        fill = min(max(self.keep - seen, 0), rows.shape[0])
        if fill:
            self._samples[seen : seen + fill] = rows[:fill]
        rest = rows[fill:]
        if rest.shape[0]:
            index = np.arange(seen + fill, seen + rows.shape[0])  # global token numbers of the rest
            slots = (self._rng.random(rest.shape[0]) * (index + 1)).astype(np.int64)
            chosen = slots < self.keep
            # sequential replacement: a later row wins a slot (numpy assignment keeps the last duplicate)
            self._samples[slots[chosen]] = rest[chosen]

    # ------------------------------------------------------------------ views
    def hessian(self) -> np.ndarray:
        """H = 2 X^T X / n (float64)."""
        if self.n == 0:
            raise ValueError("no calibration tokens reached this layer")
        return self.xtx * (2.0 / self.n)

    def mean_abs(self) -> np.ndarray:
        """mean |x| per input channel (float64)."""
        if self.n == 0:
            raise ValueError("no calibration tokens reached this layer")
        return self.abs_sum / self.n

    @property
    def samples(self) -> np.ndarray:
        """The kept token rows (min(keep, n), features), float32."""
        return self._samples[: min(self.keep, self.n)]


class LayerOutputError:
    """The relative output error of candidate weights for one layer (see `output_error`); the
    denominator, the float layer's output norm, is computed once."""

    def __init__(self, weight: Any, stats: InputStatistics, bias: Any = None) -> None:
        self.weight = as_numpy(weight, np.float64)
        self.stats = stats
        self._xtx32 = stats.xtx.astype(np.float32)
        den = squared_error(self.weight, self._xtx32)
        if bias is not None:
            b = as_numpy(bias, np.float64)
            den += 2.0 * float(b @ (self.weight @ stats.total)) + stats.n * float(b @ b)
        self.den = den

    def __call__(self, weight_hat: Any) -> float:
        num = squared_error(as_numpy(weight_hat, np.float64) - self.weight, self._xtx32)
        if self.den <= 0:
            return 0.0 if num <= 0 else float("inf")
        return float(np.sqrt(max(num, 0.0) / self.den))


def output_error(weight: Any, weight_hat: Any, stats: InputStatistics, bias: Any = None) -> float:
    """Relative Frobenius error of the layer output over every token the statistics saw.

        ||X W_hat^T - X W^T||_F / ||X W^T + 1 b^T||_F
        = sqrt( tr(D S D^T) / (tr(W S W^T) + 2 b.(W sum x) + n |b|^2) ),   D = W_hat - W,  S = X^T X

    The bias is the same before and after, so it enters the denominator only. The quadratic forms
    are float32 products summed in float64 (relative accuracy about 1e-6: four digits of an error
    are exact, at half the cost of float64 on the widest layers)."""
    return LayerOutputError(weight, stats, bias)(weight_hat)


def squared_error(d: np.ndarray, xtx32: np.ndarray) -> float:
    """tr(D S D^T) with float32 products summed in float64 (D: the difference of the weight from the float
    one, or the weight itself for the output norm)."""
    d32 = np.asarray(d, dtype=np.float32)
    return float(((d32 @ xtx32) * d32).sum(dtype=np.float64))


def relative_error(reference: Any, approx: Any) -> float:
    """||approx - reference||_F / ||reference||_F in float64 (`ratio`'s rule for a zero reference)."""
    r = as_numpy(reference, np.float64)
    a = as_numpy(approx, np.float64)
    return ratio(float(np.linalg.norm(a - r)), float(np.linalg.norm(r)))


def relative_squared_error(reference: Any, approx: Any) -> float:
    """||approx - reference||_F^2 / ||reference||_F^2 in float64 (sums of squares; `ratio`'s rule)."""
    r = as_numpy(reference, np.float64)
    a = as_numpy(approx, np.float64)
    return ratio(float(np.sum((a - r) ** 2)), float(np.sum(r**2)))


def ratio(num: float, den: float) -> float:
    """num / den of two non-negative error norms; over a zero reference 0 / 0 = 0 (nothing to get wrong, nothing
    wrong) and x / 0 = inf for x > 0 (an error on a zero output is unbounded, never hidden)."""
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den
