"""Paired statistics: intervals, McNemar, verdicts and power, validated against independent sources.

Expected values come from exact arithmetic (fractions, math.comb), closed forms (Student t for 1
and 2 degrees of freedom, the bootstrap's known mean and variance), scipy where it is installed,
and simulation on synthetic paired data whose true difference is known by construction.

Coverage simulations draw 1000 datasets (binomial sd of a 95 % coverage estimate: 0.7 %) and use
1000 resamples per interval instead of 10,000: the resample count only sets the Monte Carlo noise
of the two endpoint quantiles (about 0.09 standard errors each at 1000 resamples), which lowers
coverage by a second-order amount (about 0.1 %), far inside the 93-97 % band. A slow test repeats
one simulation at the full 10,000 resamples.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from precisionlab.eval import stats

NORMAL = NormalDist()
Z_80 = NORMAL.inv_cdf(0.975) + NORMAL.inv_cdf(0.8)      # 2.8016 (alpha = 0.05, 80 % power)


# --------------------------------------------------------------------------- synthetic data


def paired_binary(rng: np.random.Generator, n: int, p_ref: float, p_b: float, p_c: float) -> tuple[np.ndarray, ...]:
    """n paired 0/1 outcomes: P(ref right) = p_ref, P(ref right, cand wrong) = p_b,
    P(ref wrong, cand right) = p_c; the true difference cand - ref is p_c - p_b."""
    both_right = p_ref - p_b
    category = np.digitize(rng.random(n), [both_right, both_right + p_b, both_right + p_b + p_c])
    ref = (category == 0) | (category == 1)
    cand = (category == 0) | (category == 2)
    return ref, cand


def document_nlls(rng: np.random.Generator, n: int, log_increase: float) -> tuple[np.ndarray, ...]:
    """Per-document summed NLLs of two models on n documents of 80-300 tokens.

    Documents differ in difficulty; the candidate's damage per token is ``log_increase * g`` with
    ``g ~ Exponential(1)`` (skewed: a few documents suffer most), so the corpus mean NLL rises by
    ``log_increase`` and the true perplexity increase is ``100 * expm1(log_increase)``.
    """
    tokens = rng.integers(80, 300, n).astype(float)
    ref = tokens * rng.normal(2.5, 0.4, n) + rng.normal(0, 1, n) * np.sqrt(tokens) * 1.5
    cand = ref + tokens * log_increase * rng.exponential(1.0, n) + rng.normal(0, 1, n) * np.sqrt(tokens) * 0.3
    return ref, cand, tokens


# --------------------------------------------------------------------------- estimates and the engine


def test_mean_difference_of_binary_scores_is_in_percentage_points() -> None:
    ref = [1, 1, 0, 1, 0, 1, 1, 0]
    cand = [1, 0, 0, 1, 1, 0, 1, 0]
    interval = stats.paired_bootstrap_mean(ref, cand, 1000)
    expected = Fraction(100) * (Fraction(sum(cand), 8) - Fraction(sum(ref), 8))   # -12.5 pp
    assert interval.estimate == float(expected)
    assert interval.unit == "pp" and interval.n == 8 and interval.groups == 8
    assert interval.low <= interval.estimate <= interval.high
    raw = stats.paired_bootstrap_mean(ref, cand, 1000, percent=False)
    assert raw.estimate == float(expected / 100) and raw.unit == ""


def test_fractional_scores_stay_in_their_units_unless_asked() -> None:
    ref, cand = [0.5, 0.25, 0.75], [0.25, 0.25, 0.5]
    assert stats.paired_bootstrap_mean(ref, cand, 1000).unit == ""
    assert stats.paired_bootstrap_mean(ref, cand, 1000, percent=True).estimate == pytest.approx(-100 / 6)


def test_perplexity_ratio_estimate_is_the_corpus_formula() -> None:
    ref_nll, cand_nll, tokens = [20.0, 35.0, 9.0], [21.0, 36.5, 9.0], [10, 15, 4]
    interval = stats.paired_bootstrap_ratio(ref_nll, tokens, cand_nll, tokens, 1000)
    expected = 100 * (math.exp(sum(cand_nll) / 29) / math.exp(sum(ref_nll) / 29) - 1)
    assert interval.estimate == pytest.approx(expected, rel=1e-12)
    assert interval.unit == "%"


def test_bootstrap_distribution_has_the_known_mean_and_variance() -> None:
    # The bootstrap mean of resampled means is the sample mean; its variance is
    # (1/n) * (1/n) * sum (x - mean)^2, the plug-in variance over n.
    rng = np.random.default_rng(1)
    values = rng.normal(0.0, 1.0, 50)
    totals = stats.resampled_totals(values[:, None], 20_000, seed=3)[:, 0] / 50
    plug_in_var = float(np.mean((values - values.mean()) ** 2)) / 50
    assert totals.mean() == pytest.approx(values.mean(), abs=4 * math.sqrt(plug_in_var / 20_000))
    assert totals.var() == pytest.approx(plug_in_var, rel=0.05)


def test_seeded_and_reproducible() -> None:
    rng = np.random.default_rng(2)
    ref, cand = paired_binary(rng, 300, 0.7, 0.1, 0.06)
    first = stats.paired_bootstrap_mean(ref, cand, seed=11)
    assert stats.paired_bootstrap_mean(ref, cand, seed=11) == first
    assert stats.paired_bootstrap_mean(ref, cand, seed=12) != first


def test_ten_thousand_resamples_of_a_thousand_units_take_well_under_a_second() -> None:
    rng = np.random.default_rng(3)
    ref, cand = paired_binary(rng, 1000, 0.7, 0.1, 0.06)
    nll_ref, nll_cand, tokens = document_nlls(rng, 1000, 0.02)
    start = time.process_time()
    stats.paired_bootstrap_mean(ref, cand)
    stats.paired_bootstrap_ratio(nll_ref, tokens, nll_cand, tokens)
    assert (time.process_time() - start) / 2 < 1.0


def test_groups_of_one_unit_change_nothing() -> None:
    rng = np.random.default_rng(4)
    ref, cand = paired_binary(rng, 120, 0.7, 0.1, 0.06)
    plain = stats.paired_bootstrap_mean(ref, cand, 2000)
    grouped = stats.paired_bootstrap_mean(ref, cand, 2000, groups=[f"u{i}" for i in range(120)])
    assert grouped == plain


def test_grouped_ratio_resamples_group_totals() -> None:
    # The cluster bootstrap of documents equals the plain bootstrap of per-group sums.
    rng = np.random.default_rng(5)
    ref, cand, tokens = document_nlls(rng, 30, 0.03)
    groups = np.arange(30) % 7
    summed = [np.bincount(groups, weights=column) for column in (ref, tokens, cand)]
    grouped = stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, 2000, groups=groups.tolist())
    direct = stats.paired_bootstrap_ratio(summed[0], summed[1], summed[2], summed[1], 2000)
    assert grouped.groups == 7 and grouped.n == 30
    assert (grouped.estimate, grouped.low, grouped.high) == pytest.approx((direct.estimate, direct.low, direct.high))


def test_one_sample_ratio_of_sums() -> None:
    agree, tokens = [9, 18, 4], [10, 20, 5]
    interval = stats.bootstrap_ratio(agree, tokens, 1000, percent=True)
    assert interval.estimate == pytest.approx(100 * 31 / 35) and interval.unit == "%"


@pytest.mark.parametrize("bad", [
    dict(ref=[1, 0, 1], cand=[1, 0]),
    dict(ref=[1.0], cand=[0.0]),
    dict(ref=[1.0, float("nan")], cand=[0.0, 1.0]),
    dict(ref=[[1.0, 0.0]], cand=[[0.0, 1.0]]),
])
def test_bad_inputs_are_value_errors(bad: dict[str, list[float]]) -> None:
    with pytest.raises(ValueError):
        stats.paired_bootstrap_mean(bad["ref"], bad["cand"], 1000)


def test_bad_options_are_value_errors() -> None:
    with pytest.raises(ValueError, match="n_resamples"):
        stats.paired_bootstrap_mean([0, 1], [1, 1], 10)
    with pytest.raises(ValueError, match="confidence"):
        stats.paired_bootstrap_mean([0, 1], [1, 1], 1000, confidence=95)
    with pytest.raises(ValueError, match="method"):
        stats.paired_bootstrap_mean([0, 1], [1, 1], 1000, method="basic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token"):
        stats.paired_bootstrap_ratio([1.0, 2.0], [3, 0], [1.0, 2.0], [3, 0], 1000)
    with pytest.raises(ValueError, match="groups"):
        stats.paired_bootstrap_mean([0, 1, 1], [1, 1, 0], 1000, groups=["a", "a", "a"])


# --------------------------------------------------------------------------- Student t and interval levels


@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.975, 0.995, 0.9995])
def test_t_quantile_matches_the_closed_forms_for_one_and_two_degrees(p: float) -> None:
    assert stats.student_t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
    assert stats.student_t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)
    assert stats.student_t_quantile(1 - p, 5) == -stats.student_t_quantile(p, 5)


def test_t_quantile_matches_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy cross-checks the t quantile")
    # every df of the exact series up to 40, its upper end and the expansion beyond it
    for df in [*range(1, 41), 99, 250, 299, 300, 301, 302, 500, 1000, 10_000, 1_000_000]:
        for p in (0.8, 0.975, 0.995, 0.9995):
            assert stats.student_t_quantile(p, df) == pytest.approx(float(scipy_stats.t.ppf(p, df)), rel=1e-9)


def test_expanded_levels_are_wider_and_tend_to_the_plain_ones() -> None:
    low, high = stats.expanded_levels(0.95, 40)
    expected = NORMAL.cdf(-math.sqrt(40 / 39) * stats.student_t_quantile(0.975, 39))
    assert low == pytest.approx(expected) and high == pytest.approx(1 - expected)
    assert low < 0.025
    assert stats.expanded_levels(0.95, 100_000)[0] == pytest.approx(0.025, abs=1e-4)


def test_percentile_and_bca_agree_with_scipy_bootstrap() -> None:
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy cross-checks the interval methods")
    rng = np.random.default_rng(6)
    differences = rng.exponential(1.0, 60) - 0.8        # skewed, so BCa differs from percentile
    zeros = np.zeros(60)
    for ours, theirs in (("percentile", "percentile"), ("bca", "BCa")):
        mine = stats.paired_bootstrap_mean(zeros, differences, 20_000, method=ours)  # type: ignore[arg-type]
        reference = scipy_stats.bootstrap((differences,), np.mean, n_resamples=20_000, method=theirs,
                                          random_state=np.random.default_rng(7)).confidence_interval
        width = reference.high - reference.low
        assert mine.low == pytest.approx(reference.low, abs=0.04 * width)
        assert mine.high == pytest.approx(reference.high, abs=0.04 * width)


# --------------------------------------------------------------------------- McNemar


def exact_two_sided(k: int, n: int) -> Fraction:
    """Sum of the Binomial(n, 1/2) probabilities no larger than that of k (enumeration)."""
    observed = math.comb(n, k)
    return min(Fraction(1), Fraction(sum(math.comb(n, j) for j in range(n + 1) if math.comb(n, j) <= observed), 2**n))


def test_mcnemar_counts_the_discordant_pairs_and_a_hand_value() -> None:
    ref = [1] * 8 + [0] * 4 + [1] * 10 + [0] * 5
    cand = [0] * 8 + [1] * 4 + [1] * 10 + [0] * 5
    result = stats.mcnemar_exact(ref, cand)
    assert (result.b, result.c, result.discordant) == (8, 4, 12)
    # 2 * (C(12,0) + ... + C(12,4)) / 2^12 = 2 * 794 / 4096
    assert result.p_value == float(Fraction(2 * 794, 4096))


@pytest.mark.parametrize("n", [0, 1, 2, 7, 12, 25, 40])
def test_binomial_p_matches_exact_enumeration(n: int) -> None:
    for k in range(n + 1):
        assert stats.binomial_two_sided_p(k, n) == float(exact_two_sided(k, n))


def test_binomial_p_matches_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy cross-checks the binomial test")
    for n in range(0, 41):
        for k in range(n + 1):
            expected = 1.0 if n == 0 else scipy_stats.binomtest(k, n, 0.5).pvalue
            assert stats.binomial_two_sided_p(k, n) == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert stats.binomial_two_sided_p(2400, 5000) == pytest.approx(scipy_stats.binomtest(2400, 5000).pvalue, rel=1e-9)


def test_mcnemar_rejects_non_binary_outcomes() -> None:
    with pytest.raises(ValueError, match="binary"):
        stats.mcnemar_exact([0.5, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        stats.mcnemar_exact([1, 0, 1], [1, 0])


# --------------------------------------------------------------------------- verdict


def interval(low: float, high: float, estimate: float | None = None) -> stats.Interval:
    return stats.Interval(estimate=(low + high) / 2 if estimate is None else estimate, low=low, high=high,
                          confidence=0.95, n=100)


@pytest.mark.parametrize(("low", "high", "higher_is_better", "expected"), [
    (-0.9, 0.5, True, "pass"),            # whole interval above -1
    (-3.0, -1.1, True, "fail"),           # whole interval below -1
    (-1.5, 0.5, True, "inconclusive"),    # straddles -1
    (-1.0, 0.5, True, "inconclusive"),    # touches the threshold: not cleared
    (-0.2, 0.9, False, "pass"),           # perplexity: increase below 1 %
    (1.2, 4.0, False, "fail"),            # increase above 1 %
    (0.5, 1.5, False, "inconclusive"),
    (-0.5, 1.0, False, "inconclusive"),
])
def test_verdict_uses_the_whole_interval(low: float, high: float, higher_is_better: bool, expected: str) -> None:
    assert stats.verdict(interval(low, high), 1.0, higher_is_better) == expected


def test_verdict_never_follows_the_point_estimate() -> None:
    # The estimate sits far beyond the threshold on both sides, the interval straddles it.
    assert stats.verdict(interval(-2.0, 0.2, estimate=-1.9), 1.0, True) == "inconclusive"
    assert stats.verdict(interval(-2.0, 0.2, estimate=0.1), 1.0, True) == "inconclusive"


def test_verdict_rejects_a_bad_threshold() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="max_drop"):
            stats.verdict(interval(-1, 1), bad, True)


# --------------------------------------------------------------------------- power


def test_min_detectable_difference_is_the_textbook_formula() -> None:
    differences = [1.0, -2.0, 0.0, 3.0, -1.0, 0.5, 2.0, -0.5]
    sd = float(np.std(differences, ddof=1))
    assert stats.min_detectable_difference(differences) == pytest.approx(Z_80 * sd / math.sqrt(8))
    assert round(Z_80, 4) == 2.8016


def test_examples_needed_is_the_formula_and_none_on_the_threshold() -> None:
    differences = np.array([0.0, -1.0, 1.0, -2.0, 0.0, 1.0, -1.0, 0.0, -3.0, 1.0])   # mean -0.4
    sd = float(np.std(differences, ddof=1))
    margin = abs(-0.4 - (-1.0))
    expected = math.ceil((Z_80 * sd / margin) ** 2)
    assert stats.examples_needed(differences, 1.0, True) == expected
    assert stats.examples_needed(differences - differences.mean() - 1.0, 1.0, True) is None


def test_clustered_standard_error_matches_a_direct_computation() -> None:
    differences = np.array([1.0, 2.0, 0.0, -1.0, 3.0, 1.0, 0.0])
    groups = ["a", "a", "b", "b", "b", "c", "d"]
    mean = differences.mean()
    residuals = [sum(differences[i] - mean for i, g in enumerate(groups) if g == name) for name in "abcd"]
    expected = math.sqrt(4 / 3 * sum(r * r for r in residuals)) / 7
    assert stats.standard_error(differences, groups=groups) == pytest.approx(expected)


def test_perplexity_effects_average_to_the_estimate() -> None:
    rng = np.random.default_rng(8)
    ref, cand, tokens = document_nlls(rng, 40, 0.05)
    effects = stats.perplexity_effects(ref, tokens, cand, tokens)
    interval_ = stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, 5000)
    assert effects.mean() == pytest.approx(interval_.estimate, rel=1e-9)
    # the delta-method standard error agrees with the bootstrap one
    assert float(np.std(effects, ddof=1)) / math.sqrt(40) == pytest.approx(interval_.se, rel=0.1)


def test_compare_scores_and_perplexity_bundle_consistent_units() -> None:
    rng = np.random.default_rng(9)
    ref, cand = paired_binary(rng, 200, 0.7, 0.1, 0.05)
    result = stats.compare_scores(ref, cand, 1.0, n_resamples=2000)
    differences = 100.0 * (cand.astype(float) - ref.astype(float))
    assert result.interval.unit == "pp"
    assert result.min_detectable == pytest.approx(stats.min_detectable_difference(differences, binary_scale=100.0))
    # with 30 discordant pairs the score test's detectable difference is close to the plug-in one
    assert result.min_detectable == pytest.approx(stats.min_detectable_difference(differences), rel=0.08)
    needed = stats.examples_needed(differences, 1.0, True, binary_scale=100.0)
    assert result.examples_needed == needed
    assert needed == pytest.approx(stats.examples_needed(differences, 1.0, True), rel=0.1)
    assert result.mcnemar == stats.mcnemar_exact(ref, cand)
    assert result.verdict == stats.verdict(result.interval, 1.0, True)
    nll_ref, nll_cand, tokens = document_nlls(rng, 40, 0.2)
    ppl = stats.compare_perplexity(nll_ref, nll_cand, tokens, 1.0, n_resamples=2000)
    assert ppl.verdict == "fail" and ppl.interval.low > 1.0 and not ppl.higher_is_better


# --------------------------------------------------------------------------- simulation: coverage


def coverage_binary(sims: int, resamples: int) -> float:
    # n = 100 examples, 15 % discordant pairs (10 % lost, 5 % gained): true difference -5 pp.
    rng = np.random.default_rng(20)
    hits = 0
    for i in range(sims):
        ref, cand = paired_binary(rng, 100, 0.7, 0.10, 0.05)
        hits += stats.paired_bootstrap_mean(ref, cand, resamples, seed=i).contains(-5.0)
    return hits / sims


def coverage_perplexity(sims: int, resamples: int) -> float:
    # 40 documents, skewed per-document damage, mean NLL per token +0.02: truth 100 * expm1(0.02).
    rng = np.random.default_rng(21)
    truth = 100 * math.expm1(0.02)
    hits = 0
    for i in range(sims):
        ref, cand, tokens = document_nlls(rng, 40, 0.02)
        hits += stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, resamples, seed=i).contains(truth)
    return hits / sims


def test_interval_covers_a_known_binary_difference_95_percent_of_the_time() -> None:
    assert 0.93 <= coverage_binary(1000, 1000) <= 0.97


def test_interval_covers_a_known_perplexity_increase_95_percent_of_the_time() -> None:
    assert 0.93 <= coverage_perplexity(1000, 1000) <= 0.97


@pytest.mark.slow
def test_coverage_at_the_full_resample_count() -> None:
    assert 0.93 <= coverage_binary(1000, stats.DEFAULT_RESAMPLES) <= 0.97
    assert 0.93 <= coverage_perplexity(1000, stats.DEFAULT_RESAMPLES) <= 0.97


def test_resampling_tokens_instead_of_documents_is_overconfident() -> None:
    # 20 documents of 30 tokens; the damage differs between documents (a per-document effect),
    # so tokens of one document are correlated. Documents as units keep the coverage; tokens
    # as units give intervals far too narrow.
    rng = np.random.default_rng(22)
    truth = 100 * math.expm1(0.05)
    documents_hit = tokens_hit = 0
    sims = 100
    for i in range(sims):
        base = rng.normal(2.5, 0.6, (20, 1)) + rng.normal(0, 1.0, (20, 30))
        cand = base + 0.05 * rng.exponential(1.0, (20, 1)) + rng.normal(0, 0.05, (20, 30))
        per_doc = np.full(20, 30.0)
        documents_hit += stats.paired_bootstrap_ratio(base.sum(1), per_doc, cand.sum(1), per_doc, 1000,
                                                      seed=i).contains(truth)
        ones = np.ones(600)
        tokens_hit += stats.paired_bootstrap_ratio(base.ravel(), ones, cand.ravel(), ones, 400,
                                                   seed=i).contains(truth)
    assert documents_hit / sims >= 0.85
    assert tokens_hit / sims <= 0.6


def test_grouped_units_need_the_cluster_bootstrap() -> None:
    # 12 topics of 4 examples with a shared topic effect: resampling topics covers, resampling
    # examples as if independent does not.
    rng = np.random.default_rng(23)
    groups = np.repeat(np.arange(12), 4)
    grouped_hit = plain_hit = 0
    sims = 300
    for i in range(sims):
        differences = -1.0 + rng.normal(0, 4.0, 12)[groups] + rng.normal(0, 1.0, 48)
        zeros = np.zeros(48)
        grouped_hit += stats.paired_bootstrap_mean(zeros, differences, 1000, seed=i, groups=groups).contains(-1.0)
        plain_hit += stats.paired_bootstrap_mean(zeros, differences, 1000, seed=i).contains(-1.0)
    assert grouped_hit / sims >= 0.91
    assert plain_hit / sims <= 0.8


# --------------------------------------------------------------------------- simulation: verdict and power


def verdict_rates(true_difference: float, sims: int, seed: int) -> dict[str, float]:
    """Verdicts at --max-drop 2 pp on 100 binary examples with 20 % discordant pairs."""
    p_b, p_c = (0.2 - true_difference / 100) / 2, (0.2 + true_difference / 100) / 2
    rng = np.random.default_rng(seed)
    counts = {"pass": 0, "fail": 0, "inconclusive": 0}
    for i in range(sims):
        ref, cand = paired_binary(rng, 100, 0.7, p_b, p_c)
        counts[stats.verdict(stats.paired_bootstrap_mean(ref, cand, 1000, seed=i), 2.0, True)] += 1
    return {name: count / sims for name, count in counts.items()}


def population_mdd(true_difference: float) -> float:
    """MDD of 100 examples from the population sd of the paired difference (pp)."""
    variance = 0.2 - (true_difference / 100) ** 2           # E[d^2] - E[d]^2 with d in {-1, 0, 1}
    return Z_80 * 100 * math.sqrt(variance) / math.sqrt(100)


def difference_at(multiple: float) -> float:
    """The true difference sitting ``multiple`` MDDs above the threshold -2 pp (fixed point)."""
    difference = 0.0
    for _ in range(50):
        difference = -2.0 + multiple * population_mdd(difference)
    return difference


def test_inconclusive_when_the_effect_is_below_the_detectable_size() -> None:
    # The truth sits a quarter of an MDD (about 3 pp) above the threshold: with 100 examples an
    # honest interval should rarely decide. Normal theory: pass 9 %, fail 0.4 %.
    rates = verdict_rates(difference_at(0.25), 500, seed=24)
    assert rates["inconclusive"] >= 0.85
    assert rates["fail"] <= 0.03


def test_the_detectable_difference_is_detected_with_80_percent_power() -> None:
    # The truth sits one MDD above the threshold: the interval should clear it about 80 % of the
    # time (79 % with the expanded interval's slightly wider t quantiles).
    rates = verdict_rates(difference_at(1.0), 1000, seed=25)
    assert 0.72 <= rates["pass"] <= 0.86
    assert rates["fail"] == 0.0


# --------------------------------------------------------------------------- binary scores: Tango's score interval
#
# With few discordant pairs the bootstrap of a 0/1 difference cannot show variation the sample does not
# hold (no discordant pair: the interval [0, 0]). For 0/1 scores the interval is the union of the
# bootstrap interval and Tango's (1998) score interval for the difference of paired proportions.
# Independent sources below: the closed form of Tango's bound with b = c = 0 (z^2 / (n + z^2)), the
# score statistic evaluated with a constrained maximum likelihood found by scipy's optimiser (not the
# quadratic used in stats.py), the non-iterative quartic of Yang, Sun and Hardin (2012, Statistics in
# Medicine 31: 1611-1612) solved by numpy.roots, and exact coverage by enumerating every (b, c).

Z95 = NORMAL.inv_cdf(0.975)


def no_discordance(n: int, right: int) -> tuple[np.ndarray, np.ndarray]:
    scores = np.array([1.0] * right + [0.0] * (n - right))
    return scores, scores.copy()


def test_no_discordant_pair_gives_an_interval_of_honest_width() -> None:
    ref, cand = no_discordance(100, 75)
    result = stats.compare_scores(ref, cand, max_drop=1.0, n_resamples=1000)
    bound = 100 * Z95**2 / (100 + Z95**2)                      # 3.70 pp: Tango's bound with b = c = 0
    assert result.interval.estimate == 0.0
    assert result.interval.low == pytest.approx(-bound, rel=1e-9)
    assert result.interval.high == pytest.approx(bound, rel=1e-9)
    assert result.verdict == "inconclusive"                    # 100 examples cannot show a loss below 1 pp
    assert result.min_detectable == pytest.approx(bound, rel=1e-6)
    # the interval clears -1 pp once z^2 / (n + z^2) < 1 %: n > 99 z^2 = 380.3
    assert result.examples_needed == math.ceil(99 * Z95**2) == 381
    for n, expected in ((380, "inconclusive"), (381, "pass"), (1000, "pass")):
        assert stats.compare_scores(*no_discordance(n, n // 2), 1.0, n_resamples=1000).verdict == expected, n


def test_no_discordant_pair_with_topic_groups_stays_inconclusive() -> None:
    ref, cand = no_discordance(100, 75)
    groups = np.arange(100) // 3                                 # 34 topics
    result = stats.compare_scores(ref, cand, 1.0, groups=groups, n_resamples=1000)
    assert result.interval.low < -3.0 and result.interval.high > 3.0 and result.verdict == "inconclusive"
    assert result.min_detectable > 3.0 and result.examples_needed is not None and result.examples_needed > 300


def test_the_bootstrap_alone_is_still_available() -> None:
    ref, cand = no_discordance(100, 75)
    plain = stats.paired_bootstrap_mean(ref, cand, 1000, score_interval=False)
    assert (plain.low, plain.high) == (0.0, 0.0) and plain.method == "expanded"
    honest = stats.paired_bootstrap_mean(ref, cand, 1000)
    assert honest.method == "expanded+tango" and honest.low < 0 < honest.high


def constrained_discordance_by_optimiser(b: int, c: int, n: int, delta: float) -> float:
    """max over p_b of the multinomial log-likelihood with p_c = p_b + delta (scipy), returned as p_b + p_c."""
    optimize = pytest.importorskip("scipy.optimize", reason="scipy finds the constrained maximum independently")
    low, high = max(0.0, -delta), min(1.0, (1.0 - delta) / 2.0)
    eps = 1e-15

    def negative_loglik(p_b: float) -> float:
        p_c = p_b + delta
        rest = 1.0 - p_b - p_c
        return -(b * math.log(max(p_b, eps)) + c * math.log(max(p_c, eps)) + (n - b - c) * math.log(max(rest, eps)))

    found = optimize.minimize_scalar(negative_loglik, bounds=(low, high), method="bounded",
                                     options={"xatol": 1e-13, "maxiter": 2000})
    return 2 * float(found.x) + delta


@pytest.mark.parametrize(("b", "c", "n"), [(0, 0, 100), (3, 0, 100), (9, 4, 100), (1, 7, 21), (20, 40, 160),
                                           (6, 16, 161), (12, 2, 50), (0, 5, 30)])
def test_tango_endpoints_solve_the_score_equation(b: int, c: int, n: int) -> None:
    low, high = stats.tango_interval(b, c, n)
    assert low < (c - b) / n < high
    for delta, sign in ((low, 1.0), (high, -1.0)):
        if abs(delta) == 1.0:
            continue
        discordance = constrained_discordance_by_optimiser(b, c, n, delta)
        score = (c - b - n * delta) / math.sqrt(n * (discordance - delta**2))
        assert score == pytest.approx(sign * Z95, abs=1e-4)


def tango_by_quartic(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Yang, Sun & Hardin's non-iterative Tango interval: the real roots of one quartic, here solved by numpy.

    In their notation the difference is (b' - c') / N with b' the (success, failure) cell: for cand - ref,
    b' = c (candidate right only) and c' = b."""
    bp, cp, big_n = float(c), float(b), float(n)
    g = z * z
    m0 = big_n**2 * (big_n / g + 1) ** 2
    m1 = -big_n * (bp - cp) * (big_n / g + 1) * (4 * big_n / g + 1)
    m2 = 2 * big_n * (bp - cp) ** 2 * (3 * big_n / g + 2) / g - big_n**2 * ((bp + cp) / g + 1)
    m3 = big_n * (bp - cp) * (2 * (bp + cp) / g + 1) - (bp - cp) ** 3 * (4 * big_n / g + 1) / g
    m4 = (bp - cp) ** 2 * ((bp - cp) ** 2 / g - (bp + cp)) / g
    roots = np.roots([m0, m1, m2, m3, m4])
    real = [float(r.real) for r in roots if abs(r.imag) < 1e-9 and -1 <= r.real <= 1]
    return min(real), max(real)   # the estimate and one extraneous value are roots too, between the two limits


