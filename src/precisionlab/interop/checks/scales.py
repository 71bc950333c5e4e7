"""scale_vs_amax and nvfp4_global_scale_direction: scales that do not fit their codes, range or dtype.

scale_vs_amax flags a tensor when any of these holds:

  - reach: the median group's codes reach under MIN_FILL of the convention's top (`codes.group_reach`):
    the scales were chosen for a wider range than the codes use (fnuz's 240 on OCP codes).
  - magnitude: the dequantized amax is beyond MAX_PLAUSIBLE_AMAX or below MIN_PLAUSIBLE_AMAX (a tensor
    that is not all zeros): a scale read in the wrong direction or dtype.
  - dtype, for 16-bit float scales (F16 / BF16), whose bits the other 16-bit format reads as a very
    different number. With `range` = a group's scale times the largest code magnitude of the layout
    (what the group can span):
      tagged BF16, truly fp16: bf16's exponent field holds fp16's exponent and top mantissa bits, so
        typical scales (1e-5 .. 1) read 2^-120 .. 2^-8: the median group's range falls below
        MIN_MEDIAN_RANGE while the F16 reading of the same bits is ordinary.
      tagged F16, truly bf16: fp16's exponent field holds the top five bits of bf16's exponent, which are
        14 or 15 for every bf16 value in [2^-15, 2); so every scale reads between 0.5 and 2 and every
        group spans half to twice the format's top code value (int4: amax 3.75 to 15 in every group; fp8
        e4m3: 224 to 896), which no weight tensor does, while the BF16 reading is ordinary. Needs
        MIN_SCALES scales (one scale alone cannot show it).
    Measured on SmolLM2-135M's weights (int4 g32 / g128, int8 and fp8 per row): fp16 scales read as
    bf16 give median ranges of 1e-22 to 1e-5 (amax 5e-23 to 2e-3), bf16 scales read as fp16 put 100 % of
    the scales in [0.5, 2) (amax 11 to 476 against true amaxes of 0.66 to 5.3).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

MIN_FILL = 0.75
MAX_PLAUSIBLE_AMAX = 1e4
MIN_PLAUSIBLE_AMAX = 1e-6
MIN_MEDIAN_RANGE = 1e-4
MIN_SCALES = 8
NVFP4_LIMIT = 6.0 * 448.0
SIXTEEN_BIT = {"F16": ("BF16", "<u2", "bfloat16"), "BF16": ("F16", "<f2", "float16")}
"""stored dtype -> (the other 16-bit float, its raw numpy dtype, its reader name)."""


# --------------------------------------------------------------------------- 16-bit scale readings
def scale_role(t: CheckpointTensor) -> str | None:
    """The role of the tensor's float scale part (None for layouts without one)."""
    if t.layout.startswith("gptq:") or t.layout == "awq:gemm":
        return "scales"
    if t.layout in ("compressed-tensors:pack-quantized", "compressed-tensors:int-quantized"):
        return "weight_scale"
    if t.layout.startswith("fp8:") or t.layout == "compressed-tensors:float-quantized":
        role = t.details.get("scale_role")
        return str(role) if role else None
    return None


def largest_code(t: CheckpointTensor) -> float:
    """The largest code magnitude of the layout (what one scale unit spans)."""
    d = t.details
    if "element" in d:
        from precisionlab.interop.readers.common import fp8_table

        table = fp8_table(d["element"]).astype(np.float64)
        return float(np.nanmax(np.abs(table)))
    bits = int(d.get("bits", 8))
    symmetric = d.get("sym", d.get("symmetric", False))
    return float(1 << (bits - 1)) if symmetric else float((1 << bits) - 1)


def read_as(t: CheckpointTensor, role: str, stored: str) -> CheckpointTensor:
    """The tensor with its scale part read as another 16-bit float dtype (outputs rounded to it as well where
    the reader rounds to the scale's dtype)."""
    ref = t.refs[role]
    other, raw, name = SIXTEEN_BIT[ref.stored_dtype]
    del other
    details = dict(t.details)
    old = details.get("scale_dtype")
    for key in ("scale_dtype", "out_dtype"):
        if details.get(key) == old and old in ("float16", "bfloat16"):
            details[key] = name
    refs = {**t.refs, role: dataclasses.replace(ref, stored_dtype=stored, dtype=raw)}
    return dataclasses.replace(t, refs=refs, details=details)


def _scale_values(t: CheckpointTensor, role: str) -> np.ndarray:
    from precisionlab.interop.readers.common import float_values

    ref = t.refs[role]
    return np.abs(np.asarray(float_values(ref.load(), ref.stored_dtype), dtype=np.float64)).reshape(-1)


def _median_range(scales: np.ndarray, top: float) -> float:
    positive = scales[(scales > 0) & np.isfinite(scales)]
    return float(np.median(positive)) * top if positive.size else 0.0


