"""QuantizedTensor: packed codes, scales and everything else a reader needs, with honest bytes.

Byte accounting (`nbytes`) counts everything stored:

    payload      whole packing groups of the stored elements (packed; padding included):
                 ceil(n / per) * bytes per group, i.e. ceil(n * bits / 8) for 2/4/8 bits and
                 ceil(n / 4) * 3 for fp6 (four codes in three bytes; packing.packed_nbytes)
    scales       ceil(blocks * scale bits / 8)
                 two-level (K-quants): ceil(blocks * code bits / 8) + super-blocks * scale bits / 8
    zero points  ceil(blocks * element bits / 8)              (asym: at the element's width)
    mins         ceil(blocks * min bits / 8)                  (min=: the float offset at its format's width)
                 two-level: ceil(blocks * min-code bits / 8) + super-blocks * min bits / 8
    outliers     k rows * N * 2 (fp16) + k * 4 (int32 row indices)
    tensor scale 4 (NVFP4's fp32 second-level scale)

gguf_q4_1 on 32 elements: 16 + 2 + 2 = 20 bytes (GGUF's block_q4_1); gguf_q4_k on 256: 128 + (6 + 2) + (6 + 2)
= 144 (block_q4_K); gguf_q6_k on 256: 192 + (16 + 2) = 210 (block_q6_K).

`bits_per_element` = 8 * nbytes / (elements of the input): mxfp4 4.25, nvfp4 4.5 plus
32 / n for the tensor scale. `stored_bytes(scheme, shape)` and `bits_per_element(scheme, shape)` give
the same count for a shape without quantizing data (capacity's weight and KV bytes use them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.formats import FloatFormat, get_format
from precisionlab.quant.blocks import Layout, canonical_view, layout
from precisionlab.quant.dequant import dequantize
from precisionlab.quant.diagnostics import ScaleDiagnostics
from precisionlab.quant.elements import codec, make_codec
from precisionlab.quant.packing import packed_nbytes, unpack
from precisionlab.quant.scheme import Scheme, parse_scheme
from precisionlab.rounding import encode

OUTLIER_INDEX_BYTES = 4
TENSOR_SCALE_BYTES = 4


@dataclass
class TwoLevelScales:
    """The stored parts of a two-level (K-quant) scale, per block j of super-block b:

        s_j = fp32(super_scales[b] * scale_codes[j])        m_j = -fp32(super_mins[b] * min_codes[j])

    (Q4_K subtracts its minimum: x_hat = s_j * q - dmin * mc_j = s_j * q + m_j). Shapes: super_* (B, M, N / S),
    *_codes (B, M, N / G), float32 arrays holding the fp16 scales and the integer codes."""

    super_scales: np.ndarray
    scale_codes: np.ndarray
    super_mins: np.ndarray | None = None
    min_codes: np.ndarray | None = None

    def block_scales(self, per: int) -> np.ndarray:
        """s_j (float32, exact: an fp16 times a code of at most 8 bits), `per` blocks to a super-block."""
        return (np.repeat(self.super_scales, per, axis=-1) * self.scale_codes).astype(np.float32)

    def block_mins(self, per: int) -> np.ndarray | None:
        """m_j = -fp32(dmin * mc_j), or None without mins."""
        if self.super_mins is None or self.min_codes is None:
            return None
        return -(np.repeat(self.super_mins, per, axis=-1) * self.min_codes).astype(np.float32)


def stored_bytes(scheme: str | Scheme, shape: tuple[int, ...]) -> dict[str, int]:
    """Bytes of each stored part of a tensor of `shape` under `scheme` (see the module docstring), without
    quantizing anything: the byte model every count in precisionlab uses (QuantizedTensor.nbytes, capacity)."""
    s = parse_scheme(scheme)
    _, _, view = canonical_view(tuple(shape), s)
    k = s.outliers
    if k >= view[1]:
        raise ValueError(f"outliers={k} would keep every one of the {view[1]} rows in fp16")
    check_whole_blocks(s, view[2])
    lay = layout((view[0], view[1] - k, view[2]), s)
    bits = codec(s.element).bits
    scale_bits = get_format(s.scale).bits
    min_bits = get_format(s.min_format).bits if s.min_format is not None else 0
    scales = -(-lay.n_blocks * scale_bits // 8)
    mins = -(-lay.n_blocks * min_bits // 8)
    if s.is_two_level:
        supers = lay.n_stored // s.super_block
        scales = -(-lay.n_blocks * _code_bits(s.sub_scale) // 8) + supers * scale_bits // 8
        mins = -(-lay.n_blocks * _code_bits(s.sub_min) // 8) + supers * min_bits // 8 if s.sub_min else 0
    return {
        "payload": packed_nbytes(lay.n_stored, bits) if bits in (2, 4, 5, 6, 8) else -(-lay.n_stored * bits // 8),
        "scales": scales,
        "zero_points": -(-lay.n_blocks * bits // 8) if s.has_zero_point else 0,
        "mins": mins,
        "outliers": k * view[2] * 2 + k * OUTLIER_INDEX_BYTES,
        "tensor_scale": TENSOR_SCALE_BYTES if s.tensor_scale else 0,
    }


def _code_bits(fmt: str | None) -> int:
    return 0 if fmt is None else get_format(fmt).bits


def check_whole_blocks(s: Scheme, length: int) -> None:
    """ValueError when a gguf_* preset meets a row that is not whole blocks (GGUF stores no partial block)."""
    block = s.super_block or s.group
    if s.ggml is not None and length % block:
        raise ValueError(f"{s}: llama.cpp's {s.ggml} stores whole blocks of {block} along the quantized axis; a row "
                         f"of {length} is not (use a plain scheme, e.g. {_plain_spelling(s)}, which pads)")


def _plain_spelling(s: Scheme) -> str:
    text = f"{s.element}:g{s.group}"
    if s.min_format:
        text += f":min={s.min_format}"
    if s.int_range != "narrow":
        text += f":range={s.int_range}"
    return text


def bits_per_element(scheme: str | Scheme, shape: tuple[int, ...]) -> float:
    """8 * (bytes stored) / (elements) of a tensor of `shape` under `scheme`: e.g. int4:g128:asym on (8, 128)
    is (512 + 16 + 4) * 8 / 1024 = 4.15625 (4-bit codes, an fp16 scale and a 4-bit zero point per 128)."""
    count = math.prod(int(d) for d in shape) or 1
    return 8.0 * sum(stored_bytes(scheme, shape).values()) / count


@dataclass
class QuantizedTensor:
    """A tensor quantized under one scheme. Build with `precisionlab.quant.quantize`.

    codes and scales are given in the canonical layout (`quant.blocks`): the scheme's axis
    moved last, the tensor seen as (B, M, N) with B dropped when it is 1, padded to whole
    blocks. With outliers=k the k kept rows are not in the payload: M counts the others.
    """

    scheme: Scheme
    shape: tuple[int, ...]
    dtype: str
    """The source dtype name (float16, bfloat16, float32, float64; fp8 when read from a file)."""
    packed: np.ndarray
    """uint8 packed element codes (see `quant.packing`)."""
    scale_values: np.ndarray
    """Stored scales as float32 values, shape (B, Mp/br, Np/bc)."""
    zero_points: np.ndarray | None = None
    """Integer zero points (asym), float32 holding integers, shape of the scales."""
    tensor_scale: float | None = None
    outlier_rows: np.ndarray | None = None
    """float16 (k, N): the rows kept out of the payload."""
    outlier_index: np.ndarray | None = None
    """int32 (k,): their row numbers in the (M, N) view, ascending."""
    diagnostics: ScaleDiagnostics | None = None
    """Floored scales and clipped elements of this quantization (`quant.diagnostics`); None when read from a file."""
    min_values: np.ndarray | None = None
    """Float block offsets m (min=), float32, shape of the scales: x_hat = q * s + m."""
    two_level: TwoLevelScales | None = None
    """K-quants: the stored super-block scales and integer block codes behind `scale_values` / `min_values`."""

    # ----------------------------------------------------------------- layout
    @property
    def axis(self) -> int:
        return canonical_view(self.shape, self.scheme)[0]

    @property
    def layout(self) -> Layout:
        """Layout of the payload (outlier rows removed)."""
        _, _, view = canonical_view(self.shape, self.scheme)
        k = self.n_outliers
        return layout((view[0], view[1] - k, view[2]), self.scheme)

    @property
    def n_outliers(self) -> int:
        return 0 if self.outlier_index is None else int(self.outlier_index.size)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def element_bits(self) -> int:
        return make_codec(self.scheme).bits

    def divisors(self) -> np.ndarray:
        """Per-block multiplier of the code values (float32, the shape of the scales): s; s·unit (MXINT8);
        fp32(s_b·g) with NVFP4's tensor scale g."""
        scale = self.scale_values
        if self.tensor_scale is not None:
            return (scale * np.float32(self.tensor_scale)).astype(np.float32)
        unit = make_codec(self.scheme).unit
        if unit != 1.0:
            return (scale * np.float32(unit)).astype(np.float32)
        return scale

    def _squeeze(self, arr: np.ndarray) -> np.ndarray:
        return arr[0] if arr.shape[0] == 1 else arr

    @property
    def codes(self) -> np.ndarray:
        """Unpacked element codes (uint8), shape (Mp, Np) or (B, Mp, Np)."""
        lay = self.layout
        return self._squeeze(unpack(self.packed, self.element_bits, lay.n_stored).reshape(lay.padded))

    @property
    def scales(self) -> np.ndarray:
        """Stored scale values (float32): one per block, shape (Mp/br, Np/bc) or (B, ...)."""
        return self._squeeze(self.scale_values)

    @property
    def mins(self) -> np.ndarray | None:
        """Stored float block offsets (min=), float32, one per block; None for other schemes."""
        return None if self.min_values is None else self._squeeze(self.min_values)

    @property
    def scale_codes(self) -> np.ndarray:
        """The scales' bit patterns in the scale format (ue8m0: biased exponent, 0xFF = NaN); two-level schemes:
        the integer block-scale codes."""
        if self.two_level is not None:
            return self._squeeze(self.two_level.scale_codes)
        fmt = get_format(self.scheme.scale)
        assert isinstance(fmt, FloatFormat)
        return self._squeeze(np.asarray(encode(self.scale_values, fmt, overflow="saturate")))

    # ----------------------------------------------------------------- bytes
    def byte_breakdown(self) -> dict[str, int]:
        """Bytes of each stored part (see the module docstring): `stored_bytes` of the scheme and shape."""
        return stored_bytes(self.scheme, self.shape)

    @property
    def nbytes(self) -> int:
        return sum(self.byte_breakdown().values())

    @property
    def bits_per_element(self) -> float:
        return 8.0 * self.nbytes / self.size

    @property
    def padded_elements(self) -> int:
        """Zero elements added to fill the last group / block (stored and counted)."""
        lay = self.layout
        return lay.n_stored - math.prod(lay.view)

    def dequantize(self, dtype: Any = np.float32) -> np.ndarray:
        """x_hat = code value * stored scale (asym: (q - z) * s; min=: q * s + m), in the input's shape
        (`quant.dequant.dequantize`)."""
        return dequantize(self, dtype)

    def __repr__(self) -> str:
        return (f"QuantizedTensor(scheme={str(self.scheme)!r}, shape={self.shape}, nbytes={self.nbytes}, "
                f"bits_per_element={self.bits_per_element:.4g})")
