"""Per-bucket sums of per-token damage: tokens, KL, NLL increase, and their shares (numpy, data in / data out).

For the tokens of bucket b (n_b of the N scored tokens):

    kl            sum_b KL_t / n_b                       (nats / token; KL_t = KL(reference || candidate) at t)
    nll_increase  sum_b (NLL_t - NLL_ref_t) / n_b         (nats / token)
    token_share   n_b / N
    damage_share  sum_b KL_t / sum KL_t                   (the bucket's share of the total KL)
    ppl           exp(sum_b NLL_t / n_b), reference_ppl the same with NLL_ref

so sum_b token_share_b * kl_b is the overall KL per token and sum_b token_share_b * nll_increase_b the overall NLL
increase (up to float rounding). A bucket without tokens is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bucket:
    name: str
    tokens: int
    token_share: float
    kl: float
    nll_increase: float
    damage_share: float
    ppl: float
    reference_ppl: float


def bucket_sums(index: np.ndarray, names: Sequence[str], reference_nll: np.ndarray, nll: np.ndarray,
                kl: np.ndarray) -> list[Bucket]:
    """The buckets (see the module) of tokens labelled 0 .. len(names) - 1 by `index` (vectorised: np.bincount)."""
    index = np.asarray(index, dtype=np.int64)
    count = len(names)
    if index.shape != nll.shape or index.shape != kl.shape or index.shape != reference_nll.shape:
        raise ValueError("bucket labels and per-token arrays must have one entry per token")
    if index.size and (index.min() < 0 or index.max() >= count):
        raise ValueError(f"bucket labels must lie in 0 .. {count - 1}")
    total_tokens = index.size
    tokens = np.bincount(index, minlength=count)
    kl_sum = np.bincount(index, weights=kl, minlength=count)
    increase_sum = np.bincount(index, weights=nll - reference_nll, minlength=count)
    nll_sum = np.bincount(index, weights=nll, minlength=count)
    ref_sum = np.bincount(index, weights=reference_nll, minlength=count)
    total_kl = float(kl_sum.sum())
    out = []
    for b, name in enumerate(names):
        n = int(tokens[b])
        if n == 0:
            continue
        out.append(Bucket(name, n, n / total_tokens, float(kl_sum[b]) / n, float(increase_sum[b]) / n,
                          float(kl_sum[b]) / total_kl if total_kl > 0 else math.nan,
                          _exp(float(nll_sum[b]) / n), _exp(float(ref_sum[b]) / n)))
    return out


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf
