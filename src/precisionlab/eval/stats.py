"""Paired statistics for task-level evaluation: bootstrap intervals, McNemar, verdicts, power.

Every comparison is *paired*: the reference and the candidate are scored on identical inputs,
and the resampling unit is an independent unit of the data (a document, an example, or a group
of them such as all passages of one topic) — never an individual token, because the tokens of
one document are correlated and resampling them makes intervals far too narrow.

All the bootstrap statistics here are functions of per-unit *sums*, so one engine serves them:
a resample draws ``G`` units (or groups) with replacement and sums their rows (``values`` holds
one row of sums per unit; with ``groups``, one row per group, which is the cluster bootstrap).

Statistics (``S(.)`` are sums over the resampled units):

- mean difference: ``scale * S(cand - ref) / S(1)`` (``scale`` = 100 for 0/1 scores, so the
  difference is in percentage points);
- perplexity ratio: ``100 * (exp(S(cand_nll)/S(cand_tokens) - S(ref_nll)/S(ref_tokens)) - 1)``,
  the percent increase of ``exp(mean NLL per token)``;
- ratio of sums: ``scale * S(num) / S(den)`` (mean per-token KL, top-1 agreement).

Intervals (``method``): ``"expanded"`` (default) is the percentile interval with the
small-sample widening of Hesterberg (2015) — quantiles of the resampled statistic at levels
``Phi(-+ sqrt(G/(G-1)) t_{1-alpha/2, G-1})``; ``"percentile"`` is the plain one (levels
``alpha/2, 1 - alpha/2``); ``"bca"`` is bias-corrected and accelerated (acceleration from the
jackknife). docs/eval_statistics.md gives the formulas and the simulated coverage of all three;
the expanded interval is the default because it was the best calibrated in those simulations.

Binary (0/1) scores: a bootstrap cannot show variation that the sample does not hold — with no
discordant pair every resample has difference 0 and the interval is [0, 0]. So for 0/1 scores
the interval is the union of the bootstrap interval and Tango's score interval for the
difference of paired proportions (``tango_interval``): Tango's is honest with few discordant
pairs (with none it is ``+-z^2/(n + z^2)``), the cluster bootstrap takes the topics into account
when there is variation to see, and the union keeps both properties (simulated and exact
coverage in docs/eval_statistics.md). The minimum detectable difference and the examples needed
use the matching score-test variances (``binary_scale=``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Verdict = Literal["pass", "fail", "inconclusive"]
Method = Literal["expanded", "percentile", "bca"]
# Group labels, one per unit (any hashable values: strings, integers, a numpy array).
Groups = Sequence[Hashable] | NDArray[Any]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
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


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired binary outcomes.

    ``b``: pairs the reference got right and the candidate wrong; ``c``: the reverse. Under the
    null hypothesis (no difference) each discordant pair is a fair coin, so
    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``.
    """

    b: int
    c: int
    p_value: float

    @property
    def discordant(self) -> int:
        return self.b + self.c


# --------------------------------------------------------------------------- input checks


def _as_vector(values: ArrayLike, name: str) -> NDArray[np.float64]:
    array = np.asarray(values)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise TypeError(f"{name} must be numbers, got {array.dtype}")
    array = array.astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per unit), got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name} has a non-finite value at unit {bad} ({array[bad]})")
    return array


def _same_length(**arrays: NDArray[np.float64]) -> int:
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) != 1:
        listed = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise ValueError(f"paired inputs must have one value per unit each, got lengths {listed}")
    n = next(iter(lengths.values()))
    if n < 2:
        raise ValueError(f"need at least 2 units for an interval, got {n}")
    return n


def _check_options(n_resamples: int, confidence: float, method: str) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    if method not in ("expanded", "percentile", "bca"):
        raise ValueError(f"method must be 'expanded', 'percentile' or 'bca', got {method!r}")


def _is_binary(*arrays: NDArray[np.float64]) -> bool:
    return all(bool(np.all((array == 0.0) | (array == 1.0))) for array in arrays)


def _group_index(groups: Groups | None, n: int) -> NDArray[np.intp] | None:
    """Map each unit to the index of its group (in order of first appearance), or None."""
    if groups is None:
        return None
    labels = list(groups)
    if len(labels) != n:
        raise ValueError(f"groups must name one group per unit: got {len(labels)} labels for {n} units")
    first: dict[Hashable, int] = {}
    index = np.fromiter((first.setdefault(label, len(first)) for label in labels), dtype=np.intp, count=n)
    if len(first) < 2:
        raise ValueError(f"need at least 2 groups for an interval, got {len(first)}")
    return index


