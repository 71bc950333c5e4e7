"""LLM.int8() (Dettmers et al., 2022): mixed-precision decomposition of X W^T.

    O = { j : max_t |X_tj| >= threshold }          (outlier input columns, found per call; 6.0)
    Y = fp16(X[:, O]) fp16(W~[:, O])^T             (fp16 inputs, float accumulation)
      + s_x s_w^T * (Cx Cw^T)                      (int8 x int8, exact int32 accumulation)

The int8 part is vector-wise: weights per output row (absmax / 127, fp32 scales, stored once,
over all columns: `int8:row:scale=fp32`), activations per token. A token's absmax is taken, by
default (`token_absmax="columns"`, the paper's split), over the non-outlier columns only: the
outlier columns are zeroed first. bitsandbytes (0.50, `int8_vectorwise_quant`) zeroes only
the entries with |X_tj| >= threshold, takes the row absmax over what is left (an outlier column's
entries below the threshold still count), then zeroes the outlier columns' codes:
`token_absmax="entries"` does that. Its token scale is never finer, and coarser wherever an outlier
column's entry below the threshold is the token's largest.
W~ is what the outlier columns multiply: by default the int8 weights dequantized to fp16
(bitsandbytes' inference path: only int8 weights are stored); `outlier_weights="fp16"` keeps
those columns of the original weight in fp16 (the paper's formula). The int8 products are
summed exactly (as integers held in float64: no int32 product sum of these widths reaches 2^53), then scaled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.peers import as_numpy
from precisionlab.quant import quantize
from precisionlab.quant.tensor import QuantizedTensor

THRESHOLD = 6.0
INT8_ROW = "int8:row:scale=fp32"


@dataclass
class Int8Product:
    """The decomposed product and what it used."""

    output: np.ndarray
    """(tokens, out) float64."""
    outlier_columns: np.ndarray
    """Indices of the input columns computed in fp16."""


def int8_codes(q: QuantizedTensor) -> np.ndarray:
    """Signed integer codes (int64) of an int8 QuantizedTensor, in its (rows, columns) shape."""
    return q.codes.view(np.int8).astype(np.int64)[:, : q.shape[1]]


def quantize_weight(weight: Any) -> QuantizedTensor:
    """The stored int8 weight: per output row, fp32 absmax scales."""
    return quantize(as_numpy(weight, np.float32), INT8_ROW)


CHOICES = {"outlier_weights": ("int8", "fp16"), "token_absmax": ("columns", "entries")}
"""The values of the two string options (see the module docstring)."""


def check_options(outlier_weights: str, token_absmax: str) -> None:
    """ValueError naming an option whose value is not one of CHOICES."""
    for key, value in (("outlier_weights", outlier_weights), ("token_absmax", token_absmax)):
        if value not in CHOICES[key]:
            raise ValueError(f"LLM.int8() {key} must be {' or '.join(map(repr, CHOICES[key]))}, got {value!r}")


def llm_int8_matmul(x: Any, weight: Any, threshold: float = THRESHOLD, weight_q: QuantizedTensor | None = None,
                    outlier_weights: str = "int8", token_absmax: str = "columns") -> Int8Product:
    """X W^T by the decomposition of the module docstring (x: (tokens, in), weight: (out, in))."""
    if not threshold > 0:
        raise ValueError(f"the outlier threshold must be > 0, got {threshold}")
    check_options(outlier_weights, token_absmax)
    xs = as_numpy(x, np.float32).reshape(-1, as_numpy(x).shape[-1])
    w = as_numpy(weight, np.float32)
    if xs.shape[1] != w.shape[1]:
        raise ValueError(f"x has {xs.shape[1]} features but the weight has {w.shape[1]} input columns")
    wq = quantize_weight(w) if weight_q is None else weight_q
    outliers = np.flatnonzero(np.abs(xs).max(axis=0) >= threshold) if xs.size else np.empty(0, dtype=np.int64)
    regular = xs.copy()
    if token_absmax == "columns":
        regular[:, outliers] = 0.0
    else:
        regular[np.abs(xs) >= threshold] = 0.0
    xq = quantize(regular, INT8_ROW)
    x_codes = int8_codes(xq).astype(np.float64)
    x_codes[:, outliers] = 0.0  # a no-op for "columns"; for "entries" the outlier columns leave the int8 part
    # exact integer sums in float64 (BLAS): every product is below 2^14 and every partial sum an integer below 2^53
    acc = x_codes @ int8_codes(wq).astype(np.float64).T
    y = acc * xq.scales.astype(np.float64) * wq.scales.astype(np.float64).T
    if outliers.size:
        w_out = wq.dequantize()[:, outliers] if outlier_weights == "int8" else w[:, outliers]
        x16 = xs[:, outliers].astype(np.float16).astype(np.float64)
        w16 = w_out.astype(np.float16).astype(np.float64)
        y = y + x16 @ w16.T
    return Int8Product(y, outliers)


def fp16_output(x: Any, weight: Any) -> np.ndarray:
    """The fp16 layer's output fp16(X) fp16(W)^T (float64 sums of the fp16 products): LLM.int8()'s reference."""
    xs = as_numpy(x, np.float32)
    return xs.astype(np.float16).astype(np.float64) @ as_numpy(weight, np.float32).astype(np.float16).astype(
        np.float64).T
