"""Bit packing of element codes, little-endian within each byte group.

    8 bits   one code per byte
    4 bits   two per byte: element 2i in the low nibble, 2i+1 in the high nibble (torchao's fp4
             order; bitsandbytes packs NF4 / FP4 the other way, element 2i in the high nibble)
    2 bits   four per byte: element 4i + k in bits 2k..2k+1
    6 bits   four per three bytes: the 24-bit word c0 | c1 << 6 | c2 << 12 | c3 << 18,
             stored as its three bytes, low byte first
    5 bits   eight per five bytes: the 40-bit word c0 | c1 << 5 | ... | c7 << 35, low byte first

Codes are packed in the row-major order of the padded (B, M, N) layout; a tail that
does not fill the last byte group is padded with zero bits (counted in the bytes).
"""

from __future__ import annotations

import numpy as np

PACKABLE_BITS = (2, 4, 5, 6, 8)


def group_size(bits: int) -> tuple[int, int]:
    """(codes, bytes) in one packing group: 8 bits (1, 1), 4 (2, 1), 2 (4, 1), 6 (4, 3), 5 (8, 5)."""
    if bits not in PACKABLE_BITS:
        raise ValueError(f"cannot pack {bits}-bit codes; supported widths: {PACKABLE_BITS}")
    return {8: (1, 1), 4: (2, 1), 2: (4, 1), 6: (4, 3), 5: (8, 5)}[bits]


def packed_nbytes(count: int, bits: int) -> int:
    """Bytes holding `count` codes of `bits` bits (the tail group padded)."""
    codes, nbytes = group_size(bits)
    return -(-count // codes) * nbytes


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 codes (each < 2^bits) into bytes."""
    flat = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    per, _ = group_size(bits)
    if per == 1:
        return flat.copy()
    tail = (-flat.size) % per
    if tail:
        flat = np.concatenate([flat, np.zeros(tail, dtype=np.uint8)])
    groups = flat.reshape(-1, per)
    if bits == 4:
        out = groups[:, 1] << np.uint8(4)
        out |= groups[:, 0]
        return out
    if bits == 2:
        out = groups[:, 0].copy()
        for k in range(1, 4):
            out |= groups[:, k] << np.uint8(2 * k)
        return out
    width, nbytes = (6, 3) if bits == 6 else (5, 5)
    word = groups[:, 0].astype(np.uint64)
    for k in range(1, per):
        word |= groups[:, k].astype(np.uint64) << np.uint64(width * k)
    return word.view(np.uint8).reshape(-1, 8)[:, :nbytes].reshape(-1).copy()


def unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` codes held in `packed` (uint8)."""
    per, _ = group_size(bits)
    data = np.asarray(packed, dtype=np.uint8).reshape(-1)
    need = packed_nbytes(count, bits)
    if data.size < need:
        raise ValueError(f"{count} codes of {bits} bits need {need} bytes, got {data.size}")
    data = data[:need]
    if per == 1:
        return data.copy()
    if bits == 4:
        out = np.empty((need, 2), dtype=np.uint8)
        np.bitwise_and(data, np.uint8(0xF), out=out[:, 0])
        np.right_shift(data, np.uint8(4), out=out[:, 1])
    elif bits == 2:
        out = np.empty((need, 4), dtype=np.uint8)
        for k in range(4):
            out[:, k] = (data >> np.uint8(2 * k)) & np.uint8(3)
    else:
        width, nbytes = (6, 3) if bits == 6 else (5, 5)
        groups = data.reshape(-1, nbytes).astype(np.uint64)
        word = groups[:, 0].copy()
        for k in range(1, nbytes):
            word |= groups[:, k] << np.uint64(8 * k)
        out = np.empty((word.size, per), dtype=np.uint8)
        for k in range(per):
            out[:, k] = (word >> np.uint64(width * k)) & np.uint64((1 << width) - 1)
    return out.reshape(-1)[:count]
