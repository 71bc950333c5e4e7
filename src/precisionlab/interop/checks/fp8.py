"""fp8_encoding: OCP E4M3 bits and E4M3FNUZ bits under each other's tag.

OCP E4M3 (e4m3fn, max 448, NaN 0x7F / 0xFF, -0 = 0x80) and E4M3FNUZ (max 240, NaN 0x80) give the same
bits values two times apart. Flagged: codes that are NaN under the tag but ordinary under the other
encoding (0x80 in a FNUZ tensor: OCP bits relabelled without vLLM's 0x80 -> 0; 0x7F / 0xFF in an OCP
tensor: FNUZ bits, every value read twice too large), and OCP codes topping out at 240 (quantized for
FNUZ's range). Not flagged, and said so: FNUZ-tagged codes topping out at 0x7E with no 0x80, the mark
of vLLM's normalize_e4m3fn_to_e4m3fnuz (OCP bits relabelled, 0x80 -> 0, the scale doubled): with the
doubled scale the values are exact, without it they are half, and a single tensor cannot tell which.
"""

from __future__ import annotations

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

FN_NAN = (0x7F, 0xFF)
FNUZ_NAN = (0x80,)
FN_TOP, FNUZ_TOP = 0x7E, 0x7F


def fp8_encoding(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.common import fp8_table

    codes = np.asarray(t.refs["weight"].load(), dtype=np.uint8).reshape(-1)
    counts = np.bincount(codes, minlength=256)
    tagged = "e4m3fnuz" if t.details["element"] == "e4m3fnuz" else "e4m3"
    other = "e4m3" if tagged == "e4m3fnuz" else "e4m3fnuz"
    nan = {"e4m3": FN_NAN, "e4m3fnuz": FNUZ_NAN}
    nan_tagged = int(sum(counts[c] for c in nan[tagged]))
    nan_other = int(sum(counts[c] for c in nan[other]))
    magnitudes = np.nonzero(counts.reshape(2, 128).sum(axis=0))[0]
    usable = [m for m in magnitudes if not (tagged == "e4m3" and m == 0x7F)]
    top = int(max(usable)) if usable else 0
    top_value = {fmt: float(fp8_table(fmt)[top]) for fmt in ("e4m3", "e4m3fnuz")}
    evidence: dict[str, float | str] = {
        "tagged": "e4m3fn" if tagged == "e4m3" else "e4m3fnuz", "nan_codes_tagged": nan_tagged,
        "nan_codes_other": nan_other, "top_magnitude_code": f"0x{top:02X}",
        "top_value_e4m3fn": top_value["e4m3"], "top_value_e4m3fnuz": top_value["e4m3fnuz"],
    }
    reasons = []
    if nan_tagged and not nan_other and tagged == "e4m3fnuz":
        reasons.append(f"{nan_tagged} codes are 0x80, NaN in e4m3fnuz but fn's -0: OCP bits relabelled as FNUZ without "
                       "vLLM's 0x80 -> 0 (and unless the scale was doubled with them, every value reads half what was "
                       "written: fnuz's exponent bias is 8, OCP's 7)")
    if nan_tagged and not nan_other and tagged == "e4m3":
        reasons.append(f"{nan_tagged} codes are 0x7F / 0xFF, NaN in e4m3fn but fnuz's +-240: FNUZ bits stored as OCP "
                       "E4M3, so every value reads twice what was written (fnuz's exponent bias is 8, OCP's 7) and "
                       "fnuz's largest values read as NaN")
    if tagged == "e4m3" and top_value["e4m3"] == 240.0:
        reasons.append("the codes top out at 240, e4m3fnuz's max: quantized for FNUZ's range, stored as OCP")
    flagged = bool(reasons)
    evidence["relabelled_from_ocp"] = "yes" if tagged == "e4m3fnuz" and top == FN_TOP else "no"
    if flagged:
        message = "; ".join(reasons)
    elif evidence["relabelled_from_ocp"] == "yes":
        message = ("the codes top out at 0x7E (OCP's 448, 224 as FNUZ), never FNUZ's 0x7F, and no code is 0x80: "
                   "OCP-quantized bits relabelled as FNUZ the way vLLM's normalize_e4m3fn_to_e4m3fnuz does; the values "
                   "are right when the scale was doubled with them, which one tensor cannot show, so this is not "
                   "flagged")
    else:
        message = f"the codes fit {evidence['tagged']}: no NaN codes, top code {evidence['top_magnitude_code']}"
    return CheckResult("fp8_encoding", flagged, evidence, message)
