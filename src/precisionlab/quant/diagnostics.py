"""What a scheme's scales cost a tensor: floored scales and clipped elements, counted while quantizing.

    floored   a block whose ideal scale is below the smallest scale the scheme stores (the scale format's
              smallest positive value, 2^-127 for ue8m0, 2^-6 for nvfp4:minscale=normal): the stored scale
              is that floor, larger than the block needs, so its codes use only part of the range
              (int8:row:scale=e4m3 on N(0, 0.02²) weights: every row at 2^-9, codes within ±51 of ±127)
    clipped   a finite element beyond its block's range by more than half the top step, so it saturated
              rather than rounded: |x| > (element max + top gap / 2) * divisor (each side on its own: nf4's
              negative end is -1 with -0.696 next to it); asymmetric integers: x outside
              [(qmin - z - 1/2) s, (qmax - z + 1/2) s]; a float min (min=): x outside [m - s/2, m + (qmax + 1/2) s]
              (a negative scale, as llama.cpp's Q4_0 stores, swaps the two ends). With a rounded scale the block max
              itself can clip
              (int4:g32:scale=e4m3: 1.1% of N(0, 0.02²) elements); scaleround=up prevents that

`quantize` warns (QuantizationWarning) when more than FLOORED_WARN_FRACTION of the blocks are floored
or more than CLIPPED_WARN_FRACTION of the elements clip, except that MX FLOOR's clipping is that rule's
definition (the OCP spec's; rceil is the rule that never clips) and is counted but not warned about.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from precisionlab.quant.elements import Codec, ElementFormat
from precisionlab.quant.scheme import MXRule, Scheme

FLOORED_WARN_FRACTION = 0.01
"""Warn when more than 1% of the blocks have a floored scale."""

CLIPPED_WARN_FRACTION = 0.001
"""Warn when more than 0.1% of the elements clip (MX FLOOR excepted: see the module docstring)."""


class QuantizationWarning(UserWarning):
    """A quantized tensor lost part of its range to its scales: floored scales or clipped elements."""


@dataclass(frozen=True)
class ScaleDiagnostics:
    """Counts from one quantization (see the module docstring for the definitions)."""

    blocks: int
    floored_blocks: int
    elements: int
    clipped_elements: int

    @property
    def floored_fraction(self) -> float:
        return self.floored_blocks / max(self.blocks, 1)

    @property
    def clipped_fraction(self) -> float:
        return self.clipped_elements / max(self.elements, 1)


@lru_cache(maxsize=32)
def _limits(fmt: ElementFormat, unit: float, symmetric_int: bool, bottom: float) -> tuple[float, float]:
    """(lower, upper) in code units: the outermost values widened by half their step to the next value in
    (symmetric integers: codes bottom .. symmetric_max, bottom being -symmetric_max or, for the full ranges,
    -2^(b-1))."""
    if symmetric_int:
        top = float(fmt.symmetric_max)  # type: ignore[union-attr]
        return bottom - 0.5, top + 0.5
    values = np.unique(Codec(fmt, unit).values().astype(np.float64))
    values = values[np.isfinite(values)]
    return (float(values[0] - (values[1] - values[0]) / 2), float(values[-1] + (values[-1] - values[-2]) / 2))


def clip_bounds(codec: Codec, divisor: np.ndarray, zero_point: np.ndarray | None,
                minimum: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per block, (lowest, highest) x that does not clip, in float64 (exact: few-bit limits times float32, plus
    a float32 min)."""
    d = np.asarray(divisor, dtype=np.float64)
    fmt = codec.fmt
    if minimum is not None:
        m = np.asarray(minimum, dtype=np.float64)
        return _ordered(m - 0.5 * d, m + (fmt.max_value + 0.5) * d)  # type: ignore[union-attr]
    if zero_point is not None:
        z = np.asarray(zero_point, dtype=np.float64)
        return _ordered((fmt.min_value - z - 0.5) * d, (fmt.max_value - z + 0.5) * d)  # type: ignore[union-attr]
    lower, upper = _limits(codec.fmt, codec.unit, codec.is_int, codec.symmetric_min)
    return _ordered(lower * d, upper * d)


def _ordered(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) ends: a negative scale (llama.cpp's Q4_0 / Q5_0 / Q6_K) swaps them."""
    return np.minimum(a, b), np.maximum(a, b)


def count_clipped(blocks: np.ndarray, lower: np.ndarray, upper: np.ndarray, first: np.ndarray, second: np.ndarray,
                  signed: bool, bad: np.ndarray | None) -> int:
    """Clipped elements of (row blocks, rows, column blocks, columns) `blocks`, with per-block bounds and
    statistics (amax for symmetric schemes, min and max for asymmetric ones): only the blocks whose
    statistics pass a bound are looked at element by element. Blocks holding NaN / inf (`bad`) are left out."""
    flagged = (first > upper) if signed else ((first < lower) | (second > upper))
    if bad is not None:
        flagged &= ~bad
    if not flagged.any():
        return 0
    rows, cols = np.nonzero(flagged)
    chosen = blocks[rows, :, cols, :]  # (k, block rows, block columns)
    hi, lo = upper[rows, cols], lower[rows, cols]
    if chosen.dtype == np.float32:  # for a float32 x: x > b exactly when x > b rounded down to float32
        hi = _to_float32(hi, toward=-np.inf)
        lo = _to_float32(lo, toward=np.inf)
    return int(np.count_nonzero((chosen > hi[:, None, None]) | (chosen < lo[:, None, None])))


def _to_float32(bound: np.ndarray, toward: float) -> np.ndarray:
    """float64 bounds as float32, rounded in the `toward` direction where they are not float32 values."""
    near = bound.astype(np.float32)
    off = near.astype(np.float64) != bound
    wrong_side = off & ((near > bound) if toward < 0 else (near < bound))
    return np.where(wrong_side, np.nextafter(near, np.float32(toward)), near)


def warning_messages(diagnostics: ScaleDiagnostics, scheme: Scheme) -> list[str]:
    """One line per threshold passed (see the module docstring)."""
    messages = []
    if diagnostics.floored_fraction > FLOORED_WARN_FRACTION:
        fix = "scale the tensor up" if scheme.preset else "use a wider scale format (e.g. scale=fp16) or scale the " \
            "tensor up"
        messages.append(
            f"{scheme}: {100 * diagnostics.floored_fraction:.3g}% of the scales ({diagnostics.floored_blocks} of "
            f"{diagnostics.blocks} blocks) are floored at the smallest {scheme.scale} scale, larger than those "
            f"blocks need, so their codes use only part of the range; {fix}")
    rule_clips = scheme.mx is MXRule.FLOOR
    if diagnostics.clipped_fraction > CLIPPED_WARN_FRACTION and not rule_clips:
        fix = ("add :scaleround=up so that no scale rounds below its block's need" if scheme.scale != "ue8m0"
               else "use :rceil")
        messages.append(
            f"{scheme}: {100 * diagnostics.clipped_fraction:.3g}% of the elements ({diagnostics.clipped_elements} of "
            f"{diagnostics.elements}) clip because their block's {scheme.scale} scale rounded below what the block "
            f"needs; {fix}")
    return messages


def warn(diagnostics: ScaleDiagnostics, scheme: Scheme, stacklevel: int) -> None:
    for message in warning_messages(diagnostics, scheme):
        warnings.warn(message, QuantizationWarning, stacklevel=stacklevel + 1)