def test_tango_matches_the_non_iterative_quartic() -> None:
    for n in (20, 57, 100):
        for b in range(0, 12):
            for c in range(0, 12):
                if b + c == 0 or b + c > n:
                    continue   # the quartic has a double root at 0 there; the b = c = 0 case has its closed form
                low, high = stats.tango_interval(b, c, n)
                assert (low, high) == pytest.approx(tango_by_quartic(b, c, n), abs=1e-7), (b, c, n)


def test_tango_is_symmetric_and_bounded() -> None:
    low, high = stats.tango_interval(3, 9, 40)
    mirrored = stats.tango_interval(9, 3, 40)
    assert mirrored == pytest.approx((-high, -low), abs=1e-12)
    assert stats.tango_interval(40, 0, 40)[0] == -1.0 and stats.tango_interval(0, 40, 40)[1] == 1.0
    assert stats.tango_interval(0, 0, 100, confidence=0.99)[1] == pytest.approx(
        NORMAL.inv_cdf(0.995) ** 2 / (100 + NORMAL.inv_cdf(0.995) ** 2))
    for bad in ((-1, 0, 10), (6, 5, 10), (0, 0, 0)):
        with pytest.raises(ValueError):
            stats.tango_interval(*bad)


def multinomial_pmf(n: int, p_b: float, p_c: float) -> list[tuple[int, int, float]]:
    out = []
    for b in range(n + 1):
        for c in range(n + 1 - b):
            log_p = (math.lgamma(n + 1) - math.lgamma(b + 1) - math.lgamma(c + 1) - math.lgamma(n - b - c + 1)
                     + b * math.log(p_b) + c * math.log(p_c) + (n - b - c) * math.log1p(-p_b - p_c))
            if log_p > -30:
                out.append((b, c, math.exp(log_p)))
    return out


