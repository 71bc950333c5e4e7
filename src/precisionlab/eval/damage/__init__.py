"""Where the damage lands: per-token KL and NLL increase broken down by token frequency and by position,
how concentrated it is, the worst examples, and the divergence flag (perplexity passes, a bucket or task fails).

Data in, data out (numpy): `analyse` takes the per-token arrays a perplexity scoring produced
(eval.scoring.PplScores.token and the reference's token_nll) and returns a `Damage`.

    buckets        Bucket and the vectorised per-bucket sums
    frequency      frequency buckets counted on the calibration part (f0_10pct ... f90_100pct, unseen)
    position       position buckets (p0_127, p128_511, p512_2047, ...)
    concentration  top 1 % / 5 % shares of tokens and documents, Gini, the concentration curve
    worst          the worst tokens, decoded, with both models' most likely tokens
    divergence     the divergence flag: the rare buckets' bootstrap tests and the documented thresholds
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.eval.damage.buckets import Bucket, bucket_sums
from precisionlab.eval.damage.concentration import Concentration, concentration
from precisionlab.eval.damage.divergence import (
    MIN_BUCKET_TOKENS,
    MIN_BUCKET_UNITS,
    RARE_KL_MULTIPLE,
    Divergence,
    RareBucketTest,
    divergence,
    rare_bucket_tests,
)
from precisionlab.eval.damage.frequency import FREQUENCY_NAMES, RARE_BUCKETS, frequency_index, token_counts
from precisionlab.eval.damage.position import position_index
from precisionlab.eval.damage.worst import WORST_PER_DOCUMENT, WORST_TOKENS, TokenView, WorstToken
from precisionlab.eval.stats.inputs import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Groups

__all__ = ["FREQUENCY_NAMES", "MIN_BUCKET_TOKENS", "MIN_BUCKET_UNITS", "RARE_BUCKETS", "RARE_KL_MULTIPLE",
           "WORST_PER_DOCUMENT", "WORST_TOKENS", "Bucket", "Concentration", "Damage", "Divergence", "RareBucketTest",
           "TokenView", "WorstToken", "analyse", "bucket_sums", "concentration", "divergence", "frequency_index",
           "position_index", "rare_bucket_tests", "token_counts"]


@dataclass
class Damage:
    """One candidate on one perplexity task."""

    tokens: int
    kl: float
    """Overall KL per token (sum of per-token KL / tokens)."""
    nll_increase: float
    """Overall NLL increase per token (nats)."""
    by_frequency: list[Bucket]
    by_position: list[Bucket]
    concentration: Concentration
    worst: list[WorstToken]
    worst_per_document: list[list[dict[str, Any]]]
    rare_tests: list[RareBucketTest]
    """The divergence test of each rare bucket that holds a token (divergence.rare_bucket_tests)."""

    @property
    def failing_buckets(self) -> list[str]:
        """The rare buckets whose test fails."""
        return [t.name for t in self.rare_tests if t.fails]


def analyse(tokens_per_document: np.ndarray, document_ids: Sequence[str], token: dict[str, np.ndarray],
            reference: dict[str, np.ndarray], counts: np.ndarray, decode: Callable[[int], str], *,
            groups: Groups | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
            confidence: float = DEFAULT_CONFIDENCE) -> Damage:
    """The breakdowns of one candidate (token: the candidate's PplScores.token; reference: the reference's arrays
    with token_nll, top_ids, top_logp; counts: calibration token counts, frequency.token_counts). The rare buckets'
    tests resample the documents (or their `groups`) with the options of the task's other intervals."""
    lengths = np.asarray(tokens_per_document, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    doc = np.repeat(np.arange(lengths.size), lengths)
    kl, nll, ref_nll = token["kl"], token["nll"], reference["token_nll"]
    if not kl.shape == nll.shape == ref_nll.shape == doc.shape:
        raise ValueError("the per-token arrays of the candidate and the reference do not line up")
    n = int(doc.size)
    overall_kl = math.fsum(kl) / n if n else math.nan
    increase = nll - ref_nll
    overall_increase = math.fsum(increase) / n if n else math.nan
    labels = frequency_index(token["target"], counts)
    by_frequency = bucket_sums(labels, FREQUENCY_NAMES, ref_nll, nll, kl)
    position, names = position_index(token["position"])
    by_position = bucket_sums(position, names, ref_nll, nll, kl)
    document_kl = np.bincount(doc, weights=kl, minlength=lengths.size)
    view = TokenView(document_ids, doc, token["position"], token["target"], kl, increase,
                     reference["top_ids"], reference["top_logp"], token["top_ids"], token["top_logp"], decode)
    return Damage(n, overall_kl, overall_increase, by_frequency, by_position, concentration(kl, document_kl),
                  view.worst(WORST_TOKENS), view.worst_per_document(offsets, WORST_PER_DOCUMENT),
                  rare_bucket_tests(labels, kl, lengths, groups, n_resamples=n_resamples, seed=seed,
                                    confidence=confidence))