def _group_sums(values: NDArray[np.float64], index: NDArray[np.intp] | None) -> NDArray[np.float64]:
    """Per-group column sums of ``values`` (units x k); the units themselves without groups."""
    if index is None:
        return values
    sums = np.zeros((int(index.max()) + 1, values.shape[1]))
    np.add.at(sums, index, values)
    return sums


# --------------------------------------------------------------------------- bootstrap engine


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


def _interval(
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


# --------------------------------------------------------------------------- public intervals


def paired_bootstrap_mean(
    ref: ArrayLike,
    cand: ArrayLike,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    percent: bool | None = None,
    groups: Groups | None = None,
    method: Method = "expanded",
    score_interval: bool = True,
) -> Interval:
    """Paired bootstrap interval of the mean difference ``mean(cand) - mean(ref)``.

    ``ref[i]`` and ``cand[i]`` are the two models' scores on unit i (same input). The statistic
    is ``scale * sum(cand - ref) / n``; resamples draw whole units (or whole ``groups``: then the
    statistic is ``scale * sum over drawn groups of (cand - ref) / number of drawn units``).

    ``percent``: report in percentage points (``scale = 100``, unit ``"pp"``). ``None`` (default)
    chooses percentage points exactly when every score is 0 or 1 (accuracy-like correctness);
    pass ``True`` for fractional accuracy-like scores (token agreement), ``False`` for raw units.

    ``score_interval`` (default True): when every score is 0 or 1, the interval is widened to
    contain Tango's score interval (``tango_interval``, times ``scale``): ``[min(lows),
    max(highs)]``, ``method`` then reads e.g. ``"expanded+tango"``. The bootstrap alone cannot
    see variation the sample does not hold (no discordant pair gives [0, 0]); Tango's interval
    cannot see the groups; the union is honest in both cases. ``False``: the bootstrap alone.
    """
    _check_options(n_resamples, confidence, method)
    ref_values, cand_values = _as_vector(ref, "ref"), _as_vector(cand, "cand")
    n = _same_length(ref=ref_values, cand=cand_values)
    binary = _is_binary(ref_values, cand_values)
    if percent is None:
        percent = binary
    scale = 100.0 if percent else 1.0
    per_unit = np.column_stack([cand_values - ref_values, np.ones(n)])
    values = _group_sums(per_unit, _group_index(groups, n))

    def mean_difference(totals: NDArray[np.float64]) -> NDArray[np.float64]:
        return scale * totals[:, 0] / totals[:, 1]

    interval = _interval(values, mean_difference, n=n, unit="pp" if percent else "", n_resamples=n_resamples,
                         seed=seed, confidence=confidence, method=method)
    if not (binary and score_interval):
        return interval
    b, c = _discordant(ref_values, cand_values)
    low, high = tango_interval(b, c, n, confidence)
    return dataclasses.replace(interval, low=min(interval.low, scale * low), high=max(interval.high, scale * high),
                               method=f"{method}+tango")


def paired_bootstrap_ratio(
    ref_num: ArrayLike,
    ref_den: ArrayLike,
    cand_num: ArrayLike,
    cand_den: ArrayLike,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    groups: Groups | None = None,
    method: Method = "expanded",
) -> Interval:
    """Percent perplexity increase of the candidate, with a paired bootstrap over documents.

    Per document i: ``ref_num[i]`` / ``cand_num[i]`` = summed NLL (nats) of its scored tokens
    under each model, ``ref_den[i]`` / ``cand_den[i]`` = the number of those tokens. The
    statistic is the ratio of corpus perplexities minus one, in percent::

        100 * (exp(sum cand_num / sum cand_den) / exp(sum ref_num / sum ref_den) - 1)

    Documents are resampled whole, with their token counts (never individual tokens).
    A positive value means the candidate is worse (higher perplexity).
    """
    _check_options(n_resamples, confidence, method)
    arrays = {name: _as_vector(values, name) for name, values in
              (("ref_num", ref_num), ("ref_den", ref_den), ("cand_num", cand_num), ("cand_den", cand_den))}
    n = _same_length(**arrays)
    for name in ("ref_den", "cand_den"):
        if np.any(arrays[name] <= 0):
            bad = int(np.flatnonzero(arrays[name] <= 0)[0])
            raise ValueError(f"{name} must count at least one token per document; "
                             f"document {bad} has {arrays[name][bad]}")
    per_unit = np.column_stack([arrays["ref_num"], arrays["ref_den"], arrays["cand_num"], arrays["cand_den"]])
    values = _group_sums(per_unit, _group_index(groups, n))
    return _interval(values, _perplexity_increase, n=n, unit="%", n_resamples=n_resamples, seed=seed,
                     confidence=confidence, method=method)


def _perplexity_increase(totals: NDArray[np.float64]) -> NDArray[np.float64]:
    log_ratio = totals[:, 2] / totals[:, 3] - totals[:, 0] / totals[:, 1]
    return 100.0 * np.expm1(log_ratio)


def bootstrap_ratio(
    num: ArrayLike,
    den: ArrayLike,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    percent: bool = False,
    groups: Groups | None = None,
    method: Method = "expanded",
) -> Interval:
    """Interval of a per-token mean ``sum(num) / sum(den)`` resampling documents (one sample).

    For quantities that are already a comparison of the two models on each token: mean KL
    (``num[i]`` = summed KL(reference || candidate) over document i's tokens, ``den[i]`` = its
    token count) or top-1 agreement (``num[i]`` = tokens whose argmax agrees; ``percent=True``
    reports it in percent, unit ``"%"``).
    """
    _check_options(n_resamples, confidence, method)
    num_values, den_values = _as_vector(num, "num"), _as_vector(den, "den")
    n = _same_length(num=num_values, den=den_values)
    if np.any(den_values <= 0):
        bad = int(np.flatnonzero(den_values <= 0)[0])
        raise ValueError(f"den must count at least one token per document; document {bad} has {den_values[bad]}")
    scale = 100.0 if percent else 1.0
    values = _group_sums(np.column_stack([num_values, den_values]), _group_index(groups, n))

    def ratio(totals: NDArray[np.float64]) -> NDArray[np.float64]:
        return scale * totals[:, 0] / totals[:, 1]

    return _interval(values, ratio, n=n, unit="%" if percent else "", n_resamples=n_resamples, seed=seed,
                     confidence=confidence, method=method)


# --------------------------------------------------------------------------- McNemar


def _as_binary(values: ArrayLike, name: str) -> NDArray[np.bool_]:
    array = _as_vector(values, name)
    if not _is_binary(array):
        raise ValueError(f"{name} must hold binary outcomes (True/False or 0/1)")
    return array == 1.0


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair-coin trials.

    ``min(1, 2 * sum_{j <= min(k, n-k)} C(n, j) / 2^n)``, summed in integers (exact) and rounded
    once to a float. For p = 1/2 this equals the "sum of outcomes no more likely than the one
    observed" rule of scipy.stats.binomtest, because the distribution is symmetric.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 1.0
    tail_end = min(k, n - k)
    term, tail = 1, 1                       # C(n, 0)
    for j in range(tail_end):
        term = term * (n - j) // (j + 1)    # C(n, j+1), exact
        tail += term
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def mcnemar_exact(ref_correct: ArrayLike, cand_correct: ArrayLike) -> McNemar:
    """Exact McNemar test: a two-sided binomial test on the discordant pairs (see McNemar)."""
    ref_values, cand_values = _as_binary(ref_correct, "ref_correct"), _as_binary(cand_correct, "cand_correct")
    if len(ref_values) != len(cand_values):
        raise ValueError(f"paired inputs must have one value per example each, got {len(ref_values)} "
                         f"and {len(cand_values)}")
    b = int(np.sum(ref_values & ~cand_values))
    c = int(np.sum(~ref_values & cand_values))
    return McNemar(b=b, c=c, p_value=binomial_two_sided_p(min(b, c), b + c))


# --------------------------------------------------------------------------- Tango's score interval (0/1 scores)


def _discordant(ref_values: NDArray[np.float64], cand_values: NDArray[np.float64]) -> tuple[int, int]:
    """(b, c): units only the reference / only the candidate got right (0/1 scores)."""
    lost = (ref_values == 1.0) & (cand_values == 0.0)
    gained = (ref_values == 0.0) & (cand_values == 1.0)
    return int(np.sum(lost)), int(np.sum(gained))


def _check_counts(b: int, c: int, n: int) -> None:
    for name, value in (("b", b), ("c", c), ("n", n)):
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"{name} must be a whole count, got {value!r}")
    if n < 1 or b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need n >= 1 and 0 <= b, c with b + c <= n, got b={b}, c={c}, n={n}")


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