@pytest.mark.parametrize(("n", "p_b", "p_c", "low", "high"), [
    (100, 0.10, 0.05, 0.94, 0.97),      # 15 expected discordant pairs
    (100, 0.04, 0.02, 0.93, 0.97),      # 6
    (200, 0.02, 0.01, 0.93, 0.97),      # 6
    (100, 0.02, 0.01, 0.95, 0.99),      # 3: an interval that must include 0 at b = c = 0 over-covers here
])
def test_exact_coverage_of_the_tango_interval(n: int, p_b: float, p_c: float, low: float, high: float) -> None:
    truth = p_c - p_b
    covered = sum(p for b, c, p in multinomial_pmf(n, p_b, p_c)
                  if stats.tango_interval(b, c, n)[0] <= truth <= stats.tango_interval(b, c, n)[1])
    assert low <= covered <= high


def coverage_of_rare_discordance(sims: int, *, score_interval: bool) -> float:
    # 100 examples, 2 % lost and 1 % gained: 3 discordant pairs expected, none in 5 % of the datasets.
    rng = np.random.default_rng(26)
    hits = 0
    for i in range(sims):
        ref, cand = paired_binary(rng, 100, 0.7, 0.02, 0.01)
        hits += stats.paired_bootstrap_mean(ref, cand, 1000, seed=i, score_interval=score_interval).contains(-1.0)
    return hits / sims


