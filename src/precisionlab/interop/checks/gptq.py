"""gptq_zero_offset: GPTQ v1 zero points (stored minus one) read as v2, or the reverse, and v1 zero points of 0.

GPTQ v1 stores zero points minus one. Symmetric files have one zero point, 2^(b-1): read as
2^(b-1) - 1 (v1 read as v2) or + 1 (v2 read as v1) is flagged. Asymmetric: real weights are centred,
so the mean of q - z over the tensor is near 0 steps; a mean nearer to +-1 (the other version's
reading) is flagged. A v1 file whose zero points read 2^b (a field of all ones) held a zero point of 0,
stored as -1, whose sign bits spill into the neighbouring lanes of the word (AutoGPTQ packs
`zeros - 1` as a signed int32): flagged, those lanes' zero points are corrupt.
"""

from __future__ import annotations

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

ZERO_ALIGNMENT_STEPS = 0.5


def gptq_zero_offset(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.packed_int import gptq_codes

    d = t.details
    bits, version = d["bits"], d["version"]
    q, z, _, g_idx = gptq_codes(t)
    other = "v2" if version == "v1" else "v1"
    shift = 1 if version == "v2" else -1  # reading under the other version adds this to every zero point
    # mean over all elements of q - z[g_idx] (rows of q are inputs; z[g_idx] is each input's zero point row)
    mean_offset = float(q.astype(np.float64).mean() - z[g_idx].astype(np.float64).mean())
    other_offset = mean_offset - shift
    unique_z = np.unique(z)
    half = 1 << (bits - 1)
    out_of_range = float(np.mean((z < 0) | (z > (1 << bits) - 1)))
    evidence: dict[str, float | str] = {
        "version_read": version, "mean_code_minus_zero_steps": round(mean_offset, 4),
        f"mean_code_minus_zero_steps_as_{other}": round(other_offset, 4), "zero_min": float(z.min()),
        "zero_max": float(z.max()), "zeros_outside_code_range": round(out_of_range, 6),
        "distinct_zero_points": float(unique_z.size),
    }
    if d.get("sym") and unique_z.size == 1:
        value = int(unique_z[0])
        evidence["symmetric_zero_point_read"] = float(value)
        if value == half:
            return CheckResult("gptq_zero_offset", False, evidence,
                               f"symmetric {bits}-bit: every zero point reads {half} = 2^(b-1), as {version} should")
        if value == half - shift:
            return CheckResult("gptq_zero_offset", True, evidence,
                               f"symmetric {bits}-bit: every zero point reads {value}, not {half}; the file follows "
                               f"{other} (read as {version})")
        return CheckResult("gptq_zero_offset", True, evidence,
                           f"symmetric {bits}-bit: every zero point reads {value}, neither v1's nor v2's {half}")
    if abs(mean_offset) > ZERO_ALIGNMENT_STEPS and abs(other_offset) < abs(mean_offset):
        return CheckResult("gptq_zero_offset", True, evidence,
                           f"the codes sit {mean_offset:+.2f} steps from their zero points on average (real weights "
                           f"are centred: near 0); read as {other} they sit {other_offset:+.2f}: the file looks "
                           f"{other}")
    if out_of_range > 0 and version == "v1":
        top = 1 << bits
        return CheckResult("gptq_zero_offset", True, evidence,
                           f"{out_of_range:.1%} of the zero points read {top} = 2^b (a stored field of all ones): v1 "
                           "stores zero points minus one, so a zero point of 0 is stored as -1, whose sign bits spill "
                           "into the lanes above it in the word; those zero points are not what the quantizer chose "
                           "(AutoGPTQ's v1 cannot hold a zero point of 0: write v2)")
    return CheckResult("gptq_zero_offset", False, evidence,
                       f"the codes are centred on their zero points ({mean_offset:+.2f} steps on average) as {version}")
