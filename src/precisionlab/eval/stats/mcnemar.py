"""The exact McNemar test on paired binary outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from precisionlab.eval.stats.inputs import as_vector, is_binary


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired binary outcomes.

    ``b``: pairs the reference got right and the candidate wrong; ``c``: the reverse. Under the
    null hypothesis (no difference) each discordant pair is a fair coin, so
    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``.
    """

    b: int
    c: int
    p_value: float

    @property
    def discordant(self) -> int:
        return self.b + self.c



def _as_binary(values: ArrayLike, name: str) -> NDArray[np.bool_]:
    array = as_vector(values, name)
    if not is_binary(array):
        raise ValueError(f"{name} must hold binary outcomes (True/False or 0/1)")
    return array == 1.0


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair-coin trials.

    ``min(1, 2 * sum_{j <= min(k, n-k)} C(n, j) / 2^n)``, summed in integers (exact) and rounded
    once to a float. For p = 1/2 this equals the "sum of outcomes no more likely than the one
    observed" rule of scipy.stats.binomtest, because the distribution is symmetric.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 1.0
    tail_end = min(k, n - k)
    term, tail = 1, 1                       # C(n, 0)
    for j in range(tail_end):
        term = term * (n - j) // (j + 1)    # C(n, j+1), exact
        tail += term
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def mcnemar_exact(ref_correct: ArrayLike, cand_correct: ArrayLike) -> McNemar:
    """Exact McNemar test: a two-sided binomial test on the discordant pairs (see McNemar)."""
    ref_values, cand_values = _as_binary(ref_correct, "ref_correct"), _as_binary(cand_correct, "cand_correct")
    if len(ref_values) != len(cand_values):
        raise ValueError(f"paired inputs must have one value per example each, got {len(ref_values)} "
                         f"and {len(cand_values)}")
    b = int(np.sum(ref_values & ~cand_values))
    c = int(np.sum(~ref_values & cand_values))
    return McNemar(b=b, c=c, p_value=binomial_two_sided_p(min(b, c), b + c))
