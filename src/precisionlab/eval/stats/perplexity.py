"""The interval of the percent perplexity increase, and the studentized bootstrap of the log ratio behind it.

Per cluster g (a document, or a group of them): ``r_g, c_g`` the summed NLLs of the reference and the candidate,
``nr_g, nc_g`` their token counts. The statistic is ``P = 100 (exp(L) - 1)`` with the log ratio of the corpus
perplexities ``L = C/Nc - R/Nr`` (capitals: sums over the clusters). ``P`` is increasing in ``L``, so an interval
for ``L`` maps to one for ``P`` end by end.

Methods (``paired_bootstrap_ratio(method=...)``):

- ``"expanded"``, ``"percentile"``, ``"bca"``: quantiles of the resampled ``P`` (``bootstrap.bootstrap_interval``).
- ``"studentized"``: the bootstrap-t of ``L`` (Efron & Tibshirani 1993, ch. 12; Hall 1988, Annals of Statistics
  16: second-order accurate, it carries the skewness of the studentized statistic that the percentile forms miss).
  The standard error is the delta-method (linearised) one, ``se(L)^2 = sum_g u_g^2`` with the influences
  ``u_g = (c_g - a nc_g)/Nc - (r_g - b nr_g)/Nr`` (``a = C/Nc``, ``b = R/Nr``), recomputed inside every resample
  from the resampled sums of the per-cluster squares and products. With ``t*`` the resampled
  ``(L* - L) / se*``, the interval is ``[L - t*_{1 - alpha/2} se, L - t*_{alpha/2} se]``. It needs 5 clusters
  (below that, too many resamples repeat one cluster and have ``se* = 0``).
- ``"guarded"`` (what ``compare_perplexity`` uses): the union of the expanded and the studentized intervals;
  then, when the clusters are fewer than ``skew.skew_documents_needed`` at the skewness of the influences, the
  end on the side of the skew (the upper end for right skew: a few documents carry the damage) is extended to
  Cantelli's distribution-free bound ``L -+ k se sqrt(G/(G - 1))``, ``k = skew.cantelli_factor``. With fewer than
  5 clusters it is the expanded interval alone: too few to studentize or to estimate a skewness (the adjusted
  skewness of 3 values cannot exceed 1.73 whatever the population), and its t quantiles with at most 3 degrees of
  freedom are what such a verdict rests on.
  docs/eval_statistics.md has the simulation that chose it (wrong PASS at the threshold, coverage, power).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from precisionlab.eval.stats.bootstrap import Interval, bootstrap_interval, resampled_totals
from precisionlab.eval.stats.inputs import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Groups,
    as_vector,
    check_options,
    group_index,
    group_sums,
    same_length,
)
from precisionlab.eval.stats.skew import cantelli_factor, effect_skewness, skew_documents_needed

RatioMethod = Literal["expanded", "percentile", "bca", "studentized", "guarded"]
RATIO_METHODS = ("expanded", "percentile", "bca", "studentized", "guarded")
MIN_STUDENTIZED_CLUSTERS = 5


@dataclass(frozen=True)
class SkewCheck:
    """The skewness guard of a perplexity comparison: ``skewness`` (adjusted G1 of the cluster influences),
    ``needed`` (clusters from which a normal-theory end is trusted at that skewness), ``clusters`` (G), ``units``
    (documents)."""

    skewness: float
    needed: int
    clusters: int
    units: int

    @property
    def trusted(self) -> bool:
        return self.clusters >= self.needed

    @property
    def side(self) -> Literal["upper", "lower"]:
        """The end the skew pulls below (right skew) or above (left skew) the truth."""
        return "upper" if self.skewness > 0 else "lower"

    @property
    def units_needed(self) -> int:
        """``needed`` in documents: clusters times the mean documents per cluster, rounded up."""
        return math.ceil(self.needed * self.units / self.clusters)


def ratio_table(ref_num: ArrayLike, ref_den: ArrayLike, cand_num: ArrayLike, cand_den: ArrayLike,
                groups: Groups | None) -> tuple[NDArray[np.float64], int]:
    """Per-cluster sums ``[r, nr, c, nc]`` (G x 4) and the number of documents, inputs checked."""
    arrays = {name: as_vector(values, name) for name, values in
              (("ref_num", ref_num), ("ref_den", ref_den), ("cand_num", cand_num), ("cand_den", cand_den))}
    n = same_length(**arrays)
    for name in ("ref_den", "cand_den"):
        if np.any(arrays[name] <= 0):
            bad = int(np.flatnonzero(arrays[name] <= 0)[0])
            raise ValueError(f"{name} must count at least one token per document; "
                             f"document {bad} has {arrays[name][bad]}")
    per_unit = np.column_stack([arrays["ref_num"], arrays["ref_den"], arrays["cand_num"], arrays["cand_den"]])
    return group_sums(per_unit, group_index(groups, n)), n


def log_ratio_influences(values: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
    """``(L, u)``: the log ratio and its per-cluster influences ``u_g`` (see the module; ``sum u = 0``)."""
    r, nr, c, nc = values.T
    a, b = c.sum() / nc.sum(), r.sum() / nr.sum()
    return float(a - b), (c - a * nc) / nc.sum() - (r - b * nr) / nr.sum()


def skew_check(values: NDArray[np.float64], n: int, confidence: float) -> SkewCheck:
    """The skewness guard for per-cluster sums ``values`` (see ``SkewCheck``)."""
    skewness = effect_skewness(log_ratio_influences(values)[1])
    return SkewCheck(skewness, skew_documents_needed(skewness, confidence), len(values), n)


def perplexity_skew(ref_num: ArrayLike, ref_den: ArrayLike, cand_num: ArrayLike, cand_den: ArrayLike, *,
                    groups: Groups | None = None, confidence: float = DEFAULT_CONFIDENCE) -> SkewCheck:
    """The skewness guard of a perplexity comparison (the same inputs as ``paired_bootstrap_ratio``)."""
    values, n = ratio_table(ref_num, ref_den, cand_num, cand_den, groups)
    return skew_check(values, n, confidence)


def studentized_log_ratio(values: NDArray[np.float64], n_resamples: int, seed: int,
                          confidence: float) -> tuple[float, float]:
    """The bootstrap-t interval ``(low, high)`` of the log ratio ``L`` for per-cluster sums ``values`` (G x 4).

    The NLL columns are centred at the full-sample rates first (``r - b nr``, ``c - a nc``): the same statistic,
    without the cancellation of sums of squares of numbers near ``2.5 * tokens``. Columns drawn: the four sums and
    the ten products of pairs that the resampled ``sum u*^2`` needs."""
    if len(values) < MIN_STUDENTIZED_CLUSTERS:
        raise ValueError(f"the studentized interval needs at least {MIN_STUDENTIZED_CLUSTERS} documents or groups, "
                         f"got {len(values)}")
    r, nr, c, nc = values.T
    a, b = c.sum() / nc.sum(), r.sum() / nr.sum()
    estimate = float(a - b)
    rt, ct = r - b * nr, c - a * nc
    table = np.column_stack([rt, nr, ct, nc, rt * rt, rt * nr, nr * nr, ct * ct, ct * nc, nc * nc,
                             ct * rt, ct * nr, nc * rt, nc * nr])
    se = math.sqrt(float(np.sum((ct / nc.sum() - rt / nr.sum()) ** 2)))
    if se == 0.0:
        return estimate, estimate
    t = resampled_totals(table, n_resamples, seed)
    (s_rt, s_nr, s_ct, s_nc, s_rr, s_rn, s_nn_r, s_cc, s_cn, s_nn_c, s_cr, s_c_nr, s_nc_rt, s_nc_nr) = t.T
    alpha, beta = s_ct / s_nc, s_rt / s_nr
    ss_c = s_cc - 2.0 * alpha * s_cn + alpha * alpha * s_nn_c
    ss_r = s_rr - 2.0 * beta * s_rn + beta * beta * s_nn_r
    ss_cr = s_cr - beta * s_c_nr - alpha * s_nc_rt + alpha * beta * s_nc_nr
    variance = ss_c / (s_nc * s_nc) - 2.0 * ss_cr / (s_nc * s_nr) + ss_r / (s_nr * s_nr)
    spread = np.sqrt(np.maximum(variance, 0.0))
    shift = alpha - beta
    with np.errstate(divide="ignore", invalid="ignore"):
        student = np.where(spread > 0.0, shift / spread, np.where(shift == 0.0, 0.0, np.sign(shift) * np.inf))
    tail = (1.0 - confidence) / 2.0
    low_q, high_q = np.quantile(student, [tail, 1.0 - tail])
    return estimate - float(high_q) * se, estimate - float(low_q) * se


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
    method: RatioMethod = "expanded",
) -> Interval:
    """Percent perplexity increase of the candidate, with a paired bootstrap over documents.

    Per document i: ``ref_num[i]`` / ``cand_num[i]`` = summed NLL (nats) of its scored tokens
    under each model, ``ref_den[i]`` / ``cand_den[i]`` = the number of those tokens. The
    statistic is the ratio of corpus perplexities minus one, in percent::

        100 * (exp(sum cand_num / sum cand_den) / exp(sum ref_num / sum ref_den) - 1)

    Documents are resampled whole, with their token counts (never individual tokens).
    A positive value means the candidate is worse (higher perplexity). ``method``: see the module
    (``"guarded"`` is what ``compare_perplexity`` uses; the ``method`` of the result says which parts built it:
    ``"expanded+studentized"``, ``"...+cantelli"``).
    """
    if method not in RATIO_METHODS:
        raise ValueError(f"method must be one of {', '.join(RATIO_METHODS)}, got {method!r}")
    check_options(n_resamples, confidence, "expanded" if method in ("studentized", "guarded") else method)
    values, n = ratio_table(ref_num, ref_den, cand_num, cand_den, groups)
    base = "expanded" if method in ("studentized", "guarded") else method
    interval = bootstrap_interval(values, _perplexity_increase, n=n, unit="%", n_resamples=n_resamples, seed=seed,
                                  confidence=confidence, method=base)
    if method == base:
        return interval
    if method == "studentized":
        low, high = studentized_log_ratio(values, n_resamples, seed, confidence)
        return dataclasses.replace(interval, low=_percent(low), high=_percent(high), method="studentized")
    if len(values) < MIN_STUDENTIZED_CLUSTERS:
        return interval
    s_low, s_high = studentized_log_ratio(values, n_resamples, seed, confidence)
    low, high = min(interval.low, _percent(s_low)), max(interval.high, _percent(s_high))
    parts = ["expanded", "studentized"]
    check = skew_check(values, n, confidence)
    if not check.trusted:
        estimate, u = log_ratio_influences(values)
        groups_count = len(values)
        reach = cantelli_factor(confidence) * math.sqrt(groups_count / (groups_count - 1) * float(np.sum(u * u)))
        if check.side == "upper":
            high = max(high, _percent(estimate + reach))
        else:
            low = min(low, _percent(estimate - reach))
        parts.append("cantelli")
    return dataclasses.replace(interval, low=low, high=high, method="+".join(parts))


def _percent(log_ratio: float) -> float:
    """``100 (exp(L) - 1)``, with L capped at 700 nats so that an end is always a finite number."""
    return 100.0 * math.expm1(min(log_ratio, 700.0))


def _perplexity_increase(totals: NDArray[np.float64]) -> NDArray[np.float64]:
    log_ratio = totals[:, 2] / totals[:, 3] - totals[:, 0] / totals[:, 1]
    return 100.0 * np.expm1(log_ratio)
