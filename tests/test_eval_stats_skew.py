"""The perplexity verdict when a few documents carry the damage (stats.perplexity, stats.skew).

Independent sources: closed forms (Cantelli's factor sqrt(39) at 95 %, the Edgeworth constant from scipy's normal
density), scipy.stats.skew, a direct per-resample computation of the bootstrap-t (each resample's residuals formed
from the drawn documents themselves, not from the engine's sums of products), and a simulation whose truth is set
by construction: per-document NLLs whose population increase of the corpus perplexity is exactly --max-drop, so
every PASS is a wrong PASS. The data generator here is written apart from the one in benchmarks/.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionlab.eval import stats
from precisionlab.eval.stats.perplexity import ratio_table, studentized_log_ratio

MAX_DROP = 1.0


def documents_at_the_threshold(rng: np.random.Generator, n: int, damage: str,
                               noise: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n documents (100..250 tokens) whose population perplexity increase is exactly MAX_DROP percent.

    Candidate NLL = reference NLL + tokens * delta * D + noise * sqrt(tokens) * N(0, 1), where D >= 0 has mean 1
    and is independent of the tokens, so E[cand - ref] / E[tokens] = delta = log(1 + MAX_DROP / 100)."""
    tokens = rng.integers(100, 251, n).astype(float)
    ref = tokens * rng.uniform(2.0, 3.0, n) + rng.normal(0.0, 1.0, n) * np.sqrt(tokens)
    if damage == "lognormal":           # sigma 1.5, scaled to mean 1: exp(sigma^2 / 2) = exp(1.125)
        d = rng.lognormal(-1.125, 1.5, n)
    elif damage == "pareto":            # classical Pareto, shape 2.5, minimum 0.6: mean 2.5 * 0.6 / 1.5 = 1
        d = 0.6 * (1.0 - rng.random(n)) ** (-1.0 / 2.5)
    elif damage == "gamma1":
        d = rng.gamma(1.0, 1.0, n)
    elif damage == "gamma4":
        d = rng.gamma(4.0, 0.25, n)
    else:
        raise ValueError(damage)
    cand = ref + tokens * math.log1p(MAX_DROP / 100) * d + noise * np.sqrt(tokens) * rng.normal(0.0, 1.0, n)
    return ref, cand, tokens


def wrong_pass_rates(damage: str, n: int, datasets: int, resamples: int, seed: int) -> tuple[float, float]:
    """(after, before): the share of datasets whose compare_perplexity verdict is PASS, and the share whose
    expanded interval (the default before) ends below the threshold."""
    rng = np.random.default_rng(seed)
    after = before = 0
    for i in range(datasets):
        ref, cand, tokens = documents_at_the_threshold(rng, n, damage)
        result = stats.compare_perplexity(ref, cand, tokens, MAX_DROP, n_resamples=resamples, seed=i)
        assert (result.verdict == "pass") == (result.interval.high < MAX_DROP)
        after += result.verdict == "pass"
        before += stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, resamples, seed=i).high < MAX_DROP
    return after / datasets, before / datasets


# --------------------------------------------------------------------------- the parts, against closed forms


def test_the_constants_against_their_formulas() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    z = scipy_stats.norm.ppf(0.975)
    expected = ((2 * z * z + 1) * scipy_stats.norm.pdf(z) / (6 * 0.005)) ** 2
    assert stats.skew_documents_needed(1.0, 0.95) == math.ceil(expected) == 287   # 286.2 G1^2
    assert stats.skew_documents_needed(0.0, 0.95) == 2
    assert stats.cantelli_factor(0.95) == pytest.approx(math.sqrt(39.0), rel=1e-15)
    assert 1 / (1 + stats.cantelli_factor(0.9) ** 2) == pytest.approx(0.05)


def test_effect_skewness_is_scipys_adjusted_skewness() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    values = np.random.default_rng(1).lognormal(0.0, 1.0, 37)
    assert stats.effect_skewness(values) == pytest.approx(scipy_stats.skew(values, bias=False), rel=1e-12)
    assert stats.effect_skewness(np.array([1.0, 2.0])) == 0.0 and stats.effect_skewness(np.ones(9)) == 0.0


def test_studentized_interval_equals_a_direct_bootstrap_t() -> None:
    """The engine's resamples are ``default_rng(seed).integers(0, G, (B, G))`` (one chunk here); the same draws,
    with every resample's delta-method standard error formed from its own documents, give the same interval."""
    rng = np.random.default_rng(3)
    ref, cand, tokens = documents_at_the_threshold(rng, 30, "gamma1", noise=0.5)
    cand_tokens = tokens - rng.integers(0, 3, 30)                   # the candidate scored slightly fewer tokens
    values, _ = ratio_table(ref, tokens, cand, cand_tokens, None)
    low, high = studentized_log_ratio(values, 2000, 7, 0.95)

    def log_ratio_and_se(r: np.ndarray, nr: np.ndarray, c: np.ndarray, nc: np.ndarray) -> tuple[float, float]:
        a, b = c.sum() / nc.sum(), r.sum() / nr.sum()
        u = (c - a * nc) / nc.sum() - (r - b * nr) / nr.sum()
        return a - b, math.sqrt(float(np.sum(u * u)))

    estimate, se = log_ratio_and_se(ref, tokens, cand, cand_tokens)
    drawn = np.random.default_rng(7).integers(0, 30, size=(2000, 30), dtype=np.int32)
    student = []
    for rows in drawn:
        value, spread = log_ratio_and_se(ref[rows], tokens[rows], cand[rows], cand_tokens[rows])
        student.append((value - estimate) / spread)
    q_low, q_high = np.quantile(student, [0.025, 0.975])
    assert low == pytest.approx(estimate - q_high * se, rel=1e-9)
    assert high == pytest.approx(estimate - q_low * se, rel=1e-9)
    interval = stats.paired_bootstrap_ratio(ref, tokens, cand, cand_tokens, 2000, seed=7, method="studentized")
    assert interval.high == pytest.approx(100 * math.expm1(high), rel=1e-12)


