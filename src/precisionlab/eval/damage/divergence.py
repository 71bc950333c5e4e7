"""Capability lost, perplexity fine: a candidate whose perplexity verdict passes while a rare-token bucket or
another task fails.

A rare-token bucket (frequency.RARE_BUCKETS) fails when its KL per token is above RARE_KL_MULTIPLE times the
task's overall KL per token with the confidence of the run's verdicts: not the point estimate, but the lower end
of the bootstrap interval of the ratio

    ratio = (S(bucket KL) / S(bucket tokens)) / (S(KL) / S(tokens))       S: sums over the resampled units

which resamples what every other interval of the task resamples (its documents, or their groups: topics), never
single tokens, with the same resamples, seed, confidence and expanded-percentile levels (eval.stats.bootstrap's
resampled_totals and expanded_levels: the lower end bootstrap_interval would give; both rare buckets share one
resample).
A resample that holds none of the bucket's tokens (or no KL at all) counts as ratio 0: it shows no
concentration. The bucket fails when that lower end is above the multiple; it is "not enough data" (and never
fails) with fewer than MIN_BUCKET_TOKENS tokens, with all its tokens in one unit, or with fewer than two units to
resample. The lower end of a two-sided interval of confidence 1 - alpha is a one-sided test at alpha / 2: the
same per-test error as a verdict's PASS or FAIL (docs/eval_statistics.md, "Error rates").

A task fails when its verdict (primary metric, interval against --max-drop) is "fail".

    divergence of a perplexity task   its verdict passes and (one of its rare buckets fails or another task
                                      of the candidate fails)
    divergence of any other task      it fails while some perplexity task of the candidate passes
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from precisionlab.eval.damage.frequency import FREQUENCY_NAMES, RARE_BUCKETS
from precisionlab.eval.stats.bootstrap import expanded_levels, resampled_totals
from precisionlab.eval.stats.inputs import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Groups, check_options, group_index

RARE_KL_MULTIPLE = 2.0
"""A rare-token bucket fails when its KL per token is above this multiple of the overall KL per token (the whole
interval above it: the lower end)."""
MIN_BUCKET_TOKENS = 20
"""A bucket with fewer tokens is too small to test ("not enough data")."""
MIN_BUCKET_UNITS = 2
"""A bucket whose tokens lie in fewer resampling units (documents or groups) is too small to test."""

TestState = Literal["fails", "holds", "not enough data"]


@dataclass(frozen=True)
class RareBucketTest:
    """The divergence test of one rare-token bucket (module docstring)."""

    name: str
    tokens: int
    units: int
    """Resampling units (documents, or their groups) that hold the bucket's tokens."""
    ratio: float
    """The bucket's KL per token over the overall KL per token (point estimate; NaN without any KL)."""
    ci_low: float
    """The lower end of its bootstrap interval (NaN when there is not enough data or no KL)."""
    state: TestState

    @property
    def fails(self) -> bool:
        return self.state == "fails"


@dataclass(frozen=True)
class Divergence:
    diverges: bool
    reason: str
    """Which buckets and tasks fail while perplexity passes ("" when it does not diverge)."""


