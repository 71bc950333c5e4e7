"""int_range: which symmetric integer convention the codes follow, against the one the file declares.

The three conventions (`quant.scheme.INT_RANGES`; int4 shown, k = 2^(b-1) = 8) leave different marks
on the codes of round-to-nearest quantizers, because each puts a group's extreme element at another
point of the grid:

    narrow    s = amax / 7     the extreme lands on +-7: code -8 never occurs
    full      s = amax / 7.5   the extreme lands on +-7.5: -8 or -7 as the rounded scale falls, and an
                               element can only reach -8 by being the extreme, so some groups whose
                               extreme is negative top out at -7 (min -7, max <= 6)
    full_neg  s = amax / 8     the extreme lands on +-8: a negative extreme is always -8, so no group
                               tops out at -7 (min -7 with max <= 6 never occurs)
    (GGML Q4_0's signed scale puts every group's extreme on -8: every group holds -8)

Measured on SmolLM2-135M's weights (groups of 32 to 128, fp16 / bf16 / fp32 scales): groups holding -8
0 / 25-45 % / 55-61 % / 100 %; groups topping out at -7 (min -7, max <= 6) 38-43 % / 3.4-19 % / 0 / 0.
The verdicts below need enough groups that the other conventions could not have hidden their mark
(MIN_GROUPS_NARROW, MIN_GROUPS_FULL_NEG).
"""

from __future__ import annotations

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

MIN_GROUPS_NARROW = 32
"""Groups needed to call "code -k never occurs" evidence: full data holds -k in a quarter of groups or more."""
MIN_GROUPS_FULL_NEG = 256
"""Groups needed to call "no group tops out at -(k-1)" evidence: full data does so in 3 % of groups or more."""
MIN_TOP = 0.9
"""Share of groups that must reach +-(k-1): codes that never come near the top say nothing about the range."""


def declared_range(t: CheckpointTensor) -> str | None:
    """The symmetric convention the reader took from the file (details["int_range"]), or None."""
    value = t.details.get("int_range")
    return str(value) if value else None


def int_range(t: CheckpointTensor) -> CheckResult | None:
    from precisionlab.interop.checks.codes import signed_extremes

    declared = declared_range(t)
    found = signed_extremes(t) if declared else None
    if found is None or declared is None:
        return None
    lo, hi, bits = found
    k = 1 << (bits - 1)
    nonzero = (lo != 0) | (hi != 0)
    lo, hi = lo[nonzero], hi[nonzero]
    groups = int(lo.size)
    if groups == 0:
        return CheckResult("int_range", False, {"groups": 0.0}, "every group is zero")
    holds_min = float(np.mean(lo == -k))
    stops_below = float(np.mean((lo == -(k - 1)) & (hi <= k - 2)))
    reaches = float(np.mean(np.maximum(-lo, hi) >= k - 1))
    evidence: dict[str, float | str] = {
        "declared_range": declared, "bits": float(bits), "groups": float(groups),
        f"groups_holding_{-k}": round(holds_min, 6), f"groups_topping_out_at_{-(k - 1)}": round(stops_below, 6),
        f"groups_reaching_{k - 1}": round(reaches, 6),
    }
    found_range = _found_range(groups, holds_min, stops_below, reaches)
    evidence["codes_follow"] = found_range or "undetermined"
    if found_range is None or found_range == declared or (declared == "full_neg" and found_range == "ggml"):
        what = f"consistent with range={declared}" if found_range else "not enough groups to tell the convention"
        return CheckResult("int_range", False, evidence, f"{what}: {holds_min:.0%} of groups hold {-k}, "
                                                         f"{stops_below:.1%} top out at {-(k - 1)}")
    return CheckResult("int_range", True, evidence, _message(declared, found_range, k, holds_min, stops_below,
                                                             reaches))


def _found_range(groups: int, holds_min: float, stops_below: float, reaches: float) -> str | None:
    if reaches < MIN_TOP:
        return None
    if holds_min == 0.0:
        return "narrow" if groups >= MIN_GROUPS_NARROW else None
    if holds_min == 1.0:
        return "ggml"
    if stops_below == 0.0:
        return "full_neg" if groups >= MIN_GROUPS_FULL_NEG else None
    return "full"


CONVENTIONS = {
    "narrow": "range=narrow (codes +-{m}, scale amax/{m})",
    "full": "range=full (codes {mk}..{m}, scale amax/{h})",
    "full_neg": "range=full_neg (codes {mk}..{m}, scale amax/{k}: a negative extreme always lands on {mk})",
    "ggml": "GGML's signed scale (every group's extreme on {mk}, scale max/{mk})",
}


def _spell(name: str, k: int) -> str:
    return CONVENTIONS[name].format(m=k - 1, mk=-k, k=k, h=f"{k - 0.5:g}")


def _message(declared: str, found: str, k: int, holds_min: float, stops_below: float, reaches: float) -> str:
    if found == "narrow":
        why = f"code {-k} never occurs while {reaches:.0%} of groups reach +-{k - 1}"
    elif found == "ggml":
        why = f"every group holds {-k}"
    elif found == "full_neg":
        why = (f"{holds_min:.0%} of groups hold {-k} and none tops out at {-(k - 1)}, which amax/{k - 0.5:g} "
               "scales leave in some groups")
    else:
        why = f"{holds_min:.0%} of groups hold {-k} and {stops_below:.1%} top out at {-(k - 1)}"
    return (f"{why}: the codes follow {_spell(found, k)}, the file declares {_spell(declared, k)} (codes and "
            "scales from another convention than the one declared, or a range mislabelled in the config)")
