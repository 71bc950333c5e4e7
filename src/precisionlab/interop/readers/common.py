"""Shared pieces of the readers: float conversions the toolkits' own arithmetic uses, fp8 tables.

Every toolkit here dequantizes in a 16- or 32-bit float type; to return exactly its values as
float32, the readers compute the same products in float32 (where the product is exact, as it is
for a small integer times an fp16 / bf16 scale) and round once to the toolkit's output type:

    fp16   numpy's float32 -> float16 cast (round to nearest even)
    bf16   round to nearest even on the float32 bits (the top 16 bits are kept)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from precisionlab.rounding.bf16 import bf16_to_float32

FLOAT_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
"""safetensors float dtypes -> the names the readers report."""

FP8_FORMATS = {"F8_E4M3": "e4m3", "F8_E5M2": "e5m2", "F8_E4M3FNUZ": "e4m3fnuz", "F8_E5M2FNUZ": "e5m2fnuz"}
"""safetensors FP8 dtypes -> precisionlab format names."""


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), returned as float32; NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    return np.where(np.isnan(x), x, out)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded once to dtype ('float32', 'float16' or 'bfloat16'), as float32."""
    if dtype == "float32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return round_to_bf16(x)
    raise ValueError(f"cannot round to {dtype}")


def float_values(raw: np.ndarray, stored_dtype: str) -> np.ndarray:
    """A stored float array as float32 values: F32 as is, F16 / BF16 exactly, F64 rounded once."""
    if stored_dtype == "BF16":
        return bf16_to_float32(raw)
    if stored_dtype in ("F32", "F16", "F64"):
        return np.asarray(raw, dtype=np.float32)
    if stored_dtype in FP8_FORMATS:
        return fp8_table(FP8_FORMATS[stored_dtype])[np.asarray(raw, dtype=np.uint8)]
    raise ValueError(f"{stored_dtype} is not a float dtype")


@lru_cache(maxsize=8)
def fp8_table(fmt: str) -> np.ndarray:
    """The 256 values of an 8-bit float format by code (precisionlab's exact decoder), float32."""
    from precisionlab.rounding import decode

    table = np.asarray(decode(np.arange(256, dtype=np.uint8), fmt), dtype=np.float32).copy()
    table.flags.writeable = False
    return table


def canonical_scheme(spec: str | None) -> str | None:
    """The canonical spelling of a scheme string (options in the grammar's order), None passes."""
    if spec is None:
        return None
    from precisionlab.quant.scheme import parse_scheme

    return str(parse_scheme(spec))
