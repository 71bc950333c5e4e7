"""Convention checks: evidence that a tensor was written under one convention and is read under another.

Each check returns a `CheckResult` (name, flagged, evidence, message); `run_checks` runs those that
apply to a tensor's layout. The mix-ups they look for produce plausible wrong numbers, not errors.
Each module's docstring gives the rule and what was measured on real weights:

    fp8_encoding                  fp8      OCP E4M3 and E4M3FNUZ bits under each other's tag
    gptq_zero_offset              gptq     v1 zero points read as v2 or the reverse; v1 zero points of 0
    nibble_order                  nibbles  4-bit codes unpacked in another lane order than they were packed
    nvfp4_global_scale_direction  scales   compressed-tensors' encode-direction global scale written decoded
    scale_vs_amax                 scales   scales for another range, implausible magnitudes, 16-bit scales
                                           read as the other 16-bit float
    int_range                     int_range  symmetric int codes of another convention (narrow / full /
                                           full_neg) than the file declares
    transposed                    orientation  a weight stored (in, out), or codes transposed against
                                           their scales (config shapes, per-group scale statistics)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.fp8 import fp8_encoding
from precisionlab.interop.checks.gptq import gptq_zero_offset
from precisionlab.interop.checks.int_range import int_range
from precisionlab.interop.checks.nibbles import nibble_order
from precisionlab.interop.checks.orientation import transposed
from precisionlab.interop.checks.result import CheckResult
from precisionlab.interop.checks.scales import nvfp4_global_scale_direction, scale_vs_amax

PLAIN = ("gguf:F32", "gguf:F16", "gguf:BF16")


def run_checks(tensor: CheckpointTensor, checkpoint: Any = None, values: np.ndarray | None = None
               ) -> list[CheckResult]:
    """Every check that applies to the tensor's layout. checkpoint: where the model's config is read from
    (`transposed`); values: the tensor's dequantized values when the caller has them (saves a decode)."""
    layout = tensor.layout
    results: list[CheckResult | None] = []
    if layout in ("fp8:e4m3fn", "fp8:e4m3fnuz") or (layout == "compressed-tensors:float-quantized"
                                                   and tensor.details.get("element") in ("e4m3", "e4m3fnuz")):
        results.append(fp8_encoding(tensor))
    if layout.startswith("gptq:"):
        results.append(gptq_zero_offset(tensor))
    if (layout.startswith("gptq:") and tensor.details.get("bits") == 4) or layout == "awq:gemm" or (
            layout == "compressed-tensors:pack-quantized" and tensor.details.get("bits") == 4) or layout == "bnb:nf4":
        results.append(nibble_order(tensor))
    if layout == "compressed-tensors:nvfp4-pack-quantized":
        results.append(nvfp4_global_scale_direction(tensor))
    if layout != "unknown" and not layout.startswith("float:") and layout not in PLAIN:
        results.append(scale_vs_amax(tensor, values))
        results.append(int_range(tensor))
    results.append(transposed(tensor, checkpoint))
    return [r for r in results if r is not None]


__all__ = ["CheckResult", "fp8_encoding", "gptq_zero_offset", "int_range", "nibble_order",
           "nvfp4_global_scale_direction", "run_checks", "scale_vs_amax", "transposed"]
