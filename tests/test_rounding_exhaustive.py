"""Every one of the 2^32 float32 inputs, rounded to each format of 16 bits or fewer, against ml_dtypes
(numpy's own float16 for fp16).

Minutes of work, so marked slow: `python3 -m pytest -m slow tests/test_rounding_exhaustive.py`.
NaN inputs to formats without NaN and ue8m0's lowest binade are the documented differences
(tests/test_rounding_peers.py) and are left out here.
"""

from __future__ import annotations

import numpy as np
import pytest

import precisionlab as pl

from .reference import same_bits

ml_dtypes = pytest.importorskip("ml_dtypes")

PEERS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
         "e5m2fnuz": "float8_e5m2fnuz", "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn",
         "ue8m0": "float8_e8m0fnu", "bf16": "bfloat16", "fp16": None}
CHUNK = 1 << 24


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PEERS))
def test_every_float32_input_matches_ml_dtypes(name: str) -> None:
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
