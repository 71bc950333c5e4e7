"""The worst examples: the scored tokens with the largest KL(reference || candidate), with what each model
expected there (its most likely tokens, decoded, and their probabilities)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WORST_TOKENS = 10
"""Worst tokens of a candidate shown in the report."""
WORST_PER_DOCUMENT = 3
"""Worst tokens of each document kept in the per-example output."""


@dataclass(frozen=True)
class WorstToken:
    document: str
    position: int
    target: str
    kl: float
    nll_increase: float
    reference_top: tuple[tuple[str, float], ...]
    """The reference's most likely tokens there (decoded) and their probabilities."""
    candidate_top: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"document": self.document, "position": self.position, "target": self.target, "kl": self.kl,
                "nll_increase": self.nll_increase,
                "reference_top": [[t, p] for t, p in self.reference_top],
                "candidate_top": [[t, p] for t, p in self.candidate_top]}


def worst_indices(kl: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest values, largest first (ties: the earlier token first)."""
    kl = np.asarray(kl, dtype=np.float64)
    order = np.lexsort((np.arange(kl.size), -kl))
    return order[: max(0, n)]


@dataclass
class TokenView:
    """What describing a scored token needs (one entry per token; tops are (T, k) arrays)."""

    document_ids: Sequence[str]
    doc: np.ndarray
    position: np.ndarray
    target: np.ndarray
    kl: np.ndarray
    nll_increase: np.ndarray
    reference_top_ids: np.ndarray
    reference_top_logp: np.ndarray
    candidate_top_ids: np.ndarray
    candidate_top_logp: np.ndarray
    decode: Callable[[int], str]

    def describe(self, t: int, shown: int = 3) -> WorstToken:
        def tops(ids: np.ndarray, logp: np.ndarray) -> tuple[tuple[str, float], ...]:
            return tuple((self.decode(int(i)), math.exp(float(lp))) for i, lp in zip(ids[:shown], logp[:shown],
                                                                                    strict=True))

        return WorstToken(str(self.document_ids[int(self.doc[t])]), int(self.position[t]),
                          self.decode(int(self.target[t])), float(self.kl[t]), float(self.nll_increase[t]),
                          tops(self.reference_top_ids[t], self.reference_top_logp[t]),
                          tops(self.candidate_top_ids[t], self.candidate_top_logp[t]))

    def worst(self, n: int = WORST_TOKENS) -> list[WorstToken]:
        return [self.describe(int(t)) for t in worst_indices(self.kl, n)]

    def worst_per_document(self, offsets: np.ndarray, n: int = WORST_PER_DOCUMENT) -> list[list[dict[str, Any]]]:
        """For each document (tokens offsets[d] .. offsets[d+1]), its n worst tokens as dicts."""
        out = []
        for d in range(len(offsets) - 1):
            lo, hi = int(offsets[d]), int(offsets[d + 1])
            out.append([self.describe(lo + int(t)).to_dict() for t in worst_indices(self.kl[lo:hi], n)])
        return out


WORST_EXAMPLES = 5
"""Worst examples of a choice or generation task shown per candidate."""


def choice_margin_drops(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]],
                        gold: Sequence[int]) -> np.ndarray:
    """Per multiple-choice example, how far the candidate moved away from the gold choice: the reference's
    margin minus the candidate's, a margin being loglik[gold] - max(loglik of the other choices) (nats; positive:
    the candidate is less sure of the gold, a margin below 0 picks a wrong choice)."""
    def margin(ll: Sequence[float], g: int) -> float:
        others = [v for i, v in enumerate(ll) if i != g]
        return float(ll[g]) - max(others)

    return np.asarray([margin(r, g) - margin(c, g) for r, c, g in zip(reference, candidate, gold, strict=True)],
                      dtype=np.float64)
