"""bfloat16 bit patterns to float32 values: bf16 is the top half of a float32, so the conversion is a
16-bit shift and exact (NaN payloads, infinities and signed zeros included)."""

from __future__ import annotations

import numpy as np


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16, or integers that fit in 16 bits) -> float32 values, same shape:
    value bits = pattern << 16."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