def test_rare_discordance_needs_the_score_interval() -> None:
    # exact coverage by enumeration (the interval depends on b, c and n only): bootstrap 86 %, union 98 %
    assert coverage_of_rare_discordance(600, score_interval=False) <= 0.90
    assert coverage_of_rare_discordance(600, score_interval=True) >= 0.95


def clustered_binary(rng: np.random.Generator, sizes: list[int], p_b: float, p_c: float,
                     concentration: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paired 0/1 outcomes in topics whose discordance rates are Beta draws around p_b, p_c (topic effect)."""
    ref, cand, groups = [], [], []
    for g, size in enumerate(sizes):
        q_b = rng.beta(p_b * concentration, (1 - p_b) * concentration)
        q_c = rng.beta(p_c * concentration, (1 - p_c) * concentration)
        category = np.digitize(rng.random(size), [q_b, q_b + q_c])   # 0: lost, 1: gained, 2: concordant
        ref += list(category == 0)
        cand += list(category == 1)
        groups += [g] * size
    return np.array(ref, dtype=float), np.array(cand, dtype=float), np.array(groups)


TOPIC_SIZES = [1] * 4 + [2] * 4 + [3] * 8 + [4] * 16        # 100 examples in 32 topics, as the built-in choice set


@pytest.mark.parametrize(("p_b", "p_c", "concentration"), [(0.10, 0.05, 10.0), (0.02, 0.01, 3.0)])
def test_clustered_binary_coverage(p_b: float, p_c: float, concentration: float) -> None:
    # Tango alone ignores the topics (92 % in the second scenario), the cluster bootstrap alone collapses
    # with few discordant pairs (75 %); their union covers (95 % and 96 % in 1000 datasets).
    rng = np.random.default_rng(27)
    sims, hits = 600, 0
    for i in range(sims):
        ref, cand, groups = clustered_binary(rng, TOPIC_SIZES, p_b, p_c, concentration)
        interval = stats.paired_bootstrap_mean(ref, cand, 1000, seed=i, groups=groups)
        hits += interval.contains(100 * (p_c - p_b))
    assert 0.93 <= hits / sims <= 0.98