def _bisect_decreasing(f: Callable[[float], float], low: float, high: float) -> float:
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
    _check_counts(b, c, n)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    b, c, n = int(b), int(c), int(n)
    z = _NORMAL.inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    estimate = (c - b) / n
    low = -1.0 if b == n else _bisect_decreasing(lambda d: tango_score(b, c, n, d) - z, -1.0, estimate)
    high = 1.0 if c == n else _bisect_decreasing(lambda d: tango_score(b, c, n, d) + z, estimate, 1.0)
    return low, high


# --------------------------------------------------------------------------- verdict and power


def _check_threshold(max_drop: float) -> float:
    value = float(max_drop)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"max_drop must be a finite number >= 0, got {max_drop!r}")
    return value


def verdict(interval: Interval, max_drop: float, higher_is_better: bool) -> Verdict:
    """PASS / FAIL / INCONCLUSIVE from the whole interval against a threshold declared in advance.

    Accuracy-like (``higher_is_better``; difference cand - ref, in the interval's unit, e.g.
    percentage points): ``pass`` if ``low > -max_drop``, ``fail`` if ``high < -max_drop``.
    Perplexity-like (difference = percent increase, lower is better): ``pass`` if
    ``high < max_drop``, ``fail`` if ``low > max_drop``. Anything else — the interval touches or
    straddles the threshold — is ``inconclusive``. The point estimate is never consulted.
    """
    threshold = _check_threshold(max_drop)
    if not (math.isfinite(interval.low) and math.isfinite(interval.high)) or interval.low > interval.high:
        raise ValueError(f"the interval must be finite with low <= high, got [{interval.low}, {interval.high}]")
    if higher_is_better:
        if interval.low > -threshold:
            return "pass"
        if interval.high < -threshold:
            return "fail"
    else:
        if interval.high < threshold:
            return "pass"
        if interval.low > threshold:
            return "fail"
    return "inconclusive"


