"""Plain float tensors of a safetensors checkpoint: layout "float:<dtype>", values exact in float32.

F32 / F16 / BF16 convert exactly; F64 is rounded once to float32 (noted in the details).
"""

from __future__ import annotations

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor, PartRef
from precisionlab.interop.readers.common import float_values


def build_float(name: str, ref: PartRef) -> CheckpointTensor:
    details = {"dtype": ref.stored_dtype}
    if ref.stored_dtype == "F64":
        details["note"] = "float64 values are rounded once to float32"
    return CheckpointTensor(name, f"float:{ref.stored_dtype}", None, ref.shape, ref.file, {"data": ref}, decode_float,
                            details)


def decode_float(t: CheckpointTensor) -> np.ndarray:
    ref = t.refs["data"]
    return np.array(float_values(ref.load(), ref.stored_dtype), dtype=np.float32).reshape(t.shape)
