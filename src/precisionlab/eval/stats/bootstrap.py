"""The bootstrap engine: resampled column totals, and the interval of a statistic of them.

Every bootstrap statistic of the evaluation is a function of per-unit (or per-group) *sums*, so one engine serves
them: a resample draws ``G`` rows of ``values`` with replacement and sums them (``resampled_totals``), and
``bootstrap_interval`` turns the statistic of those totals into an ``Interval`` (expanded percentile, percentile or
BCa levels).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

from precisionlab.eval.stats.inputs import DEFAULT_RESAMPLES
from precisionlab.eval.stats.student_t import student_t_quantile

# Drawn indices per chunk of resamples (4e6 int32 + their gathered float64 values: about 50 MB).
_CHUNK_ELEMENTS = 4_000_000

_NORMAL = NormalDist()


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap confidence interval.

    ``n`` counts the units (examples or documents); ``groups`` the resampled clusters (equal to
    ``n`` when every unit is its own cluster). ``unit`` names the scale of the numbers: ``"pp"``
    (percentage points), ``"%"`` (percent change) or ``""`` (the scores' own unit). ``se`` is the
    bootstrap standard error (standard deviation of the resampled statistic).
    """

    estimate: float
    low: float
    high: float
    confidence: float
    n: int
    unit: str = ""
    se: float = math.nan
    groups: int = 0
    method: str = "expanded"
    n_resamples: int = 0
    seed: int = 0

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies inside the closed interval ``[low, high]``."""
        return self.low <= value <= self.high



def resampled_totals(values: ArrayLike, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> NDArray[np.float64]:
    """Column totals of ``n_resamples`` bootstrap resamples of the rows of ``values`` (G x k).

    Resample ``r`` draws G row indices uniformly with replacement (``numpy.random.default_rng
    (seed).integers``) and sums the drawn rows. Work goes in chunks of resamples so memory stays
    bounded (about 50 MB), a column that is constant (unit counts without groups) is not
    gathered (its total is G times the value) and a column equal to an earlier one (the same
    token counts for both models) reuses its totals. Seeded: the same ``seed`` gives the same
    totals on every run.
    """
    table = np.asarray(values, dtype=np.float64)
    if table.ndim == 1:
        table = table[:, None]
    n_rows, n_columns = table.shape
    constant = [bool(np.all(table[:, j] == table[0, j])) for j in range(n_columns)]
    same_as = [next((i for i in range(j) if np.array_equal(table[:, i], table[:, j])), j) for j in range(n_columns)]
    rng = np.random.default_rng(seed)
    totals = np.empty((n_resamples, n_columns))
    chunk = max(1, min(n_resamples, _CHUNK_ELEMENTS // max(n_rows, 1)))
    for start in range(0, n_resamples, chunk):
        rows = slice(start, min(start + chunk, n_resamples))
        drawn = rng.integers(0, n_rows, size=(rows.stop - rows.start, n_rows), dtype=np.int32)
        for j in range(n_columns):
            if constant[j]:
                totals[rows, j] = n_rows * table[0, j]
            elif same_as[j] != j:
                totals[rows, j] = totals[rows, same_as[j]]
            else:
                totals[rows, j] = np.take(table[:, j], drawn).sum(axis=1)
    return totals


def bootstrap_interval(
    values: NDArray[np.float64],
    statistic: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    *,
    n: int,
    unit: str,
    n_resamples: int,
    seed: int,
    confidence: float,
    method: str,
) -> Interval:
    """Bootstrap interval of ``statistic(totals)`` for per-cluster sums ``values`` (G x k)."""
    totals = values.sum(axis=0)
    estimate = float(statistic(totals[None, :])[0])
    boot = statistic(resampled_totals(values, n_resamples, seed))
    alpha = 1.0 - confidence
    if method == "bca":
        levels = _bca_levels(values, totals, statistic, estimate, boot, alpha)
    elif method == "expanded":
        levels = expanded_levels(confidence, len(values))
    else:
        levels = np.array([alpha / 2.0, 1.0 - alpha / 2.0])
    low, high = np.quantile(boot, levels)
    return Interval(
        estimate=estimate, low=float(low), high=float(high), confidence=confidence, n=n, unit=unit,
        se=float(np.std(boot, ddof=1)), groups=len(values), method=method, n_resamples=n_resamples, seed=seed,
    )


def expanded_levels(confidence: float, n_groups: int) -> NDArray[np.float64]:
    """Quantile levels of the expanded percentile interval for ``n_groups`` resampled units.

    The plain percentile interval is too narrow in small samples: the bootstrap variance is
    ``(G - 1) / G`` times the usual one, and it uses normal instead of t quantiles. The expanded
    interval (Hesterberg, "What teachers should know about the bootstrap", The American
    Statistician 69, 2015) keeps the percentile form but takes the quantiles at
    ``Phi(-+ sqrt(G / (G - 1)) * t_{1 - alpha/2, G - 1})`` instead of ``alpha/2, 1 - alpha/2``.
    """
    alpha = 1.0 - confidence
    z = math.sqrt(n_groups / (n_groups - 1)) * student_t_quantile(1.0 - alpha / 2.0, n_groups - 1)
    tail = _NORMAL.cdf(-z)
    return np.array([tail, 1.0 - tail])


def _bca_levels(
    values: NDArray[np.float64],
    totals: NDArray[np.float64],
    statistic: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    estimate: float,
    boot: NDArray[np.float64],
    alpha: float,
) -> NDArray[np.float64]:
    """BCa quantile levels: bias correction z0 from the resamples, acceleration from the jackknife.

    ``z0 = Phi^-1(P*(theta* < theta) + P*(theta* = theta) / 2)`` (ties split, which matters for
    the discrete statistics of 0/1 scores); ``a = sum(d^3) / (6 sum(d^2)^1.5)`` with
    ``d_i = mean(theta_(-i)) - theta_(-i)`` over leave-one-cluster-out estimates (each one is
    ``statistic(totals - values_i)``, so the jackknife costs one vectorised call);
    levels ``Phi(z0 + (z0 + z) / (1 - a (z0 + z)))`` for ``z = Phi^-1(alpha/2), Phi^-1(1 - alpha/2)``.
    """
    below = np.mean(boot < estimate) + 0.5 * np.mean(boot == estimate)
    below = float(np.clip(below, 1.0 / (len(boot) + 1), len(boot) / (len(boot) + 1)))
    z0 = _NORMAL.inv_cdf(below)
    jack = statistic(totals[None, :] - values)
    spread = jack.mean() - jack
    denominator = 6.0 * float(np.sum(spread**2)) ** 1.5
    accel = float(np.sum(spread**3)) / denominator if denominator > 0 else 0.0
    levels = []
    for z in (_NORMAL.inv_cdf(alpha / 2.0), _NORMAL.inv_cdf(1.0 - alpha / 2.0)):
        shifted = z0 + z
        levels.append(_NORMAL.cdf(z0 + shifted / (1.0 - accel * shifted)))
    return np.array(levels)