def _z_sum(alpha: float, power: float) -> float:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie strictly between 0 and 1, got {power!r}")
    return _NORMAL.inv_cdf(1.0 - alpha / 2.0) + _NORMAL.inv_cdf(power)


def standard_error(per_unit_differences: ArrayLike, *, groups: Groups | None = None) -> float:
    """Standard error of the mean of ``per_unit_differences``.

    Without groups: ``sd / sqrt(n)`` (sample sd, ddof = 1). With groups (G clusters, unit totals
    ``D_g`` and sizes ``n_g``, overall mean ``d``), the cluster-robust (linearised) form
    ``sqrt(G / (G - 1) * sum_g (D_g - n_g d)^2) / n``, which reduces to ``sd / sqrt(n)`` (up to
    the ddof convention) when every group holds one unit.
    """
    differences = _as_vector(per_unit_differences, "per_unit_differences")
    n = len(differences)
    if n < 2:
        raise ValueError(f"need at least 2 units, got {n}")
    index = _group_index(groups, n)
    if index is None:
        return float(np.std(differences, ddof=1) / math.sqrt(n))
    sums = _group_sums(np.column_stack([differences, np.ones(n)]), index)
    mean = differences.mean()
    n_groups = len(sums)
    residual = sums[:, 0] - sums[:, 1] * mean
    return float(math.sqrt(n_groups / (n_groups - 1) * float(np.sum(residual**2))) / n)


def min_detectable_difference(
    per_unit_differences: ArrayLike,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    groups: Groups | None = None,
    binary_scale: float | None = None,
) -> float:
    """Smallest true difference detected with probability ``power`` at the current size.

    ``MDD = (z_{1 - alpha/2} + z_{power}) * sd / sqrt(n)`` where ``sd`` is the standard deviation
    of the per-unit paired differences (``standard_error`` gives the clustered form with
    ``groups``). At alpha = 0.05 and 80 % power the factor is 1.960 + 0.842 = 2.802. In the
    threshold setting it is how far the true difference must sit from ``-max_drop`` for the
    interval to clear it 80 % of the time. The result is in the units of the differences passed
    (multiply 0/1 differences by 100 for percentage points).

    ``binary_scale``: the differences are paired 0/1 outcomes times this scale (100 for
    percentage points, 1 for proportions), so each is ``-s``, 0 or ``s``. Then the variances are
    the score test's (``binary_min_detectable``), which never vanish: with no discordant pair the
    sample variance is 0, yet a threshold ``m`` away needs discordance of at least ``m``.
    """
    if binary_scale is not None:
        differences = _as_vector(per_unit_differences, "per_unit_differences")
        b, c = _binary_counts(differences, binary_scale)
        deff = _design_effect(differences, groups)
        return binary_scale * binary_min_detectable(b, c, len(differences), alpha, power, design_effect=deff)
    return _z_sum(alpha, power) * standard_error(per_unit_differences, groups=groups)


