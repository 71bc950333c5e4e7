"""The verdict: PASS / FAIL / INCONCLUSIVE from a whole interval against a declared threshold."""

from __future__ import annotations

import math

from precisionlab.eval.stats.bootstrap import Interval
from precisionlab.eval.stats.inputs import Verdict, check_threshold


def verdict(interval: Interval, max_drop: float, higher_is_better: bool) -> Verdict:
    """PASS / FAIL / INCONCLUSIVE from the whole interval against a threshold declared in advance.

    Accuracy-like (``higher_is_better``; difference cand - ref, in the interval's unit, e.g.
    percentage points): ``pass`` if ``low > -max_drop``, ``fail`` if ``high < -max_drop``.
    Perplexity-like (difference = percent increase, lower is better): ``pass`` if
    ``high < max_drop``, ``fail`` if ``low > max_drop``. Anything else — the interval touches or
    straddles the threshold — is ``inconclusive``. The point estimate is never consulted.
    """
    threshold = check_threshold(max_drop)
    if not (math.isfinite(interval.low) and math.isfinite(interval.high)) or interval.low > interval.high:
        raise ValueError(f"the interval must be finite with low <= high, got [{interval.low}, {interval.high}]")
    if higher_is_better:
        if interval.low > -threshold:
            return "pass"
        if interval.high < -threshold:
            return "fail"
    else:
        if interval.high < threshold:
            return "pass"
        if interval.low > threshold:
            return "fail"
    return "inconclusive"
