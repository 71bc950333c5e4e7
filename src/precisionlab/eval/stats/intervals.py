"""The public bootstrap intervals of means: the paired mean difference and the one-sample ratio of sums (the
perplexity increase has its own module, ``perplexity``)."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike, NDArray

from precisionlab.eval.stats.bootstrap import Interval, bootstrap_interval
from precisionlab.eval.stats.inputs import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Groups,
    Method,
    as_vector,
    check_options,
    group_index,
    group_sums,
    is_binary,
    same_length,
)
from precisionlab.eval.stats.tango import discordant_counts, tango_interval


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
    check_options(n_resamples, confidence, method)
    ref_values, cand_values = as_vector(ref, "ref"), as_vector(cand, "cand")
    n = same_length(ref=ref_values, cand=cand_values)
    binary = is_binary(ref_values, cand_values)
    if percent is None:
        percent = binary
    scale = 100.0 if percent else 1.0
    per_unit = np.column_stack([cand_values - ref_values, np.ones(n)])
    values = group_sums(per_unit, group_index(groups, n))

    def mean_difference(totals: NDArray[np.float64]) -> NDArray[np.float64]:
        return scale * totals[:, 0] / totals[:, 1]

    interval = bootstrap_interval(values, mean_difference, n=n, unit="pp" if percent else "",
                                  n_resamples=n_resamples, seed=seed, confidence=confidence, method=method)
    if not (binary and score_interval):
        return interval
    b, c = discordant_counts(ref_values, cand_values)
    low, high = tango_interval(b, c, n, confidence)
    return dataclasses.replace(interval, low=min(interval.low, scale * low), high=max(interval.high, scale * high),
                               method=f"{method}+tango")


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
    check_options(n_resamples, confidence, method)
    num_values, den_values = as_vector(num, "num"), as_vector(den, "den")
    n = same_length(num=num_values, den=den_values)
    if np.any(den_values <= 0):
        bad = int(np.flatnonzero(den_values <= 0)[0])
        raise ValueError(f"den must count at least one token per document; document {bad} has {den_values[bad]}")
    scale = 100.0 if percent else 1.0
    values = group_sums(np.column_stack([num_values, den_values]), group_index(groups, n))

    def ratio(totals: NDArray[np.float64]) -> NDArray[np.float64]:
        return scale * totals[:, 0] / totals[:, 1]

    return bootstrap_interval(values, ratio, n=n, unit="%" if percent else "", n_resamples=n_resamples, seed=seed,
                              confidence=confidence, method=method)