def examples_needed(
    per_unit_differences: ArrayLike,
    max_drop: float,
    higher_is_better: bool,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    groups: Groups | None = None,
    binary_scale: float | None = None,
) -> int | None:
    """Units needed for the interval to clear the threshold with probability ``power``.

    With ``d`` the mean per-unit difference, ``se`` its standard error at the current size
    ``n`` and ``m = |d - t|`` the distance to the threshold (``t = -max_drop`` when higher is
    better, ``+max_drop`` otherwise; the differences must be in the threshold's unit)::

        n_needed = ceil(n * ((z_{1 - alpha/2} + z_{power}) * se / m)^2)
                 = ceil(((z_{1 - alpha/2} + z_{power}) * sd / m)^2)      (no groups)

    assuming the mean and the spread stay as observed. ``None`` when ``m == 0`` (the estimate
    sits on the threshold: no size decides it). A value at or below ``n`` means the current size
    already suffices on average. ``binary_scale``: 0/1 outcomes times that scale (see
    ``min_detectable_difference``); the score-test form ``binary_examples_needed`` is used.
    """
    threshold = _check_threshold(max_drop)
    differences = _as_vector(per_unit_differences, "per_unit_differences")
    if binary_scale is not None:
        b, c = _binary_counts(differences, binary_scale)
        target = (-threshold if higher_is_better else threshold) / binary_scale
        return binary_examples_needed(b, c, len(differences), target, alpha, power,
                                      design_effect=_design_effect(differences, groups))
    margin = abs(float(differences.mean()) - (-threshold if higher_is_better else threshold))
    se = standard_error(differences, groups=groups)
    if margin == 0.0:
        return None
    return max(2, math.ceil(len(differences) * (_z_sum(alpha, power) * se / margin) ** 2))


# --------------------------------------------------------------------------- power for 0/1 scores


def _binary_counts(differences: NDArray[np.float64], scale: float) -> tuple[int, int]:
    """(b, c) from differences that are -scale (lost), 0 or +scale (gained); ValueError otherwise."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"binary_scale must be a positive number, got {scale!r}")
    if not np.all((differences == 0.0) | (np.abs(differences) == scale)):
        raise ValueError(f"with binary_scale={scale:g} every difference must be -{scale:g}, 0 or {scale:g}")
    return int(np.sum(differences < 0)), int(np.sum(differences > 0))


def _design_effect(differences: NDArray[np.float64], groups: Groups | None) -> float:
    """Clustered over independent variance of the mean difference, at least 1 (1 without groups or variation).

    Floored at 1: with few discordant pairs in a few dozen topics the ratio is noisy, and a value
    below 1 would claim that clustering makes the estimate more precise."""
    if groups is None or float(np.std(differences)) == 0.0:
        return 1.0
    independent = float(np.std(differences, ddof=1)) / math.sqrt(len(differences))
    return max(1.0, (standard_error(differences, groups=groups) / independent) ** 2)


def _score_variances(b: int, c: int, n: int, delta0: float) -> tuple[float, float]:
    """(v0, v1): one pair's variance at the hypothesis ``delta0`` (constrained) and at the estimate."""
    estimate = (c - b) / n
    v0 = constrained_discordance(b, c, n, delta0) - delta0 * delta0 if abs(delta0) < 1.0 else 0.0
    v1 = (b + c) / n - estimate * estimate
    return max(v0, 0.0), max(v1, 0.0)


