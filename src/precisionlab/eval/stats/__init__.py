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

Perplexity verdicts (``compare_perplexity``) use ``method="guarded"`` (``stats.perplexity``): the expanded
interval joined with the studentized bootstrap of the log ratio, and, when the per-document effects are too
skewed for the number of documents (a few documents carry the damage: ``stats.skew``), the end on the side of the
skew taken from Cantelli's distribution-free bound; the comparison's ``note`` then says so and how many documents
a bootstrap end needs.

Binary (0/1) scores: a bootstrap cannot show variation that the sample does not hold — with no
discordant pair every resample has difference 0 and the interval is [0, 0]. So for 0/1 scores
the interval is the union of the bootstrap interval and Tango's score interval for the
difference of paired proportions (``tango_interval``): Tango's is honest with few discordant
pairs (with none it is ``+-z^2/(n + z^2)``), the cluster bootstrap takes the topics into account
when there is variation to see, and the union keeps both properties (simulated and exact
coverage in docs/eval_statistics.md). The minimum detectable difference and the examples needed
use the matching score-test variances (``binary_scale=``).

Where each part lives (this module re-exports every public name, so ``from precisionlab.eval.stats import X``
keeps working):

    inputs      types (Verdict, Method, Groups), defaults, the checks of every input
    student_t   Student's t quantiles (no scipy)
    bootstrap   the engine: resampled totals, Interval, expanded / percentile / BCa levels
    intervals   paired_bootstrap_mean, bootstrap_ratio
    perplexity  paired_bootstrap_ratio: the perplexity increase, its studentized and guarded intervals
    skew        the skewness guard: when a few documents carry the damage
    tango       Tango's score interval for paired proportions
    mcnemar     the exact McNemar test
    verdict     PASS / FAIL / INCONCLUSIVE from an interval and a threshold
    power       standard errors, minimum detectable difference, examples needed
    compare     compare_scores, compare_perplexity: all of the above for one metric
"""

from __future__ import annotations

from precisionlab.eval.stats.bootstrap import Interval, expanded_levels, resampled_totals
from precisionlab.eval.stats.compare import Comparison, compare_perplexity, compare_scores
from precisionlab.eval.stats.inputs import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Groups, Method, Verdict
from precisionlab.eval.stats.intervals import bootstrap_ratio, paired_bootstrap_mean
from precisionlab.eval.stats.mcnemar import McNemar, binomial_two_sided_p, mcnemar_exact
from precisionlab.eval.stats.perplexity import RatioMethod, SkewCheck, paired_bootstrap_ratio, perplexity_skew
from precisionlab.eval.stats.power import (
    binary_examples_needed,
    binary_min_detectable,
    examples_needed,
    min_detectable_difference,
    perplexity_effects,
    standard_error,
)
from precisionlab.eval.stats.skew import cantelli_factor, effect_skewness, skew_documents_needed
from precisionlab.eval.stats.student_t import student_t_quantile
from precisionlab.eval.stats.tango import constrained_discordance, tango_interval, tango_score
from precisionlab.eval.stats.verdict import verdict

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "Comparison",
    "Groups",
    "Interval",
    "McNemar",
    "Method",
    "RatioMethod",
    "SkewCheck",
    "Verdict",
    "binary_examples_needed",
    "binary_min_detectable",
    "binomial_two_sided_p",
    "bootstrap_ratio",
    "cantelli_factor",
    "compare_perplexity",
    "compare_scores",
    "constrained_discordance",
    "effect_skewness",
    "examples_needed",
    "expanded_levels",
    "mcnemar_exact",
    "min_detectable_difference",
    "paired_bootstrap_mean",
    "paired_bootstrap_ratio",
    "perplexity_effects",
    "perplexity_skew",
    "resampled_totals",
    "skew_documents_needed",
    "standard_error",
    "student_t_quantile",
    "tango_interval",
    "tango_score",
    "verdict",
]
