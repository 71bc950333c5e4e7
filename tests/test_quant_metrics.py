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
    assert m.frac_clipped == 0.0  # symmetric absmax scaling never clips


def test_clipped_fraction_counts_floor_clipping() -> None:
    x = np.ones((1, 64), dtype=np.float32)
    x[0, 0] = 957.0  # MXFP8 FLOOR: X = 2, limit 448 * 2 = 896 < 957
    assert error_metrics(x, quantize(x, "mxfp8")).frac_clipped == 1 / 64
    assert error_metrics(x, quantize(x, "mxfp8:rceil")).frac_clipped == 0.0
    exact = quantize(np.ones((2, 32), dtype=np.float32), "int8:row")
    assert math.isinf(error_metrics(np.ones((2, 32), dtype=np.float32), exact).sqnr_db)
