"""Every one of the 2^32 float32 inputs, rounded to binary8p8ue and binary8p8uf (the P3109 formats
with 7 trailing significand bits, which the 2^18-entry table serves) under the nearest modes and
toward_zero, against exact rational rounding (tests/reference.py). The directed modes and to_odd
are swept for every P3109 format of 8 bits or fewer in tests/test_rounding_exhaustive.py.

Marked slow: `python3 -m pytest -m slow tests/test_p3109_table_sweep.py` (a few minutes per format
and mode on the shared 2-core machine).
"""

from __future__ import annotations

import numpy as np
import pytest

import precisionlab as pl

from .reference import ref_format

CHUNK = 1 << 24
LOW_BITS = 15
"""The finest grid the breakpoints of these formats need: 1 + 7 trailing bits, and midpoints one
more, is 9 significant bits, so every breakpoint is a float32 with its low 15 bits zero."""


def input_class(u: np.ndarray) -> np.ndarray:
    """2 * (top 17 bits) + (1 if any of the low 15 bits is set): the float32 inputs of one class lie
    together on one number of the 15-bit grid or strictly between two neighbouring ones."""
    top = (u >> np.uint32(LOW_BITS)) << np.uint32(1)
    return top | ((u & np.uint32((1 << LOW_BITS) - 1)) != 0).astype(np.uint32)


def exact_by_class(name: str, mode: str) -> np.ndarray:
    """The exact rounding of one member of every class (the pattern with only the lowest of the low
    15 bits set stands for the open interval), which holds no breakpoint inside it."""
    ref = ref_format(pl.get_format(name))
    index = np.arange(1 << (33 - LOW_BITS), dtype=np.uint32)
    members = (((index >> np.uint32(1)) << np.uint32(LOW_BITS)) | (index & np.uint32(1))).view(np.float32)
    with np.errstate(invalid="ignore"):
        wide = members.astype(np.float64)
    return np.array([ref.round(float(v), mode) for v in wide]).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero"])
@pytest.mark.parametrize("name", ["binary8p8ue", "binary8p8uf"])
def test_every_float32_input_matches_exact_rounding(name: str, mode: str) -> None:
    expected = exact_by_class(name, mode)
    for start in range(0, 1 << 32, CHUNK):
        u = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x = u.view(np.float32)
        ours = pl.round_to(x, name, rounding=mode)
        assert ours.dtype == np.float32
        want = expected[input_class(u)]
        equal = ours.view(np.uint32) == want.view(np.uint32)
        assert equal.all() or (np.isnan(ours[~equal]) & np.isnan(want[~equal])).all(), (name, mode, hex(start))