def binary_min_detectable(b: int, c: int, n: int, alpha: float = 0.05, power: float = 0.8, *,
                          design_effect: float = 1.0) -> float:
    """The score test's minimum detectable difference for paired 0/1 outcomes (a proportion).

    The distance ``m`` from the estimate ``d = (c - b)/n`` at which a threshold ``d -+ m`` is
    cleared with probability ``power``: the root of (Nam 1997, Biometrics 53: 1422-1430)::

        m = sqrt(deff / n) * (z_{1 - alpha/2} sqrt(v0(d -+ m)) + z_{power} sqrt(v1))

    with ``v0(delta) = constrained_discordance(b, c, n, delta) - delta^2`` the variance under the
    threshold, ``v1 = (b + c)/n - d^2`` the observed one, ``deff`` the design effect of clustered
    units (1 for independent ones); the larger of the two directions. With plenty of discordant
    pairs it is close to the plug-in ``(z + z_power) sd / sqrt(n)``; with none it is
    ``z^2 / (n/deff + z^2)``, the half-width of Tango's interval, never 0. When no distance within
    [-1, 1] is detectable, the distance to the edge of that range.
    """
    _check_counts(b, c, n)
    _z_sum(alpha, power)
    z_alpha, z_power = _NORMAL.inv_cdf(1.0 - alpha / 2.0), _NORMAL.inv_cdf(power)
    estimate = (c - b) / n
    k = math.sqrt(design_effect / n)
    largest = 0.0
    for direction in (-1.0, 1.0):
        edge = 1.0 - direction * estimate   # the distance to -1 (direction -1) or to +1

        def gap(m: float, direction: float = direction) -> float:
            v0, v1 = _score_variances(b, c, n, estimate + direction * m)
            return m - k * (z_alpha * math.sqrt(v0) + z_power * math.sqrt(v1))

        if edge <= 0.0 or gap(edge) < 0.0:
            distance = edge
        else:
            distance = _bisect_decreasing(lambda m: -gap(m) if m > 0 else 1.0, 0.0, edge)
        largest = max(largest, distance)
    return largest


def binary_examples_needed(b: int, c: int, n: int, threshold: float, alpha: float = 0.05, power: float = 0.8, *,
                           design_effect: float = 1.0) -> int | None:
    """Pairs needed for the score interval to clear ``threshold`` (a difference, as a proportion) with
    probability ``power``, if the discordance rates stay as observed (Nam 1997)::

        n_needed = ceil(deff * ((z_{1 - alpha/2} sqrt(v0) + z_{power} sqrt(v1)) / |d - threshold|)^2)

    ``v0 = constrained_discordance(b, c, n, threshold) - threshold^2`` (the variance at the
    threshold), ``v1 = (b + c)/n - d^2``, ``d = (c - b)/n``. With no discordant pair and a
    threshold ``-t`` this is ``ceil(z^2 (1 - t) / t)``: 381 pairs for 1 point, exactly where
    Tango's bound ``z^2/(n + z^2)`` drops below it. ``None`` when ``d`` sits on the threshold.
    """
    _check_counts(b, c, n)
    _z_sum(alpha, power)
    z_alpha, z_power = _NORMAL.inv_cdf(1.0 - alpha / 2.0), _NORMAL.inv_cdf(power)
    margin = abs((c - b) / n - threshold)
    if margin == 0.0:
        return None
    v0, v1 = _score_variances(b, c, n, threshold)
    needed = design_effect * ((z_alpha * math.sqrt(v0) + z_power * math.sqrt(v1)) / margin) ** 2
    return max(2, math.ceil(needed))


# --------------------------------------------------------------------------- per-unit effects


def perplexity_effects(
    ref_num: ArrayLike, ref_den: ArrayLike, cand_num: ArrayLike, cand_den: ArrayLike
) -> NDArray[np.float64]:
    """Per-document linearised contributions to the percent perplexity increase.

    With ``L = C/N_c - R/N_r`` (difference of mean NLL per token; ``C, R`` summed NLLs,
    ``N_c, N_r`` token totals) and ``P = 100 (exp(L) - 1)``, document i contributes
    ``u_i = n (c_i - C/N_c * nc_i) / N_c - n (r_i - R/N_r * nr_i) / N_r`` (the delta-method
    influence of L, mean 0) and ``v_i = P + 100 exp(L) u_i``. The mean of ``v`` is ``P`` and
    ``sd(v) / sqrt(n)`` is the delta-method standard error of P, so ``v`` feeds
    ``min_detectable_difference`` and ``examples_needed`` in percent.
    """
    r, nr, c, nc = (_as_vector(values, name) for name, values in
                    (("ref_num", ref_num), ("ref_den", ref_den), ("cand_num", cand_num), ("cand_den", cand_den)))
    n = _same_length(ref_num=r, ref_den=nr, cand_num=c, cand_den=nc)
    r_total, nr_total, c_total, nc_total = r.sum(), nr.sum(), c.sum(), nc.sum()
    log_ratio = c_total / nc_total - r_total / nr_total
    influence = n * (c - c_total / nc_total * nc) / nc_total - n * (r - r_total / nr_total * nr) / nr_total
    return 100.0 * np.expm1(log_ratio) + 100.0 * math.exp(log_ratio) * influence


