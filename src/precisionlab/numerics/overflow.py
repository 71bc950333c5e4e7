"""exp overflow per format, and softmax with and without the max subtracted.

First overflow on a grid: x_k = k·step. exp(x_k) is computed in float64 and rounded once
to the format under its overflow policy; the answer is the first x_k whose stored value
is not finite (inf for IEEE formats, NaN for e4m3 / fnuz). The rounding boundary is
T = max_finite + ulp(max_finite)/2 (nearest-even sends T itself down when max_finite
has an even mantissa), so analytically the answer is the first grid point above ln T:
fp16: T = 65520, ln T = 11.0901 -> 11.10. float64 exp is within an ulp of the true
value, which decides the grid point unless ln T lies within ~1e-15 of it
(`boundary_margin` reports that distance).

Formats that saturate (no inf, no NaN: fp6, fp4) never overflow; they clamp to max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionlab.formats import FloatFormat, Format, get_format
from precisionlab.rounding import round_to


@dataclass(frozen=True)
class ExpOverflow:
    format: str
    max_finite: float
    ln_max: float
    policy: str
    first_x: float | None
    """First grid x with a non-finite stored exp(x); None when the format saturates instead."""
    first_saturated_x: float | None
    """First grid x whose exp(x) exceeds max_finite (for saturating formats: where clamping starts)."""
    stored_at_first_x: float | None


def exp_overflow(fmt: str | Format, step: float = 0.01, x_max: float = 720.0) -> ExpOverflow:
    """Scan x = 0, step, 2·step, ... up to x_max for the first non-finite round(exp(x), fmt)."""
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"{target.name} is not a float format")
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    k = np.arange(0, math.floor(x_max / step) + 1, dtype=np.float64)
    x = k * step
    with np.errstate(over="ignore"):
        e = np.exp(x)
    stored = np.asarray(round_to(e, target), dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(stored))
    over = np.flatnonzero(e > target.max_finite)
    first = int(bad[0]) if bad.size else None
    return ExpOverflow(
        format=target.name,
        max_finite=target.max_finite,
        ln_max=math.log(target.max_finite),
        policy=target.default_overflow.value,
        first_x=round(float(k[first]) * step, 10) if first is not None else None,
        first_saturated_x=round(float(k[over[0]]) * step, 10) if over.size else None,
        stored_at_first_x=float(stored[first]) if first is not None else None,
    )


def boundary_margin(fmt: str | Format, step: float = 0.01) -> float:
    """Distance of ln(T)/step from the nearest integer, T = max_finite + ulp(max_finite)/2."""
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"{target.name} is not a float format")
    half_ulp = math.ldexp(1.0, target.emax - target.man_bits - 1)
    q = (math.log(target.max_finite) + math.log1p(half_ulp / target.max_finite)) / step
    return abs(q - round(q))


@dataclass(frozen=True)
class Softmax:
    method: str
    probabilities: list[float]
    finite: bool
    max_abs_error: float
    """Largest |p - p_ref| against the float64 softmax; nan when any output is not finite."""


def softmax_in_format(logits: list[float], fmt: str | Format, subtract_max: bool) -> Softmax:
    """softmax(z) with every step rounded to fmt: z' = fl(z - max) (if subtract_max),
    e = fl(exp(z')), S = sequential fl-sum of e, p = fl(e / S). Compared with float64."""
    target = get_format(fmt)
    z = np.asarray(round_to(np.asarray(logits, dtype=np.float64), target), dtype=np.float64)
    if subtract_max:
        z = np.asarray(round_to(z - z.max(), target), dtype=np.float64)
    with np.errstate(over="ignore"):
        e = np.asarray(round_to(np.exp(z), target), dtype=np.float64)
    total = 0.0
    for value in e.tolist():
        total = float(round_to(total + value, target))  # a few terms: exact sum of two members, one rounding
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.asarray(round_to(e / total, target), dtype=np.float64) if math.isfinite(total) else e / total
    ref = np.exp(np.asarray(logits, dtype=np.float64) - max(logits))
    ref = ref / ref.sum()
    finite = bool(np.all(np.isfinite(p)))
    error = float(np.max(np.abs(p - ref))) if finite else math.nan
    name = f"{target.name} softmax, {'max subtracted' if subtract_max else 'naive'}"
    return Softmax(name, p.tolist(), finite, error)
