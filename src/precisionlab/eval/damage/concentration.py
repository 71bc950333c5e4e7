"""How concentrated the damage is: the share of the total KL carried by the worst 1 % / 5 % of tokens and of
documents, the Gini coefficient of per-token KL, and the concentration curve (the share of the total KL held
by the worst fraction x of tokens).

    top_share(v, f) = (sum of the ceil(f * n) largest v) / sum v
    gini(v)         = sum_i sum_j |v_i - v_j| / (2 n^2 mean v), computed from the sorted values as
                      (2 sum_i i v_(i)) / (n sum v) - (n + 1) / n   (v ascending, i = 1 .. n)

Gini is 0 when every token carries the same KL and approaches 1 when one token carries it all. A share or
Gini of values that sum to 0 is NaN (no damage to share).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CURVE_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Concentration:
    top1_tokens: float
    top5_tokens: float
    top1_documents: float
    top5_documents: float
    gini: float
    curve: tuple[tuple[float, float], ...]
    """(fraction of the tokens, worst first; their share of the total KL) at CURVE_FRACTIONS."""


def top_share(values: np.ndarray, fraction: float, presorted: bool = False) -> float:
    """Share of sum(values) held by the ceil(fraction * n) largest values (see the module); presorted: the values
    are already in descending order."""
    v = np.asarray(values, dtype=np.float64)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    total = float(v.sum())
    if v.size == 0 or not total > 0:
        return math.nan
    k = math.ceil(fraction * v.size - 1e-9)
    return float((v if presorted else np.sort(v)[::-1])[:k].sum()) / total


def gini(values: np.ndarray) -> float:
    """Gini coefficient of non-negative values (see the module)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size and v[0] < 0:
        raise ValueError("the Gini coefficient here is of non-negative values")
    total = float(v.sum())
    if v.size == 0 or not total > 0:
        return math.nan
    n = v.size
    ranks = np.arange(1, n + 1, dtype=np.float64)
    return float(2.0 * (ranks * v).sum() / (n * total) - (n + 1) / n)


def concentration(token_kl: np.ndarray, document_kl: np.ndarray) -> Concentration:
    ordered = np.sort(np.asarray(token_kl, dtype=np.float64))[::-1]  # sorted once: top_share of sorted values
    curve = tuple((f, top_share(ordered, f, presorted=True)) for f in CURVE_FRACTIONS)
    return Concentration(top_share(ordered, 0.01, presorted=True), top_share(ordered, 0.05, presorted=True),
                         top_share(document_kl, 0.01), top_share(document_kl, 0.05), gini(ordered[::-1]), curve)
