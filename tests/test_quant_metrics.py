"""Error measures against direct formulas, and the clipped fraction on hand-derived cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

import precisionlab.quant.metrics as metrics
from precisionlab.quant import error_metrics, quantize


def test_measures_match_direct_formulas(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).standard_normal((50, 96)).astype(np.float32)
    q = quantize(x, "int4:g32")
    err = q.dequantize().astype(np.float64) - x
    monkeypatch.setattr(metrics, "CHUNK", 1000)  # several chunks
    m = error_metrics(x, q)
    assert m.rel_err == pytest.approx(np.linalg.norm(err) / np.linalg.norm(x.astype(np.float64)), rel=1e-12)
    assert m.sqnr_db == pytest.approx(10 * math.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(err**2)), rel=1e-12)
    assert m.max_err == np.abs(err).max()
    assert m.rms_err == pytest.approx(math.sqrt(np.mean(err**2)), rel=1e-12)
    assert m.frac_clipped == 0.0  # absmax scaling only "clips" by a scale-rounding hair, which does not count


def test_clipped_fraction_counts_floor_clipping() -> None:
    x = np.ones((1, 64), dtype=np.float32)
    x[0, 0] = 957.0  # MXFP8 FLOOR: X = 2, limit (448 + 32 / 2) * 2 = 928 < 957
    assert error_metrics(x, quantize(x, "mxfp8")).frac_clipped == 1 / 64
    assert error_metrics(x, quantize(x, "mxfp8:rceil")).frac_clipped == 0.0
    y = np.full((2, 32), 127.0, dtype=np.float32)  # s = 1 exactly: no error at all
    assert math.isinf(error_metrics(y, quantize(y, "int8:row")).sqnr_db)
    z = np.full((1, 32), 1.0, dtype=np.float32)
    z[0, 0] = 2.9  # mxfp4: X = 2^(1 - 2) = 0.5; 2.9 / 0.5 = 5.8 < 6 + (6 - 4) / 2: rounds, not clipped
    assert error_metrics(z, quantize(z, "mxfp4")).frac_clipped == 0.0
    z[0, 0] = 3.9  # X = 0.5; 7.8 > 7: saturated (FLOOR clips)
    assert error_metrics(z, quantize(z, "mxfp4")).frac_clipped == 1 / 32


def test_clipped_fraction_asymmetric() -> None:
    # int8 asym, e4m3 scale: lo = 0, hi = 300 -> ideal s = 300/255 = 1.176 -> e4m3 1.125 (grid 1.125 | 1.25);
    # z = -128 - rint(0 / s) = -128; the top code 127 stands for (127 + 128) * 1.125 = 286.875, so values
    # above 286.875 + 1.125 / 2 = 287.4375 saturate: 288 and 300 do, 287 does not (287 / 1.125 -> 255).
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 1:4] = [287.0, 288.0, 300.0]
    q = quantize(x, "int8:row:asym:scale=e4m3")
    assert q.scales[0, 0] == 1.125 and q.zero_points[0, 0, 0] == -128
    assert error_metrics(x, q).frac_clipped == 2 / 32
    positive = np.abs(np.random.default_rng(1).standard_normal((4, 64))).astype(np.float32)
    for scheme in ("int8:row:asym", "int4:g32:asym", "uint8:row"):  # an fp16-scaled asym range holds its data
        assert error_metrics(positive, quantize(positive, scheme)).frac_clipped == 0.0


def test_clipped_fraction_symmetric_int_stops_at_127() -> None:
    # int8 sym, e4m3 scale: amax 300 -> ideal s = 300/127 = 2.362 -> e4m3 2.25 (grid 2.25 | 2.5); codes stop at
    # +-127 (285.75), so anything above 127.5 * 2.25 = 286.875 saturates: 288 (-> 128 -> 127), 290, 300 and -288
    # do, 286 does not. (The unused code -128 must not widen the limit to 128.5 * 2.25 = 289.125.)
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 1:6] = [286.0, 288.0, 290.0, 300.0, -288.0]
    q = quantize(x, "int8:row:scale=e4m3")
    assert q.scales[0, 0] == 2.25
    assert error_metrics(x, q).frac_clipped == 4 / 32


def test_poisoned_block_is_an_infinite_error() -> None:
    x = np.ones((2, 32), dtype=np.float32)
    x[0, 3] = np.nan  # mxfp8 (nonfinite=nan): row 0's block reads back as NaN, its 31 finite elements too
    m = error_metrics(x, quantize(x, "mxfp8"))
    assert math.isinf(m.rel_err) and math.isinf(m.max_err) and m.sqnr_db == -math.inf
    clean = error_metrics(x[1:], quantize(x[1:], "mxfp8"))
    assert clean.rel_err == 0.0 and clean.sqnr_db == math.inf  # 1.0 is exact in mxfp8


def test_shape_mismatch_is_an_error() -> None:
    x = np.ones((2, 32), dtype=np.float32)
    with pytest.raises(ValueError, match="elements"):
        error_metrics(x[:1], quantize(x, "int8"))
