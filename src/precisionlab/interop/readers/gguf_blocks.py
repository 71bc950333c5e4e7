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

Each type is a precisionlab preset (`quant.scheme.GGUF_PRESETS`: gguf_q8_0 ... gguf_q6_k): `fields` reads a
tensor's blocks into that preset's stored parts (code values, scales, mins; `quant.ggml.Blocks`) and
`block_bytes` writes them back, byte for byte, so a `QuantizedTensor` under a gguf_* preset and a GGUF
tensor convert both ways (`quantized_tensor`, `tensor_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from precisionlab.quant.ggml import Blocks, from_tensor, to_tensor
from precisionlab.quant.scheme import PRESETS
from precisionlab.quant.tensor import QuantizedTensor

Decoder = Callable[[np.ndarray], np.ndarray]


def _f16(blocks: np.ndarray, start: int, count: int = 1) -> np.ndarray:
    """The `count` little-endian fp16 fields from byte `start` of each block, as float32 (n, count)."""
    return np.ascontiguousarray(blocks[:, start : start + 2 * count]).view("<f2").astype(np.float32)


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
    """(d * sc[j]) * q[i] - (dmin * m[j]), from the stored fields (`_fields_q4_k` keeps -(dmin * m[j]))."""
    n = blocks.shape[0]
    b = _fields_q4_k(blocks)
    assert b.mins is not None
    q = b.values.reshape(n, 8, 32).astype(np.float32)
    return (b.scales[:, :, None] * q + b.mins[:, :, None]).reshape(n, 256)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    """(d * sc[j]) * (q[i] - 32), from the stored fields (`_fields_q6_k`)."""
    n = blocks.shape[0]
    b = _fields_q6_k(blocks)
    return (b.scales[:, :, None] * b.values.reshape(n, 16, 16).astype(np.float32)).reshape(n, 256)


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
    "Q8_0": BlockFormat("Q8_0", 32, _size(FP16, 32), q8_0, "gguf_q8_0"),
    "Q4_0": BlockFormat("Q4_0", 32, _size(FP16, 16), q4_0, "gguf_q4_0"),
    "Q4_1": BlockFormat("Q4_1", 32, _size(FP16, FP16, 16), q4_1, "gguf_q4_1"),
    "Q5_0": BlockFormat("Q5_0", 32, _size(FP16, 4, 16), q5_0, "gguf_q5_0"),
    "Q5_1": BlockFormat("Q5_1", 32, _size(FP16, FP16, 4, 16), q5_1, "gguf_q5_1"),
    "Q4_K": BlockFormat("Q4_K", 256, _size(FP16, FP16, 12, 128), q4_k, "gguf_q4_k"),
    "Q6_K": BlockFormat("Q6_K", 256, _size(128, 64, 16, FP16), q6_k, "gguf_q6_k"),
}
"""The quantized GGML types this reader decodes, each with its precisionlab preset (the grammar's one-level
spellings: Q8_0 int8:g32, Q4_0 int4:g32:range=full_neg, Q4_1 uint4:g32:min=fp16, Q5_0 int5:g32:range=full_neg,
Q5_1 uint5:g32:min=fp16; the K-quants' two-level scales are presets only)."""

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


# --------------------------------------------------------------------------- blocks <-> a preset's parts
def _f16_bytes(values: np.ndarray) -> np.ndarray:
    """float32 values of fp16 numbers (n, k) -> their little-endian bytes (n, 2k), exactly."""
    return np.ascontiguousarray(np.asarray(values, dtype=np.float32).astype(np.float16)).view(np.uint8)


def _pack_nibbles_32(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: element k low, element k + 16 high."""
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def _fields_32(blocks: np.ndarray, type_name: str) -> Blocks:
    with_min = type_name in ("Q4_1", "Q5_1")
    d = _f16(blocks, 0)
    m = _f16(blocks, 2) if with_min else None
    start = 4 if with_min else 2
    if type_name == "Q8_0":
        return Blocks(blocks[:, 2:34].view(np.int8).astype(np.int16), d)
    if type_name in ("Q5_0", "Q5_1"):
        q = _nibbles_32(blocks[:, start + 4 : start + 20]) | (_high_bits_32(blocks[:, start : start + 4]) << 4)
    else:
        q = _nibbles_32(blocks[:, start : start + 16])
    values = q.astype(np.int16) - {"Q4_0": 8, "Q5_0": 16}.get(type_name, 0)
    return Blocks(values, d, m)


def _bytes_32(b: Blocks, type_name: str) -> np.ndarray:
    q = b.values.astype(np.int16) + {"Q4_0": 8, "Q5_0": 16}.get(type_name, 0)
    parts = [_f16_bytes(b.scales)]
    if b.mins is not None:
        parts.append(_f16_bytes(b.mins))
    if type_name == "Q8_0":
        parts.append(q.astype(np.int8).view(np.uint8))
    elif type_name in ("Q5_0", "Q5_1"):
        parts.append(np.packbits((q >> 4).astype(np.uint8) & 1, axis=1, bitorder="little"))
        parts.append(_pack_nibbles_32(q & 15))
    else:
        parts.append(_pack_nibbles_32(q))
    return np.concatenate(parts, axis=1)


def _fields_q4_k(blocks: np.ndarray) -> Blocks:
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, mc = (a.astype(np.float32) for a in k4_scales_mins(blocks[:, 4:16]))
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32)
    q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=2).reshape(n, 256).astype(np.int16)
    return Blocks(q, d * sc, -(dmin * mc), d, sc, dmin, mc)


def _bytes_q4_k(b: Blocks) -> np.ndarray:
    assert b.scale_codes is not None and b.min_codes is not None and b.super_scales is not None
    assert b.super_mins is not None
    n = b.values.shape[0]
    sc, mc = b.scale_codes.astype(np.uint8), b.min_codes.astype(np.uint8)
    packed = np.empty((n, 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mc[:, :4] | ((mc[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 15) | ((mc[:, 4:] & 15) << 4)
    q = b.values.astype(np.uint8).reshape(n, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(n, 128)
    return np.concatenate([_f16_bytes(b.super_scales), _f16_bytes(b.super_mins), packed, qs], axis=1)


def _fields_q6_k(blocks: np.ndarray) -> Blocks:
    n = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(blocks, 208)
    low = np.concatenate([ql & np.uint8(0x0F), ql >> np.uint8(4)], axis=2).reshape(n, 2, 4, 32)
    high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & np.uint8(3)
    q = (low | (high << np.uint8(4))).astype(np.int16).reshape(n, 256) - 32
    return Blocks(q, d * sc, None, d, sc)


def _bytes_q6_k(b: Blocks) -> np.ndarray:
    assert b.scale_codes is not None and b.super_scales is not None
    n = b.values.shape[0]
    q = (b.values.astype(np.int16) + 32).astype(np.uint8).reshape(n, 2, 4, 32)  # half, quarter, lane
    low, high = q & 15, q >> 4
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    sc = b.scale_codes.astype(np.int8).view(np.uint8)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc, _f16_bytes(b.super_scales)], axis=1)


def fields(raw: np.ndarray, fmt: BlockFormat) -> Blocks:
    """A tensor's blocks (flat uint8) as its preset's stored parts: code values, scales, mins, two-level codes."""
    data = np.asarray(raw, dtype=np.uint8).reshape(-1, fmt.type_size)
    if fmt.name == "Q4_K":
        return _fields_q4_k(data)
    if fmt.name == "Q6_K":
        return _fields_q6_k(data)
    return _fields_32(data, fmt.name)


def block_bytes(blocks: Blocks, fmt: BlockFormat) -> np.ndarray:
    """The inverse of `fields`: GGML's block bytes, flat uint8 (what llama.cpp writes for these parts)."""
    if fmt.name == "Q4_K":
        out = _bytes_q4_k(blocks)
    elif fmt.name == "Q6_K":
        out = _bytes_q6_k(blocks)
    else:
        out = _bytes_32(blocks, fmt.name)
    assert out.shape[1] == fmt.type_size
    return np.ascontiguousarray(out).reshape(-1)


def quantized_tensor(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> QuantizedTensor:
    """A GGUF tensor's blocks (numpy `shape`, blocks along its last axis) as a QuantizedTensor under its preset."""
    fmt = BLOCK_FORMATS[type_name]
    assert fmt.scheme is not None
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    return to_tensor(fields(raw, fmt), PRESETS[fmt.scheme], (rows, cols), tuple(shape), "float32")


def tensor_bytes(q: QuantizedTensor) -> np.ndarray:
    """A QuantizedTensor under a gguf_* preset as GGUF block bytes (flat uint8), in its canonical view's order."""
    if q.scheme.ggml is None:
        raise ValueError(f"{q.scheme} is not a gguf_* preset; GGUF blocks hold llama.cpp's layouts only")
    return block_bytes(from_tensor(q), BLOCK_FORMATS[q.scheme.ggml])
