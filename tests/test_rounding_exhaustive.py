"""Every one of the 2^32 float32 inputs, rounded to each format of 16 bits or fewer, against ml_dtypes
(numpy's own float16 for fp16); and in the directed modes and to_odd, to every format of 8 bits or
fewer (the registered ones and the whole P3109 family of widths 2 to 8), against exact rationals.

Marked slow: `python3 -m pytest -m slow tests/test_rounding_exhaustive.py`. The ml_dtypes sweep takes
minutes; the exact sweep is 3 x 2^32 roundings per format, 130 formats: 3-6 minutes for binary8p3se,
e4m3 and binary4p2uf on the shared, loaded 2-core machine (every format here takes the table path,
binary8p8ue / binary8p8uf its finer 2^18-entry grid), so the whole sweep is hours there;
`-k binary8p3se` picks one format. NaN inputs to formats without NaN and ue8m0's lowest binade are
the documented differences from ml_dtypes (tests/test_rounding_peers.py), left out there.
"""

from __future__ import annotations

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import FloatFormat, list_formats, p3109_formats

from .reference import NEW_MODES, ref_format, same_bits

PEERS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
         "e5m2fnuz": "float8_e5m2fnuz", "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn",
         "ue8m0": "float8_e8m0fnu", "bf16": "bfloat16", "fp16": None}
CHUNK = 1 << 24


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PEERS))
def test_every_float32_input_matches_ml_dtypes(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = pl.get_format(name)
    peer = np.float16 if PEERS[name] is None else getattr(ml_dtypes, PEERS[name])
    for start in range(0, 1 << 32, CHUNK):
        x = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        keep = np.ones(x.shape, dtype=bool)
        if not fmt.has_nan:
            keep &= ~np.isnan(x)
        if name == "ue8m0":
            magnitude = np.abs(x)
            keep &= ~((magnitude > 2.0**-127) & (magnitude < 2.0**-126))
        x = x[keep]
        with np.errstate(over="ignore", invalid="ignore"):
            expected = x.astype(peer).astype(np.float32)
        ours = pl.round_to(x, name)
        assert same_bits(ours, expected).all(), (name, hex(start))


SMALL = [f for f in list_formats("float") if isinstance(f, FloatFormat) and f.bits <= 8]
SMALL += [f for width in range(2, 9) for f in p3109_formats(width)
          if f.defining_fields not in {g.defining_fields for g in SMALL}]


def input_class(u: np.ndarray) -> np.ndarray:
    """2 * (top 16 bits) + (1 if any low bit is set): the float32 inputs one class holds lie together
    on a bf16 number or strictly between two neighbouring bf16 numbers, with one sign."""
    return ((u >> np.uint32(16)) << np.uint32(1)) | ((u & np.uint32(0xFFFF)) != 0).astype(np.uint32)


def exact_by_class(fmt: FloatFormat, mode: str) -> np.ndarray:
    """The exact rounding of every input class (tests/reference.py, from the defining fields).

    For a format of 8 bits or fewer every grid point (its values and the points of its grid past the top,
    at most M + 1 <= 8 significant bits, exponents inside float32's) is a bf16 number, so no grid point
    lies strictly inside a class; a directed or to-odd rounding depends only on where x lies relative to
    the grid points, hence is one value per class, and one member of the class (the pattern with only
    the lowest bit set among the low 16) stands for all of them.
    """
    ref = ref_format(fmt)
    index = np.arange(1 << 17, dtype=np.uint32)
    members = (((index >> np.uint32(1)) << np.uint32(16)) | (index & np.uint32(1))).view(np.float32)
    with np.errstate(invalid="ignore"):
        wide = members.astype(np.float64)
    return np.array([ref.round(float(v), mode) for v in wide]).astype(np.float32)  # every result is a float32


def same_float32_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit patterns, or both NaN (payloads aside): same_bits, cheaper for 2^24-element chunks."""
    equal = a.view(np.uint32) == b.view(np.uint32)
    return bool(equal.all()) or bool((np.isnan(a[~equal]) & np.isnan(b[~equal])).all())


@pytest.mark.slow
@pytest.mark.parametrize("fmt", SMALL, ids=[f.name for f in SMALL])
def test_every_float32_input_in_the_new_modes_matches_exact_rounding(fmt: FloatFormat) -> None:
    expected = {mode: exact_by_class(fmt, mode) for mode in NEW_MODES}
    for start in range(0, 1 << 32, CHUNK):
        u = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x = u.view(np.float32)
        keep = slice(None) if fmt.has_nan else ~np.isnan(x)
        x, classes = x[keep], input_class(u[keep])
        for mode in NEW_MODES:
            ours = pl.round_to(x, fmt, rounding=mode)
            assert ours.dtype == np.float32
            assert same_float32_bits(ours, expected[mode][classes]), (fmt.name, mode, hex(start))
