"""One-call comparisons: interval, verdict and power numbers for one metric of a candidate against the reference."""

from __future__ import annotations

from dataclasses import dataclass

from numpy.typing import ArrayLike

from precisionlab.eval.stats.bootstrap import Interval
from precisionlab.eval.stats.inputs import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Groups,
    Method,
    Verdict,
    as_vector,
    check_threshold,
    is_binary,
)
from precisionlab.eval.stats.intervals import paired_bootstrap_mean
from precisionlab.eval.stats.mcnemar import McNemar, mcnemar_exact
from precisionlab.eval.stats.perplexity import RatioMethod, SkewCheck, paired_bootstrap_ratio, perplexity_skew
from precisionlab.eval.stats.power import examples_needed, min_detectable_difference, perplexity_effects
from precisionlab.eval.stats.verdict import verdict


@dataclass(frozen=True)
class Comparison:
    """Everything a results table needs for one metric of one candidate against the reference.

    ``interval`` is in the threshold's unit (percentage points or percent); ``min_detectable``
    and ``examples_needed`` use the same unit, alpha = 1 - confidence and 80 % power. ``note``: what a reader must
    know beside the numbers (empty when nothing; perplexity: the skewness guard, see ``compare_perplexity``);
    ``skew``: the skewness guard of a perplexity comparison.
    """

    interval: Interval
    verdict: Verdict
    max_drop: float
    higher_is_better: bool
    min_detectable: float
    examples_needed: int | None
    mcnemar: McNemar | None = None
    note: str = ""
    skew: SkewCheck | None = None


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
    threshold = check_threshold(max_drop)
    interval = paired_bootstrap_mean(ref, cand, n_resamples, seed, confidence, percent=percent, groups=groups,
                                     method=method, score_interval=score_interval)
    ref_values, cand_values = as_vector(ref, "ref"), as_vector(cand, "cand")
    scale = 100.0 if interval.unit == "pp" else 1.0
    differences = scale * (cand_values - ref_values)
    binary = is_binary(ref_values, cand_values)
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
    method: RatioMethod = "guarded",
    power: float = 0.8,
) -> Comparison:
    """Percent perplexity increase with its interval and verdict (lower is better).

    ``ref_nll[i]`` / ``cand_nll[i]``: summed NLL of document i's scored tokens; ``tokens[i]``:
    how many (``cand_tokens`` when the candidate scored a different count). ``max_drop`` is the
    largest acceptable increase in percent.

    The interval is ``method="guarded"`` (see ``stats.perplexity``): the expanded percentile and the studentized
    bootstrap of the log ratio joined, and, when the per-document effects are too skewed for that many documents
    (a few documents carry the damage: ``perplexity_skew``), the end on the side of the skew taken from
    Cantelli's bound. Then ``note`` says so, with the skewness and the documents a bootstrap end needs, and
    ``examples_needed`` is at least that many documents.
    """
    threshold = check_threshold(max_drop)
    cand_den = tokens if cand_tokens is None else cand_tokens
    interval = paired_bootstrap_ratio(ref_nll, tokens, cand_nll, cand_den, n_resamples, seed, confidence,
                                      groups=groups, method=method)
    effects = perplexity_effects(ref_nll, tokens, cand_nll, cand_den)
    needed = examples_needed(effects, threshold, False, 1.0 - confidence, power, groups=groups)
    skew = perplexity_skew(ref_nll, tokens, cand_nll, cand_den, groups=groups, confidence=confidence)
    note = ""
    if interval.method.endswith("+cantelli"):
        unit = "documents" if skew.clusters == skew.units else f"groups ({skew.units_needed} documents)"
        note = (f"damage concentrated in few documents: the per-document effects have skewness {skew.skewness:+.2f}, "
                f"and a bootstrap {skew.side} end needs at least {skew.needed} {unit} at that skewness "
                f"({skew.clusters} here); the {skew.side} end is Cantelli's distribution-free bound")
        if needed is not None:
            needed = max(needed, skew.units_needed)
    return Comparison(
        interval=interval,
        verdict=verdict(interval, threshold, higher_is_better=False),
        max_drop=threshold,
        higher_is_better=False,
        min_detectable=min_detectable_difference(effects, 1.0 - confidence, power, groups=groups),
        examples_needed=needed,
        note=note,
        skew=skew,
    )
