"""GGML block formats, dequantized with numpy (vectorised over blocks).

Layouts from ggml's ggml-common.h (the `block_*` structs) and the reference dequantizers in
ggml-quants.c (`dequantize_row_*`); all multi-byte fields little-endian, fp16 as IEEE half. The
arithmetic order below is that of gguf-py's gguf/quants.py (the `gguf` package's reference
dequantizer, which the tests use as the oracle), all in float32 without fused multiply-add:

    type   block  bytes  struct (in order)                         value of element i
    Q8_0    32     34    d fp16, qs[32] int8                        qs[i] * d
    Q4_0    32     18    d fp16, qs[16] nibbles                     d * (q[i] - 8)
    Q4_1    32     20    d fp16, m fp16, qs[16]                     d * q[i] + m
    Q5_0    32     22    d fp16, qh u32, qs[16]                     d * (q[i] - 16),  q = nibble | bit i of qh << 4
    Q5_1    32     24    d fp16, m fp16, qh u32, qs[16]             d * q[i] + m
    Q4_K   256    144    d, dmin fp16, scales[12], qs[128]          (d * sc[j]) * q[i] - (dmin * m[j]),  j = i / 32
    Q6_K   256    210    ql[128], qh[64], scales[16] int8, d fp16   (d * sc[j]) * (q[i] - 32),  j = i / 16

Nibbles: in the 32-element formats byte k holds element k (low nibble) and element k + 16 (high
nibble). Q4_K: four 32-byte chunks, chunk c holding sub-block 2c in its low nibbles and 2c + 1 in
its high nibbles; the 8 six-bit scales and mins are packed in 12 bytes (`get_scale_min_k4`):
for j < 4 sc = b[j] & 63, m = b[j+4] & 63; for j >= 4 sc = (b[j+4] & 15) | (b[j-4] >> 6) << 4,
m = (b[j+4] >> 4) | (b[j] >> 6) << 4. Q6_K: two halves of 128; in half h, for l < 32, ql byte l
(of the half's 64) gives elements l (low nibble) and l + 64 (high), ql byte l + 32 gives l + 32
and l + 96; qh byte l gives their top two bits at shifts 0, 2, 4, 6 (elements l, l+32, l+64, l+96).

These are two-level scales (like NVFP4's): Q4_K stores 6-bit sub-block scales and mins under an
fp16 super-block scale d and min scale dmin; Q6_K stores int8 sub-block scales under an fp16 d.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Decoder = Callable[[np.ndarray], np.ndarray]


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte `start` of each block, as float32 (n, 1)."""
    return np.ascontiguousarray(blocks[:, start : start + 2]).view(np.float16).astype(np.float32)


def _nibbles_32(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes -> (n, 32) uint8: low nibbles are elements 0..15, high nibbles 16..31."""
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)


def _high_bits_32(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes of a little-endian uint32 -> (n, 32) uint8: bit i of the word for element i."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")


def q8_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    x = blocks[:, 2:34].view(np.int8).astype(np.float32)
    return x * d


def q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    q = _nibbles_32(blocks[:, 2:18]).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def q4_1(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    m = _f16(blocks, 2)
    q = _nibbles_32(blocks[:, 4:20]).astype(np.float32)
    return d * q + m


def q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    q = _nibbles_32(blocks[:, 6:22]) | (_high_bits_32(blocks[:, 2:6]) << np.uint8(4))
    return d * (q.astype(np.int8) - np.int8(16)).astype(np.float32)


def q5_1(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    m = _f16(blocks, 2)
    q = _nibbles_32(blocks[:, 8:24]) | (_high_bits_32(blocks[:, 4:8]) << np.uint8(4))
    return d * q.astype(np.float32) + m


def k4_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: 12 bytes -> eight 6-bit sub-block scales and eight 6-bit mins, (n, 8) uint8 each."""
    b = packed
    low_sc, low_m, mixed = b[:, 0:4], b[:, 4:8], b[:, 8:12]
    sc = np.concatenate([low_sc & np.uint8(63), (mixed & np.uint8(15)) | ((low_sc >> np.uint8(6)) << np.uint8(4))],
                        axis=1)
    mins = np.concatenate([low_m & np.uint8(63), (mixed >> np.uint8(4)) | ((low_m >> np.uint8(6)) << np.uint8(4))],
                          axis=1)
    return sc, mins


def q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    dmin = _f16(blocks, 2)
    sc, mins = k4_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32)
    q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=2).reshape(n, 8, 32).astype(np.float32)
    scale = (d * sc.astype(np.float32))[:, :, None]
    offset = (dmin * mins.astype(np.float32))[:, :, None]
    return (scale * q - offset).reshape(n, 256)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(blocks, 208)
    low = np.concatenate([ql & np.uint8(0x0F), ql >> np.uint8(4)], axis=2).reshape(n, 2, 4, 32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh >> shifts) & np.uint8(3)
    q = (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)
    scale = (d * sc)[:, :, None]
    return (scale * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, 256)


@dataclass(frozen=True)
class BlockFormat:
    name: str
    block_size: int
    type_size: int
    decode: Decoder
    scheme: str | None
    """The precisionlab scheme string where the grammar says the layout, else None."""


def _size(*fields: int) -> int:
    return sum(fields)


FP16 = 2
BLOCK_FORMATS: dict[str, BlockFormat] = {
    "Q8_0": BlockFormat("Q8_0", 32, _size(FP16, 32), q8_0, "int8:g32"),
    "Q4_0": BlockFormat("Q4_0", 32, _size(FP16, 16), q4_0, "int4:g32:range=full_neg"),
    "Q4_1": BlockFormat("Q4_1", 32, _size(FP16, FP16, 16), q4_1, None),
    "Q5_0": BlockFormat("Q5_0", 32, _size(FP16, 4, 16), q5_0, None),
    "Q5_1": BlockFormat("Q5_1", 32, _size(FP16, FP16, 4, 16), q5_1, None),
    "Q4_K": BlockFormat("Q4_K", 256, _size(FP16, FP16, 12, 128), q4_k, None),
    "Q6_K": BlockFormat("Q6_K", 256, _size(128, 64, 16, FP16), q6_k, None),
}
"""The quantized GGML types this reader decodes. Q8_0 is int8:g32 exactly (codes ±127, fp16 scale);
Q4_0 stores codes -8..7 with d = (the element of largest magnitude) / -8, the full_neg int4
convention. Q4_1 / Q5_1 carry a float block minimum instead of an integer zero point, Q5_* are
5-bit, and the K-quants quantize their sub-block scales: the grammar has no words for those."""

CHUNK_BLOCKS = 1 << 15


def dequantize_blocks(raw: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """All blocks of a tensor's bytes (flat uint8) -> flat float32, a chunk of blocks at a time."""
    data = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if data.size % fmt.type_size:
        raise ValueError(f"{data.size} bytes is not a whole number of {fmt.name} blocks ({fmt.type_size} bytes)")
    blocks = data.reshape(-1, fmt.type_size)
    out = np.empty((blocks.shape[0], fmt.block_size), dtype=np.float32)
    for start in range(0, blocks.shape[0], CHUNK_BLOCKS):
        out[start : start + CHUNK_BLOCKS] = fmt.decode(np.ascontiguousarray(blocks[start : start + CHUNK_BLOCKS]))
    return out.reshape(-1)