# --------------------------------------------------------------------------- one-call comparisons


@dataclass(frozen=True)
class Comparison:
    """Everything a results table needs for one metric of one candidate against the reference.

    ``interval`` is in the threshold's unit (percentage points or percent); ``min_detectable``
    and ``examples_needed`` use the same unit, alpha = 1 - confidence and 80 % power.
    """

    interval: Interval
    verdict: Verdict
    max_drop: float
    higher_is_better: bool
    min_detectable: float
    examples_needed: int | None
    mcnemar: McNemar | None = None


def compare_scores(
    ref: ArrayLike,
    cand: ArrayLike,
    max_drop: float,
    *,
    higher_is_better: bool = True,
    percent: bool | None = None,
    groups: Groups | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    method: Method = "expanded",
    power: float = 0.8,
    score_interval: bool = True,
) -> Comparison:
    """Paired comparison of per-example scores: interval, verdict, power, McNemar for 0/1 scores.

    The mean difference ``cand - ref`` (``paired_bootstrap_mean``; percentage points for 0/1
    scores or ``percent=True``) judged against ``max_drop`` by ``verdict``; the minimum
    detectable difference and the examples needed come from the same per-unit differences, in
    the same unit. ``mcnemar`` is filled when both score vectors are binary. For 0/1 scores
    (with ``score_interval``, the default) the interval contains Tango's score interval and the
    power numbers are the score test's (``binary_scale``), so no discordant pair never reads as
    a certain zero.
    """
    threshold = _check_threshold(max_drop)
    interval = paired_bootstrap_mean(ref, cand, n_resamples, seed, confidence, percent=percent, groups=groups,
                                     method=method, score_interval=score_interval)
    ref_values, cand_values = _as_vector(ref, "ref"), _as_vector(cand, "cand")
    scale = 100.0 if interval.unit == "pp" else 1.0
    differences = scale * (cand_values - ref_values)
    binary = _is_binary(ref_values, cand_values)
    binary_scale = scale if binary and score_interval else None
    return Comparison(
        interval=interval,
        verdict=verdict(interval, threshold, higher_is_better),
        max_drop=threshold,
        higher_is_better=higher_is_better,
        min_detectable=min_detectable_difference(differences, 1.0 - confidence, power, groups=groups,
                                                 binary_scale=binary_scale),
        examples_needed=examples_needed(differences, threshold, higher_is_better, 1.0 - confidence, power,
                                        groups=groups, binary_scale=binary_scale),
        mcnemar=mcnemar_exact(ref_values, cand_values) if binary else None,
    )


def compare_perplexity(
    ref_nll: ArrayLike,
    cand_nll: ArrayLike,
    tokens: ArrayLike,
    max_drop: float,
    *,
    cand_tokens: ArrayLike | None = None,
    groups: Groups | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    method: Method = "expanded",
    power: float = 0.8,
) -> Comparison:
    """Percent perplexity increase with its interval and verdict (lower is better).

    ``ref_nll[i]`` / ``cand_nll[i]``: summed NLL of document i's scored tokens; ``tokens[i]``:
    how many (``cand_tokens`` when the candidate scored a different count). ``max_drop`` is the
    largest acceptable increase in percent.
    """
    threshold = _check_threshold(max_drop)
    cand_den = tokens if cand_tokens is None else cand_tokens
    interval = paired_bootstrap_ratio(ref_nll, tokens, cand_nll, cand_den, n_resamples, seed, confidence,
                                      groups=groups, method=method)
    effects = perplexity_effects(ref_nll, tokens, cand_nll, cand_den)
    return Comparison(
        interval=interval,
        verdict=verdict(interval, threshold, higher_is_better=False),
        max_drop=threshold,
        higher_is_better=False,
        min_detectable=min_detectable_difference(effects, 1.0 - confidence, power, groups=groups),
        examples_needed=examples_needed(effects, threshold, False, 1.0 - confidence, power, groups=groups),
    )
