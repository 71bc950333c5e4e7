"""Error measures of a quantized tensor against its source (computed in float64).

    relative error  ||x_hat - x||_2 / ||x||_2
    SQNR (dB)       10 log10( sum x^2 / sum (x_hat - x)^2 )          (inf when exact)
    max error       max |x_hat - x|
    rms error       sqrt(mean (x_hat - x)^2)
    clipped         fraction of elements with |x| above their block's largest
                    representable magnitude (element max * block scale)

Non-finite input elements are left out of every measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.quant.blocks import canonical_view, to_view
from precisionlab.quant.core import _divisors, as_array, make_codec
from precisionlab.quant.tensor import QuantizedTensor


@dataclass(frozen=True)
class ErrorMetrics:
    rel_err: float
    sqnr_db: float
    max_err: float
    rms_err: float
    frac_clipped: float


def error_metrics(x: Any, q: QuantizedTensor, x_hat: np.ndarray | None = None) -> ErrorMetrics:
    """All measures of q (or of a precomputed x_hat) against x."""
    arr, _ = as_array(x)
    ref = np.asarray(arr, dtype=np.float64).reshape(q.shape)
    approx = (q.dequantize() if x_hat is None else x_hat).astype(np.float64).reshape(q.shape)
    finite = np.isfinite(ref)
    err = np.where(finite, approx - ref, 0.0)
    err = np.where(np.isfinite(err), err, 0.0)
    signal = float(np.sum(np.where(finite, ref, 0.0) ** 2))
    noise = float(np.sum(err**2))
    count = max(int(finite.sum()), 1)
    rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return ErrorMetrics(rel, sqnr, float(np.abs(err).max(initial=0.0)), math.sqrt(noise / count),
                        clipped_fraction(arr, q))


def clipped_fraction(x: Any, q: QuantizedTensor) -> float:
    """Fraction of finite elements whose |x| exceeds element max * block scale (they saturate)."""
    arr, _ = as_array(x)
    axis, _, view_shape = canonical_view(arr.shape, q.scheme)
    view = np.abs(to_view(np.asarray(arr, dtype=np.float64), axis, view_shape))
    if q.outlier_index is not None:
        keep = np.ones(view.shape[1], dtype=bool)
        keep[q.outlier_index] = False
        view = view[:, keep, :]
    lay = q.layout
    limit = _divisors(q, make_codec(q.scheme)).astype(np.float64) * make_codec(q.scheme).max_value
    br = lay.padded[1] if lay.whole_rows else lay.block[0]
    full = np.repeat(np.repeat(limit, br, axis=1), lay.block[1], axis=2)[:, : view.shape[1], : view.shape[2]]
    finite = np.isfinite(view)
    clipped = finite & (view > full)
    return float(clipped.sum()) / max(arr.size, 1)