def test_guarded_interval_is_the_union_then_cantelli_on_the_side_of_the_skew() -> None:
    rng = np.random.default_rng(4)
    ref, cand, tokens = documents_at_the_threshold(rng, 40, "lognormal")
    kwargs = {"n_resamples": 2000, "seed": 1}
    expanded = stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, **kwargs)
    student = stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, method="studentized", **kwargs)
    guarded = stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, method="guarded", **kwargs)
    check = stats.perplexity_skew(ref, tokens, cand, tokens)
    assert check.skewness > 1.5 and not check.trusted and check.side == "upper"
    assert guarded.method == "expanded+studentized+cantelli"
    assert guarded.low == min(expanded.low, student.low) and guarded.estimate == expanded.estimate
    d = cand - ref
    log_ratio = d.sum() / tokens.sum()
    u = (d - log_ratio * tokens) / tokens.sum()                        # influences of the log ratio
    cantelli = log_ratio + math.sqrt(39.0) * math.sqrt(40 / 39 * float(np.sum(u * u)))
    assert guarded.high == pytest.approx(max(expanded.high, student.high, 100 * math.expm1(cantelli)), rel=1e-12)
    assert guarded.high > max(expanded.high, student.high)


def test_symmetric_effects_keep_the_union_alone() -> None:
    """Effects that mirror each other (x and -x around the mean damage) have skewness exactly 0: no guard."""
    x = np.random.default_rng(5).normal(0.0, 1.0, 20)
    tokens = np.full(40, 150.0)
    ref = tokens * 2.5
    cand = ref + 1.5 + np.concatenate([x, -x])
    check = stats.perplexity_skew(ref, tokens, cand, tokens)
    assert abs(check.skewness) < 1e-9 and check.trusted
    result = stats.compare_perplexity(ref, cand, tokens, 1.0, n_resamples=1000)
    assert result.note == "" and result.interval.method == "expanded+studentized"


def test_the_note_says_how_many_documents_would_decide_it() -> None:
    rng = np.random.default_rng(6)
    ref, cand, tokens = documents_at_the_threshold(rng, 40, "pareto")
    result = stats.compare_perplexity(ref, cand, tokens, MAX_DROP, n_resamples=2000)
    check = result.skew
    assert check is not None and not check.trusted
    assert result.verdict == "inconclusive"
    assert f"needs at least {check.needed} documents" in result.note and "Cantelli" in result.note
    assert result.examples_needed is not None and result.examples_needed >= check.needed > 40


def test_bad_methods_and_too_few_documents_for_the_studentized_interval() -> None:
    args = ([10.0, 11, 12, 13], [5, 5, 5, 5], [10.5, 11, 12.2, 13], [5, 5, 5, 5])
    with pytest.raises(ValueError, match="method must be one of"):
        stats.paired_bootstrap_ratio(*args, method="student")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 5 documents"):
        stats.paired_bootstrap_ratio(*args, method="studentized")
    guarded = stats.paired_bootstrap_ratio(*args, method="guarded")      # 4 documents: the expanded part alone
    assert guarded == stats.paired_bootstrap_ratio(*args, method="expanded")


# --------------------------------------------------------------------------- the verdict at the threshold


@pytest.mark.parametrize("damage", ["lognormal", "pareto", "gamma1"])
def test_wrong_pass_at_the_threshold_with_40_documents(damage: str) -> None:
    """The bar, small: 300 datasets of 40 documents (binomial sd 0.9 % at 2.5 %), 500 resamples each."""
    after, before = wrong_pass_rates(damage, 40, 300, 500, seed=40)
    assert after <= 0.04, (damage, after, before)


def test_the_expanded_interval_alone_passes_wrongly() -> None:
    """The same simulation shows the defect the guard fixes: lognormal damage, the expanded interval."""
    _, before = wrong_pass_rates("lognormal", 40, 300, 500, seed=40)
    assert before > 0.08


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["lognormal", "pareto", "gamma1"])
def test_wrong_pass_at_the_threshold_with_40_documents_full(damage: str) -> None:
    """The bar at full size: 2000 datasets (binomial sd 0.35 % at 2.5 %), 1000 resamples each."""
    after, before = wrong_pass_rates(damage, 40, 2000, 1000, seed=41)
    assert after <= 0.04, (damage, after, before)


@pytest.mark.slow
@pytest.mark.parametrize("n", [40, 100])
def test_coverage_of_mild_damage_stays_near_95_percent(n: int) -> None:
    """Gamma(4) damage with per-token noise: the guarded interval's coverage of the true increase."""
    rng = np.random.default_rng(42)
    hits = 0
    for i in range(1000):
        ref, cand, tokens = documents_at_the_threshold(rng, n, "gamma4", noise=0.3)
        hits += stats.compare_perplexity(ref, cand, tokens, MAX_DROP, n_resamples=1000, seed=i).interval.contains(
            MAX_DROP)
    assert 0.93 <= hits / 1000 <= 0.97
