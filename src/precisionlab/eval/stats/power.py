"""Power: standard errors, the minimum detectable difference and the examples needed (score-test forms for
0/1 scores), and the per-document effects of the perplexity ratio that feed them."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

from precisionlab.eval.stats.inputs import (
    Groups,
    as_vector,
    check_counts,
    check_threshold,
    group_index,
    group_sums,
    same_length,
)
from precisionlab.eval.stats.tango import bisect_decreasing, constrained_discordance

_NORMAL = NormalDist()


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
    differences = as_vector(per_unit_differences, "per_unit_differences")
    n = len(differences)
    if n < 2:
        raise ValueError(f"need at least 2 units, got {n}")
    index = group_index(groups, n)
    if index is None:
        return float(np.std(differences, ddof=1) / math.sqrt(n))
    sums = group_sums(np.column_stack([differences, np.ones(n)]), index)
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
        differences = as_vector(per_unit_differences, "per_unit_differences")
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
    threshold = check_threshold(max_drop)
    differences = as_vector(per_unit_differences, "per_unit_differences")
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
    check_counts(b, c, n)
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
            distance = bisect_decreasing(lambda m: -gap(m) if m > 0 else 1.0, 0.0, edge)
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
    check_counts(b, c, n)
    _z_sum(alpha, power)
    z_alpha, z_power = _NORMAL.inv_cdf(1.0 - alpha / 2.0), _NORMAL.inv_cdf(power)
    margin = abs((c - b) / n - threshold)
    if margin == 0.0:
        return None
    v0, v1 = _score_variances(b, c, n, threshold)
    needed = design_effect * ((z_alpha * math.sqrt(v0) + z_power * math.sqrt(v1)) / margin) ** 2
    return max(2, math.ceil(needed))


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
    r, nr, c, nc = (as_vector(values, name) for name, values in
                    (("ref_num", ref_num), ("ref_den", ref_den), ("cand_num", cand_num), ("cand_den", cand_den)))
    n = same_length(ref_num=r, ref_den=nr, cand_num=c, cand_den=nc)
    r_total, nr_total, c_total, nc_total = r.sum(), nr.sum(), c.sum(), nc.sum()
    log_ratio = c_total / nc_total - r_total / nr_total
    influence = n * (c - c_total / nc_total * nc) / nc_total - n * (r - r_total / nr_total * nr) / nr_total
    return 100.0 * np.expm1(log_ratio) + 100.0 * math.exp(log_ratio) * influence
