"""Does 1 + t survive in a format? The vanishing weight update.

The update t is first stored in the format, then 1 + t is formed exactly and rounded
once (nearest-even). Near 1 the spacing is ulp(1) = 2^-M, so the sum leaves 1 only when
t > ulp(1)/2 = 2^-(M+1) (at exactly half, ties-to-even keeps 1):

    fp16  (M=10): 2^-11 = 4.9e-4   keeps 1e-3, loses 1e-4
    bf16  (M=7):  2^-8  = 3.9e-3   keeps 1e-2, loses 1e-3
    fp32  (M=23): 2^-24 = 6.0e-8   keeps 1e-7, loses 1e-8

The fix in training is an fp32 master copy of the weights: updates are applied there
and the weights are cast down only to feed the next forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from precisionlab.formats import FloatFormat, Format, get_format
from precisionlab.rounding import round_to

POWERS_OF_TEN = tuple(10.0**-k for k in range(1, 9))
"""t = 1e-1, 1e-2, ..., 1e-8."""


def one_plus(t: float | Sequence[float], fmt: str | Format) -> np.ndarray:
    """fl(1 + fl(t)) in fmt, for each t (float64 values out)."""
    target = _float(fmt)
    stored = np.asarray(round_to(np.asarray(t, dtype=np.float64), target), dtype=np.float64)
    return np.asarray(round_to(1.0 + stored, target), dtype=np.float64)


def smallest_surviving_update(fmt: str | Format, updates: Sequence[float] = POWERS_OF_TEN) -> float | None:
    """The smallest t among `updates` with fl(1 + fl(t)) != 1; None when none survives."""
    results = one_plus(list(updates), fmt)
    survivors = [t for t, r in zip(updates, results.tolist(), strict=True) if r != 1.0]
    return min(survivors) if survivors else None


def _float(fmt: str | Format) -> FloatFormat:
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"{target.name} is not a float format")
    return target


def apply_updates(weight: float, update: float, count: int, fmt: str | Format, rounding: str = "nearest_even",
                  lanes: int = 1, seed: int = 0) -> np.ndarray:
    """w_k = round(w_{k-1} + fl(update)) in fmt, count times, for `lanes` independent copies
    (they differ only under stochastic rounding, where E[round(x)] = x keeps the update on
    average). Returns the final weights (float64, one per lane)."""
    if count < 0 or lanes < 1:
        raise ValueError("count must be >= 0 and lanes >= 1")
    target = _float(fmt)
    rng = np.random.default_rng(seed)
    step = float(round_to(float(update), target))
    w = np.full(lanes, float(round_to(float(weight), target)))
    for _ in range(count):
        w = np.asarray(round_to(w + step, target, rounding=rounding, rng=rng), dtype=np.float64)
    return w