def rare_bucket_tests(labels: NDArray[np.int64], kl: NDArray[np.float64], tokens_per_document: NDArray[np.int64],
                      groups: Groups | None = None, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      confidence: float = DEFAULT_CONFIDENCE, multiple: float = RARE_KL_MULTIPLE,
                      min_tokens: int = MIN_BUCKET_TOKENS) -> list[RareBucketTest]:
    """The test of every rare bucket that holds a token (module docstring).

    labels: each scored token's frequency bucket (an index into frequency.FREQUENCY_NAMES), kl: its KL, both in
    document order; tokens_per_document: how many of them each document has; groups: one label per document (its
    resampling cluster, as eval.stats takes them), or None (each document its own)."""
    check_options(n_resamples, confidence, "expanded")
    lengths = np.asarray(tokens_per_document, dtype=np.int64)
    labels, kl = np.asarray(labels, dtype=np.int64), np.asarray(kl, dtype=np.float64)
    if not labels.shape == kl.shape == (int(lengths.sum()),):
        raise ValueError("bucket labels, per-token KL and the documents' token counts do not line up")
    cluster = _clusters(groups, lengths.size)
    clusters = int(cluster.max()) + 1 if cluster.size else 0
    of_token = np.repeat(cluster, lengths)
    overall = np.column_stack([np.bincount(of_token, weights=kl, minlength=clusters),
                               np.bincount(of_token, minlength=clusters).astype(np.float64)])
    found: dict[str, tuple[int, int, float]] = {}  # bucket -> (tokens, units holding them, point ratio)
    columns: dict[str, int] = {}  # a bucket to test -> its first column in `values`
    parts: list[NDArray[np.float64]] = []
    for name in RARE_BUCKETS:
        inside = labels == FREQUENCY_NAMES.index(name)
        tokens = int(inside.sum())
        if tokens == 0:
            continue
        bucket = np.column_stack([np.bincount(of_token[inside], weights=kl[inside], minlength=clusters),
                                  np.bincount(of_token[inside], minlength=clusters).astype(np.float64)])
        holding = int(np.count_nonzero(bucket[:, 1]))
        sums = np.concatenate([bucket.sum(axis=0), overall.sum(axis=0)])[None, :]
        found[name] = (tokens, holding, float(_ratio(sums)[0]) if sums[0, 2] > 0 else math.nan)
        if tokens >= min_tokens and holding >= MIN_BUCKET_UNITS and clusters >= 2 and sums[0, 2] > 0:
            columns[name] = 2 * len(parts)
            parts.append(bucket)
    lows: dict[str, float] = {}
    if parts:  # one resample of every tested bucket and the overall sums (the draws depend on the rows only)
        values = np.hstack([*parts, overall])
        totals = resampled_totals(values, n_resamples, seed)
        level = expanded_levels(confidence, clusters)[0]  # the lower level of bootstrap_interval's "expanded"
        for name, j in columns.items():
            lows[name] = float(np.quantile(_ratio(totals[:, [j, j + 1, -2, -1]]), level))
    out = []
    for name, (tokens, holding, ratio) in found.items():
        if name in lows:
            state: TestState = "fails" if lows[name] > multiple else "holds"
            out.append(RareBucketTest(name, tokens, holding, ratio, lows[name], state))
        elif tokens < min_tokens or holding < MIN_BUCKET_UNITS or clusters < 2:
            out.append(RareBucketTest(name, tokens, holding, ratio, math.nan, "not enough data"))
        else:  # no KL anywhere: nothing concentrates
            out.append(RareBucketTest(name, tokens, holding, ratio, math.nan, "holds"))
    return out


def _ratio(totals: NDArray[np.float64]) -> NDArray[np.float64]:
    """(bucket KL / bucket tokens) / (KL / tokens) per row of totals [bucket KL, bucket tokens, KL, tokens]; 0 where
    a resample holds no bucket token or no KL."""
    defined = (totals[:, 1] > 0) & (totals[:, 2] > 0)
    safe = np.where(defined[:, None], totals, 1.0)
    return np.where(defined, (safe[:, 0] / safe[:, 1]) / (safe[:, 2] / safe[:, 3]), 0.0)


def _clusters(groups: Groups | None, documents: int) -> NDArray[np.intp]:
    """Each document's resampling cluster (0 ..): eval.stats' group_index, each document its own without groups,
    all in cluster 0 when the groups name only one (nothing to resample: "not enough data")."""
    if groups is None:
        return np.arange(documents, dtype=np.intp)
    labels = list(groups)
    if len(set(labels)) < 2 and len(labels) == documents:
        return np.zeros(documents, dtype=np.intp)
    index = group_index(labels, documents)
    return np.arange(documents, dtype=np.intp) if index is None else index


def divergence(task: str, is_perplexity: bool, verdicts: Mapping[str, str], perplexity_tasks: Sequence[str],
               buckets_failing: Sequence[str] = ()) -> Divergence:
    """The divergence flag of one candidate on `task` (see the module); verdicts: task -> verdict; buckets_failing:
    the rare buckets whose test fails (RareBucketTest.fails)."""
    if is_perplexity:
        if verdicts.get(task) != "pass":
            return Divergence(False, "")
        others = [t for t, v in verdicts.items() if t != task and v == "fail"]
        parts = [f"rare-token bucket {b} has KL above {RARE_KL_MULTIPLE:g}x the overall (the interval's lower end "
                 "too)" for b in buckets_failing]
        parts += [f"task {t} fails" for t in others]
        return Divergence(bool(parts), "; ".join(parts))
    passing = [t for t in perplexity_tasks if verdicts.get(t) == "pass"]
    if verdicts.get(task) == "fail" and passing:
        return Divergence(True, f"fails while perplexity passes on {', '.join(passing)}")
    return Divergence(False, "")
