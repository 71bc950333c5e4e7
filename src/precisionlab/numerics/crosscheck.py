"""Decode every code of an 8-bit float format and compare with ml_dtypes and torch.

A mismatch is a code whose two decoded values differ as float64 bit patterns, except that
any NaN matches any NaN. ml_dtypes and torch are optional: a library that is not
installed (or lacks the dtype) is reported as None, never as a pass.
"""

from __future__ import annotations

import numpy as np

from precisionlab.formats import Format, get_format
from precisionlab.rounding import decode

ML_DTYPES_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
                   "e5m2fnuz": "float8_e5m2fnuz"}
TORCH_NAMES = ML_DTYPES_NAMES
"""torch spells these dtypes the same way (torch.float8_e4m3fn, ...)."""


def all_codes(fmt: str | Format) -> np.ndarray:
    """Values (float64) of codes 0 .. 2^bits - 1 (formats of 8 bits or fewer)."""
    target = get_format(fmt)
    if target.bits > 8:
        raise ValueError(f"{target.name} has {target.bits} bits; all_codes is for formats of 8 bits or fewer")
    return np.asarray(decode(np.arange(target.code_count, dtype=np.uint8), target), dtype=np.float64)


def count_mismatches(ours: np.ndarray, theirs: np.ndarray) -> int:
    """Codes whose values differ bit for bit (signed zeros count), any NaN equal to any NaN."""
    both_nan = np.isnan(ours) & np.isnan(theirs)
    same = ours.view(np.int64) == theirs.view(np.int64)
    return int(np.count_nonzero(~(same | both_nan)))


def ml_dtypes_values(fmt: str | Format) -> np.ndarray | None:
    """ml_dtypes' decoding of every code, or None when ml_dtypes (or the dtype) is missing."""
    name = ML_DTYPES_NAMES.get(get_format(fmt).name)
    try:
        import ml_dtypes
    except ImportError:
        return None
    dtype = getattr(ml_dtypes, name, None) if name else None
    if dtype is None:
        return None
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)


def torch_values(fmt: str | Format) -> np.ndarray | None:
    """torch's decoding of every code, or None when torch (or the dtype) is missing."""
    name = TORCH_NAMES.get(get_format(fmt).name)
    try:
        import torch
    except ImportError:
        return None
    dtype = getattr(torch, name, None) if name else None
    if dtype is None:
        return None
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return codes.view(dtype).to(torch.float64).numpy()


def vendor_mismatches(fmt: str | Format) -> dict[str, int | None]:
    """{'ml_dtypes': mismatches or None, 'torch': mismatches or None} for one format."""
    ours = all_codes(fmt)
    results: dict[str, int | None] = {}
    for library, values in (("ml_dtypes", ml_dtypes_values(fmt)), ("torch", torch_values(fmt))):
        results[library] = None if values is None else count_mismatches(ours, values)
    return results
