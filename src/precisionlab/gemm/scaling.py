"""Scaled storage for narrow formats: per-tensor and block scales, as fp8 GEMMs use them.

Dequantization rule: x ≈ q·s, with q a value of the storage format and s an fp32 scale.
The scale of a group of elements is s = fl32(amax / max_finite) (amax of the group's |x|;
s = 1 for an all-zero group), so the group's largest element lands on the format's top
value; q = round(x / s) to the format, saturating (what a cast with .satfinite does).

Block shapes follow DeepSeek-V3's recipe: 1×128 tiles for activations (A, one scale per
row per 128 elements of K) and 128×128 blocks for weights (B). A block shape (bm, bk)
means bm rows by bk columns; the last block of a ragged edge is simply smaller.
(A small local helper: the quant library's schemes are independent of this module.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from precisionlab.formats import FloatFormat, get_format
from precisionlab.rounding import round_to


@dataclass(frozen=True)
class Scaled:
    """Stored values q (float64 holding values of `fmt`) and the scale of each block.

    scales has shape (ceil(rows / block[0]), ceil(cols / block[1])); a per-tensor scale is
    the block (rows, cols), one scale.
    """

    q: np.ndarray
    scales: np.ndarray
    block: tuple[int, int]
    fmt: FloatFormat

    def expanded_scales(self) -> np.ndarray:
        """The scale of every element, shape of q."""
        rows, cols = self.q.shape
        grown = np.repeat(np.repeat(self.scales, self.block[0], axis=0), self.block[1], axis=1)
        return grown[:rows, :cols]

    def dequantize(self) -> np.ndarray:
        """q·s per element, in float64 (exact: a narrow value times an fp32 scale)."""
        return self.q * self.expanded_scales()


def block_amax(x: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """max |x| over each (bm, bk) block of a 2-D array; ragged edge blocks are smaller."""
    rows, cols = x.shape
    bm, bk = block
    if bm <= 0 or bk <= 0:
        raise ValueError(f"block sizes must be positive, got {block}")
    pad_r, pad_c = (-rows) % bm, (-cols) % bk
    padded = np.pad(np.abs(x), ((0, pad_r), (0, pad_c)))
    shaped = padded.reshape((rows + pad_r) // bm, bm, (cols + pad_c) // bk, bk)
    return np.asarray(shaped.max(axis=(1, 3)), dtype=np.float64)


def scale_and_round(x: np.ndarray, fmt: str | FloatFormat, block: tuple[int, int] | None = None) -> Scaled:
    """Quantize a 2-D array to fmt with one fp32 scale per block (None: one per tensor)."""
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"scaled storage needs a float format, got {target.name}")
    values = np.asarray(x, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"scaled storage takes a 2-D array, got shape {values.shape}")
    shape = block if block is not None else values.shape
    amax = block_amax(values, shape)
    scales = np.where(amax > 0, amax / target.max_finite, 1.0).astype(np.float32).astype(np.float64)
    scaled = Scaled(np.zeros_like(values), scales, shape, target)
    q = np.asarray(round_to(values / scaled.expanded_scales(), target, overflow="saturate"), dtype=np.float64)
    return Scaled(q, scales, shape, target)
