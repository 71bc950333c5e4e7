"""Capability lost, perplexity fine: a candidate whose perplexity verdict passes while a rare-token bucket or
another task fails.

A frequency bucket fails when it is one of the rare-token buckets (frequency.RARE_BUCKETS), holds at least
MIN_BUCKET_TOKENS tokens, and its KL per token exceeds RARE_KL_MULTIPLE times the task's overall KL per token.
A task fails when its verdict (primary metric, interval against --max-drop) is "fail".

    divergence of a perplexity task   its verdict passes and (one of its rare buckets fails or another task
                                      of the candidate fails)
    divergence of any other task      it fails while some perplexity task of the candidate passes
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from precisionlab.eval.damage.buckets import Bucket
from precisionlab.eval.damage.frequency import RARE_BUCKETS

RARE_KL_MULTIPLE = 2.0
"""A rare-token bucket fails when its KL per token is above this multiple of the overall KL per token."""
MIN_BUCKET_TOKENS = 20
"""A bucket with fewer tokens is too small to fail."""


@dataclass(frozen=True)
class Divergence:
    diverges: bool
    reason: str
    """Which buckets and tasks fail while perplexity passes ("" when it does not diverge)."""


def failing_buckets(buckets: Sequence[Bucket], overall_kl: float, multiple: float = RARE_KL_MULTIPLE,
                    min_tokens: int = MIN_BUCKET_TOKENS) -> list[str]:
    """The rare-token buckets whose KL exceeds `multiple` x the overall KL (see the module)."""
    return [b.name for b in buckets if b.name in RARE_BUCKETS and b.tokens >= min_tokens
            and overall_kl > 0 and b.kl > multiple * overall_kl]


def divergence(task: str, is_perplexity: bool, verdicts: Mapping[str, str], perplexity_tasks: Sequence[str],
               buckets_failing: Sequence[str] = ()) -> Divergence:
    """The divergence flag of one candidate on `task` (see the module); verdicts: task -> verdict."""
    if is_perplexity:
        if verdicts.get(task) != "pass":
            return Divergence(False, "")
        others = [t for t, v in verdicts.items() if t != task and v == "fail"]
        parts = [f"rare-token bucket {b} has KL above {RARE_KL_MULTIPLE:g}x the overall" for b in buckets_failing]
        parts += [f"task {t} fails" for t in others]
        return Divergence(bool(parts), "; ".join(parts))
    passing = [t for t in perplexity_tasks if verdicts.get(t) == "pass"]
    if verdicts.get(task) == "fail" and passing:
        return Divergence(True, f"fails while perplexity passes on {', '.join(passing)}")
    return Divergence(False, "")
