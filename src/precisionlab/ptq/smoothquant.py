"""SmoothQuant (Xiao et al., 2023): move activation outliers into the weights before W8A8.

For the layers W_1..W_k that read one input X (N channels) and a migration strength alpha:

    s_j = max_t |X_tj|^alpha / max_i |W_ij|^(1 - alpha)     (max over every layer's column j;
                                                             s_j = 1 where either max is 0)
    X' = X diag(1/s)  (folded into the previous norm or linear)     W' = W diag(s)
    Y  ~ Qa(X') Qw(W')^T

Qw is any weight scheme with an 8-bit element (int8 or fp8; per tensor, per row, ...), Qa an
activation scheme over the (tokens, channels) matrix: per token is `<element>:row` (the
default: the weight's element, one scale per token, computed at run time), per tensor is
`<element>`. The product of the dequantized values is computed in float64, which equals an
8-bit GEMM with exact (int32) accumulation followed by the scale multiplication.

alpha="auto" (not in the paper, which tunes alpha per model by hand) picks, per group, the
alpha of {0, 0.05, ..., 1} whose W8A8 output error summed over the group's layers (relative
squared error per layer, on the calibration sample) is smallest, admitting only the alphas that
leave no layer worse than without smoothing; "no smoothing" (s = 1) is always a candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab.peers import as_numpy
from precisionlab.ptq.activations import relative_squared_error
from precisionlab.ptq.awq import rescale
from precisionlab.quant import quantize
from precisionlab.quant.elements import make_codec
from precisionlab.quant.scheme import Granularity, Scheme, parse_scheme

DEFAULT_ALPHA = 0.5
ALPHA_GRID = tuple(i / 20 for i in range(21))


def check_w8a8(weight_scheme: str | Scheme, act_scheme: str | Scheme | None = None,
               method: str = "SmoothQuant") -> tuple[Scheme, Scheme]:
    """(weight scheme, activation scheme), or ValueError when they are not W8A8."""
    w = parse_scheme(weight_scheme)
    if make_codec(w).bits != 8:
        raise ValueError(f"{method} is W8A8: scheme {w} has {make_codec(w).bits}-bit elements; use an 8-bit integer "
                         "or fp8 scheme (int8, int8:row, e4m3, ...), or gptq / awq for low-bit weights")
    a = parse_scheme(act_scheme) if act_scheme is not None else default_act_scheme(w)
    if make_codec(a).bits != 8:
        raise ValueError(f"{method} is W8A8: activation scheme {a} has {make_codec(a).bits}-bit elements")
    if a.granularity is Granularity.COL:
        raise ValueError(f"activation scheme {a}: per-channel activation scales cannot be applied inside a GEMM; "
                         "use per token (:row) or per tensor")
    return w, a


def default_act_scheme(weight_scheme: Scheme) -> Scheme:
    """Per-token activations with the weight's element (int8 -> int8:row, e4m3 -> e4m3:row)."""
    return parse_scheme(f"{weight_scheme.element}:row")


def smoothing_scales(act_absmax: Any, weights: Sequence[Any], alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """s (N,) of the module docstring, float64."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"the migration strength alpha must be in [0, 1], got {alpha}")
    x = as_numpy(act_absmax, np.float64)
    w = np.max(np.stack([np.abs(as_numpy(wi, np.float64)).max(axis=0) for wi in weights]), axis=0)
    ok = (x > 0) & (w > 0)
    s = np.ones_like(x)
    s[ok] = x[ok] ** alpha / w[ok] ** (1 - alpha)
    return s


def w8a8_output(x: Any, weight: Any, weight_scheme: Scheme, act_scheme: Scheme,
                col_scales: np.ndarray | None = None, row_scales: np.ndarray | None = None) -> np.ndarray:
    """Y ~ diag(r) Qa(X diag(1/c)) Qw(diag(1/r) W diag(c))^T, float64 (tokens, out).

    c: the layer's input scales (its smoothing), r: its output's (when a later group folded its
    scales into this layer's rows); the result is in the original model's coordinates."""
    xs = as_numpy(x, np.float64)
    if col_scales is not None:
        xs = xs / np.asarray(col_scales, dtype=np.float64)[None, :]
    xq = quantize(xs.astype(np.float32), act_scheme).dequantize().astype(np.float64)
    wq = quantize(rescale(weight, col_scales, row_scales), weight_scheme).dequantize().astype(np.float64)
    y = xq @ wq.T
    if row_scales is not None:
        y = y * np.asarray(row_scales, dtype=np.float64)[None, :]
    return y


def search_alpha(x_samples: Sequence[Any], weights: Sequence[Any], act_absmax: Any, weight_scheme: Scheme,
                 act_scheme: Scheme) -> tuple[float | None, np.ndarray]:
    """(alpha, s) chosen as the module docstring's alpha="auto" says; (None, ones) when no smoothing wins.

    x_samples[i] is a calibration sample of layer i's input (the group shares one input, so usually
    the same array)."""
    xs = [as_numpy(x, np.float64) for x in x_samples]
    ws = [as_numpy(w, np.float64) for w in weights]
    refs = [x @ w.T for x, w in zip(xs, ws, strict=True)]

    def errors(scales: np.ndarray | None) -> list[float]:
        return [relative_squared_error(r, w8a8_output(x, w, weight_scheme, act_scheme, scales))
                for x, w, r in zip(xs, ws, refs, strict=True)]

    base = errors(None)
    best: tuple[float | None, np.ndarray, float] = (None, np.ones(ws[0].shape[1]), sum(base))
    for alpha in ALPHA_GRID:
        scales = smoothing_scales(act_absmax, ws, alpha)
        errs = errors(scales)
        if sum(errs) < best[2] and all(e <= b for e, b in zip(errs, base, strict=True)):
            best = (alpha, scales, sum(errs))
    return best[0], best[1]

