"""Student's t quantiles without scipy: the exact finite series for small df, Cornish-Fisher above."""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

_NORMAL = NormalDist()


def _t_central_probability(theta: float, df: int) -> float:
    """``P(|T| < sqrt(df) tan(theta))`` for Student's t with integer ``df`` (exact finite series).

    Abramowitz & Stegun 26.7.3-26.7.4, with ``c = cos(theta)^2``: odd df,
    ``(2/pi) (theta + sin cos (1 + 2/3 c + 2*4/(3*5) c^2 + ...))`` ((df-1)/2 terms in the
    bracket after theta); even df, ``sin (1 + 1/2 c + 1*3/(2*4) c^2 + ...)`` (df/2 terms).
    """
    sin, cos = math.sin(theta), math.cos(theta)
    c = cos * cos
    if df % 2:
        term, series = 1.0, 1.0 if df > 1 else 0.0
        for j in range(1, (df - 1) // 2):
            term *= c * (2 * j) / (2 * j + 1)
            series += term
        return 2.0 / math.pi * (theta + sin * cos * series)
    term, series = 1.0, 1.0
    for j in range(1, df // 2):
        term *= c * (2 * j - 1) / (2 * j)
        series += term
    return sin * series


# Above this many degrees of freedom the Cornish-Fisher expansion is exact to double precision.
_T_SERIES_MAX_DF = 300


@functools.lru_cache(maxsize=256)
def student_t_quantile(p: float, df: int) -> float:
    """Quantile ``t_{p, df}`` of Student's t distribution with integer ``df >= 1`` (numpy-free).

    For ``df <= 300``: bisection (in ``theta = atan(t / sqrt(df))``, 200 steps, to the last bit)
    on the exact finite series of ``_t_central_probability``. Above: the Cornish-Fisher expansion
    in the normal quantile z (Abramowitz & Stegun 26.7.5), ``t = z + g1/df + g2/df^2 + g3/df^3 +
    g4/df^4`` with ``g1 = (z^3 + z)/4``, ``g2 = (5z^5 + 16z^3 + 3z)/96``,
    ``g3 = (3z^7 + 19z^5 + 17z^3 - 15z)/384``, ``g4 = (79z^9 + 776z^7 + 1482z^5 - 1920z^3 - 945z)/92160``.
    """
    if isinstance(df, bool) or int(df) != df or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, got {p!r}")
    df = int(df)
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df > _T_SERIES_MAX_DF:
        z = _NORMAL.inv_cdf(p)
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
        return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    target = 2.0 * p - 1.0
    low, high = 0.0, math.pi / 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if _t_central_probability(middle, df) < target:
            low = middle
        else:
            high = middle
    return math.sqrt(df) * math.tan(0.5 * (low + high))
