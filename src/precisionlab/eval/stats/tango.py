"""Tango's score interval for the difference of paired proportions (0/1 scores)."""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from precisionlab.eval.stats.inputs import DEFAULT_CONFIDENCE, check_counts

_NORMAL = NormalDist()


def discordant_counts(ref_values: NDArray[np.float64], cand_values: NDArray[np.float64]) -> tuple[int, int]:
    """(b, c): units only the reference / only the candidate got right (0/1 scores)."""
    lost = (ref_values == 1.0) & (cand_values == 0.0)
    gained = (ref_values == 0.0) & (cand_values == 1.0)
    return int(np.sum(lost)), int(np.sum(gained))



def constrained_discordance(b: int, c: int, n: int, delta: float) -> float:
    """Maximum-likelihood discordance ``p_b + p_c`` of paired 0/1 outcomes under ``p_c - p_b = delta``.

    ``b``: pairs the reference gets right and the candidate wrong; ``c``: the reverse; ``n``: all
    pairs. Under the constraint the multinomial likelihood is maximised by the positive root of
    ``A p^2 + B p + C = 0`` in ``p = p_b`` (Tango 1998, Statistics in Medicine 17: 891-908), with
    ``A = 2n``, ``B = -(b + c) + (2n - c + b) delta``, ``C = -b delta (1 - delta)``::

        p_b = (sqrt(B^2 - 4 A C) - B) / (2 A),        p_b + p_c = 2 p_b + delta

    ``constrained_discordance(...) - delta^2`` is the variance of one pair's difference under that
    hypothesis: the score test's variance, used by the interval and by the power formulas.
    """
    a_coef = 2.0 * n
    b_coef = -(b + c) + (2.0 * n - c + b) * delta
    c_coef = -b * delta * (1.0 - delta)
    p_b = (math.sqrt(max(b_coef * b_coef - 4.0 * a_coef * c_coef, 0.0)) - b_coef) / (2.0 * a_coef)
    return 2.0 * p_b + delta


def tango_score(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic for ``H: p_c - p_b = delta``: ``(c - b - n delta) / sqrt(n (D - delta^2))``,
    ``D = constrained_discordance(b, c, n, delta)``; decreasing in delta."""
    numerator = c - b - n * delta
    variance = n * (constrained_discordance(b, c, n, delta) - delta * delta)
    if variance <= 0.0:
        return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def bisect_decreasing(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of a decreasing f on [low, high] with f(low) > 0 >= f(high), to the last bit (or 2^-100)."""
    for _ in range(100):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if f(middle) > 0.0:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def tango_interval(b: int, c: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """Tango's asymptotic score interval for the difference of paired proportions ``(c - b) / n``.

    The set of ``delta`` whose score test is not rejected, ``|tango_score(b, c, n, delta)| <
    z_{1 - alpha/2}``: the lower limit solves ``score = z``, the upper ``score = -z`` (bisection;
    -1 when b = n, 1 when c = n). It depends on the discordant pairs and n only, and stays honest
    when they are few: with none (``b = c = 0``) it is ``+-z^2 / (n + z^2)`` — 3.70 points for
    n = 100 at 95 %, so no verdict finer than that is drawn from 100 examples that never disagree.
    A proportion (multiply by 100 for percentage points).
    """
    check_counts(b, c, n)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    b, c, n = int(b), int(c), int(n)
    z = _NORMAL.inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    estimate = (c - b) / n
    low = -1.0 if b == n else bisect_decreasing(lambda d: tango_score(b, c, n, d) - z, -1.0, estimate)
    high = 1.0 if c == n else bisect_decreasing(lambda d: tango_score(b, c, n, d) + z, estimate, 1.0)
    return low, high