def dtype_reasons(t: CheckpointTensor, amax: float, evidence: dict[str, float | str]) -> list[str]:
    """The dtype part of scale_vs_amax (see the module doc); fills the evidence."""
    role = scale_role(t)
    if role is None or t.refs[role].stored_dtype not in SIXTEEN_BIT:
        return []
    tagged = t.refs[role].stored_dtype
    other = SIXTEEN_BIT[tagged][0]
    top = largest_code(t)
    scales = _scale_values(t, role)
    positive = scales[(scales > 0) & np.isfinite(scales)]
    median_range = _median_range(scales, top)
    evidence.update(scale_dtype=tagged, median_group_range=float(f"{median_range:.6g}"))
    suspicious = ""
    if tagged == "BF16" and 0 < median_range < MIN_MEDIAN_RANGE:
        suspicious = (f"read as BF16 (as tagged) the median group's scale spans {median_range:.3g}, below "
                      f"{MIN_MEDIAN_RANGE:g}")
    elif tagged == "F16" and positive.size >= MIN_SCALES and bool(np.all((positive >= 0.5) & (positive < 2))):
        suspicious = (f"read as F16 (as tagged) every one of the {positive.size} scales lies in [0.5, 2), so every "
                      f"group spans half to twice the format's top code ({top:g}), the mark of bf16 bits")
    if not suspicious:
        return []
    swapped = read_as(t, role, other)
    other_scales = _scale_values(swapped, role)
    other_range = _median_range(other_scales, top)
    other_values = swapped.dequantize()
    finite = np.abs(other_values[np.isfinite(other_values)])
    other_amax = float(finite.max()) if finite.size else math.nan
    evidence.update({f"median_group_range_as_{other}": float(f"{other_range:.6g}"),
                     f"dequantized_amax_as_{other}": other_amax})
    other_positive = other_scales[(other_scales > 0) & np.isfinite(other_scales)]
    other_odd = (other == "BF16" and other_range < MIN_MEDIAN_RANGE) or (
        other == "F16" and other_positive.size >= MIN_SCALES and bool(np.all((other_positive >= 0.5)
                                                                             & (other_positive < 2))))
    if other_odd or not MIN_PLAUSIBLE_AMAX <= other_amax <= MAX_PLAUSIBLE_AMAX:
        return []
    true_name = {"F16": "fp16", "BF16": "bf16"}[other]
    return [f"{suspicious}; read as {other} the same bits give amax {other_amax:.4g} (against {amax:.4g}): "
            f"{true_name} scales stored under the {tagged} tag"]


# --------------------------------------------------------------------------- scale_vs_amax
def scale_vs_amax(t: CheckpointTensor, values: np.ndarray | None = None) -> CheckResult | None:
    from precisionlab.interop.checks.codes import group_reach

    found = group_reach(t)
    if found is None:
        return None
    reach, desc = found.values, found.description
    nonzero = reach[reach > 0]
    if nonzero.size == 0:
        return CheckResult("scale_vs_amax", False, {"groups": float(reach.size)}, "every group is zero")
    median = float(np.median(nonzero))
    decoded = t.dequantize() if values is None else values
    finite = np.abs(decoded[np.isfinite(decoded)]) if decoded.size else np.zeros(0)
    amax = float(finite.max()) if finite.size else (math.nan if decoded.size else 0.0)
    evidence: dict[str, float | str] = {
        "convention_top": desc, "groups": float(reach.size), "median_reach": round(median, 4),
        "p10_reach": round(float(np.percentile(nonzero, 10)), 4), "max_reach": round(float(nonzero.max()), 4),
        "groups_under_half": round(float(np.mean(nonzero < 0.5)), 6),
        "groups_at_top": round(found.top_fraction, 6), "dequantized_amax": amax,
    }
    reasons = []
    if median < MIN_FILL:
        reasons.append(f"the median group's codes reach {median:.0%} of the convention's top {desc}: the scales were "
                       "chosen for a wider range than these codes use")
    if not math.isfinite(amax) or amax > MAX_PLAUSIBLE_AMAX or 0 < amax < MIN_PLAUSIBLE_AMAX:
        bound = f"> {MAX_PLAUSIBLE_AMAX:g}" if not amax < MIN_PLAUSIBLE_AMAX else f"< {MIN_PLAUSIBLE_AMAX:g}"
        reasons.append(f"the dequantized amax {amax:.4g} is implausible for weights ({bound}): a scale read in the "
                       "wrong direction or dtype")
    reasons += dtype_reasons(t, amax, evidence)
    if reasons:
        return CheckResult("scale_vs_amax", True, evidence, "; ".join(dict.fromkeys(reasons)))
    return CheckResult("scale_vs_amax", False, evidence,
                       f"the scales match their groups: the median group reaches {median:.0%} of {desc}")


# --------------------------------------------------------------------------- nvfp4_global_scale_direction
def nvfp4_global_scale_direction(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.nvfp4 import nvfp4_parts

    _, scales, g = nvfp4_parts(t)
    top = float(np.max(scales[np.isfinite(scales)])) if np.isfinite(scales).any() else 0.0
    as_read = 6.0 * top / g if g else math.inf
    reciprocal = 6.0 * top * g
    evidence: dict[str, float | str] = {
        "global_scale_stored": g, "direction_read": "encode (divide)", "max_block_scale": top,
        "implied_amax": as_read, "implied_amax_if_reciprocal": reciprocal,
    }
    flagged = not (as_read <= NVFP4_LIMIT) and reciprocal <= NVFP4_LIMIT
    if flagged:
        message = (f"divided by, the stored global scale {g:.4g} implies |w| up to {as_read:.4g}, beyond "
                   f"6 * 448 = {NVFP4_LIMIT:g}; its reciprocal implies {reciprocal:.4g}: it was written in the decode "
                   "direction (amax / 2688, precisionlab / ModelOpt) and is read in compressed-tensors' encode "
                   "direction")
    else:
        message = f"the global scale implies |w| up to {as_read:.4g}, consistent with its encode direction"
    return CheckResult("nvfp4_global_scale_direction", flagged, evidence, message)
