"""Error measures of a quantized tensor against its source (computed in float64).

    relative error  ||x_hat - x||_2 / ||x||_2
    SQNR (dB)       10 log10( sum x^2 / sum (x_hat - x)^2 )          (inf when exact)
    max error       max |x_hat - x|
    rms error       sqrt(mean (x_hat - x)^2)
    clipped         fraction of elements that saturated: x beyond their block's outermost
                    value by more than half the step next to it, (max + gap/2) * block scale
                    (so a block max that exceeds the limit by a rounding hair, e.g. after an
                    fp16 scale rounded down, does not count); asymmetric schemes: x outside
                    [(qmin - z - 1/2) s, (qmax - z + 1/2) s] (`quant.diagnostics.clip_bounds`)

Non-finite input elements are left out of every measure; a finite input element that
reads back as NaN or inf (it shares a block with a NaN under nonfinite=nan) is an infinite
error, so a poisoned block cannot hide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.quant.blocks import canonical_view, to_view
from precisionlab.quant.core import as_array
from precisionlab.quant.diagnostics import clip_bounds
from precisionlab.quant.elements import make_codec
from precisionlab.quant.tensor import QuantizedTensor


@dataclass(frozen=True)
class ErrorMetrics:
    rel_err: float
    sqnr_db: float
    max_err: float
    rms_err: float
    frac_clipped: float


CHUNK = 1 << 20
"""Elements per chunk: the measures run in float64 over chunks, so a large tensor costs
its dequantized copy (float32) plus a few chunks."""


def error_metrics(x: Any, q: QuantizedTensor, x_hat: np.ndarray | None = None) -> ErrorMetrics:
    """All measures of q (or of a precomputed x_hat) against x."""
    arr, _ = as_array(x)
    ref = arr.reshape(-1)
    approx = (q.dequantize() if x_hat is None else np.asarray(x_hat)).reshape(-1)
    if ref.size != q.size or approx.size != q.size:
        raise ValueError(f"error_metrics: x has {ref.size} elements and x_hat {approx.size}; the quantized tensor "
                         f"has shape {q.shape}")
    signal = noise = 0.0
    worst = 0.0
    count = 0
    for start in range(0, ref.size, CHUNK):
        r = np.asarray(ref[start : start + CHUNK], dtype=np.float64)
        a = np.asarray(approx[start : start + CHUNK], dtype=np.float64)
        finite = np.isfinite(r)
        with np.errstate(invalid="ignore"):
            err = np.where(finite, a - r, 0.0)
        err = np.where(np.isfinite(err), err, np.inf)  # a finite x read back as NaN/inf: infinite error
        signal += float(np.sum(np.where(finite, r, 0.0) ** 2))
        noise += float(np.sum(err**2))
        worst = max(worst, float(np.abs(err).max(initial=0.0)))
        count += int(finite.sum())
    rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    if noise == 0:
        sqnr = math.inf
    elif signal == 0 or math.isinf(noise):
        sqnr = -math.inf
    else:
        sqnr = 10 * math.log10(signal / noise)
    return ErrorMetrics(rel, sqnr, worst, math.sqrt(noise / max(count, 1)), clipped_fraction(arr, q))


def clipped_fraction(x: Any, q: QuantizedTensor) -> float:
    """Fraction of finite elements outside their block's range widened by half the top step: they saturated.

    Symmetric: |x| > (element max + top gap / 2) * divisor (integers: (2^(b-1) - 1 + 1/2) * s,
    since the code -2^(b-1) is never used; range=full / full_neg reach down to (-2^(b-1) - 1/2) * s).
    Asymmetric (integer codes qmin..qmax, zero point z): x < (qmin - z - 1/2) * s or x > (qmax - z + 1/2) * s.
    """
    arr, _ = as_array(x)
    axis, _, view_shape = canonical_view(arr.shape, q.scheme)
    view = to_view(arr, axis, view_shape)
    if q.outlier_index is not None:
        keep = np.ones(view.shape[1], dtype=bool)
        keep[q.outlier_index] = False
        view = view[:, keep, :]
    lay = q.layout
    cod = make_codec(q.scheme)
    lower, upper = clip_bounds(cod, q.divisors(), q.zero_points)  # (B, row blocks, column blocks)
    br = lay.padded[1] if lay.whole_rows else lay.block[0]
    n = view.shape[2]
    rows = max(1, CHUNK // max(n, 1))
    clipped = 0
    for b in range(view.shape[0]):
        for r0 in range(0, view.shape[1], rows):
            chunk = np.asarray(view[b, r0 : r0 + rows, :], dtype=np.float64)
            block_rows = np.arange(r0, r0 + chunk.shape[0]) // br
            hi = np.repeat(upper[b][block_rows], lay.block[1], axis=1)[:, :n]
            lo = np.repeat(lower[b][block_rows], lay.block[1], axis=1)[:, :n]
            clipped += int(np.count_nonzero(np.isfinite(chunk) & ((chunk > hi) | (chunk < lo))))
    return clipped / max(arr.size, 1)
