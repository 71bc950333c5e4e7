"""Token frequency buckets, counted on the calibration part of the built-in text (never the evaluation part).

Each token id's count is its number of occurrences in the calibration text (tokenized without special tokens).
Token types are ordered from the most to the least frequent (ties: the smaller id first); a type's bucket is
given by the share of the calibration tokens that the more frequent types already hold, in tenths:

    f0_10pct      the most frequent types, which together make the first 10 % of the calibration tokens
    ...
    f90_100pct    the rarest types that occur at all (the last 10 % of the calibration tokens)
    unseen        types that never occur in the calibration text

Computed exactly in integers (bucket = 10 * tokens-before // total). A scored token's bucket is its target's (the
reference token, the one the text has there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

DECILES = 10
FREQUENCY_NAMES = (*(f"f{10 * k}_{10 * (k + 1)}pct" for k in range(DECILES)), "unseen")
RARE_BUCKETS = ("f90_100pct", "unseen")
"""The rare-token buckets the divergence check looks at."""


def token_counts(encode: Callable[[str], list[int]], texts: Iterable[str], vocab: int) -> np.ndarray:
    """Occurrences of each token id (length `vocab`) in the texts."""
    counts = np.zeros(vocab, dtype=np.int64)
    for text in texts:
        ids = np.asarray(encode(text), dtype=np.int64)
        if ids.size:
            counts += np.bincount(ids, minlength=vocab)[:vocab]
    return counts


def frequency_bucket_of_type(counts: np.ndarray) -> np.ndarray:
    """Bucket index (into FREQUENCY_NAMES) of every token id (see the module)."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    buckets = np.full(counts.size, DECILES, dtype=np.int64)
    if total == 0:
        return buckets
    order = np.lexsort((np.arange(counts.size), -counts))  # most frequent first, then the smaller id
    before = np.concatenate([[0], np.cumsum(counts[order])[:-1]])
    seen = counts[order] > 0
    buckets[order[seen]] = (DECILES * before[seen]) // total
    return buckets


def frequency_index(targets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Bucket index of each scored token (by its target id; an id outside the counts is unseen)."""
    of_type = frequency_bucket_of_type(counts)
    targets = np.asarray(targets, dtype=np.int64)
    inside = (targets >= 0) & (targets < of_type.size)
    return np.where(inside, of_type[np.clip(targets, 0, of_type.size - 1)], DECILES)
