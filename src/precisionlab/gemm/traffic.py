"""Analytic global-memory traffic of a tiled GEMM, and its arithmetic intensity.

A kernel with T×T output tiles computes each tile from a T×K strip of A and a K×T strip
of B, so for C (M×N) = A (M×K)·B (K×N) with w-byte operands it reads

    tiles · (T_m·K + K·T_n) · w,   tiles = ceil(M/T_m)·ceil(N/T_n),  T_m = min(T, M), T_n = min(T, N)

and writes M·N fp32 outputs. For square sizes that is 2·M·N·K·w/T read for 2·M·N·K FLOPs:
intensity T/w, i.e. T/4 for fp32 and T/2 for 16-bit storage. A GEMV (M = 1) reads B once:
intensity about 2/w, far below any ridge point. Block scales add one fp32 scale per
128 elements of A's rows and per 128×128 block of B, read alongside the strips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from precisionlab.gemm.variants import BLOCK_K, Variant

OUTPUT_BYTES = 4
SCALE_BYTES = 4


@dataclass(frozen=True)
class Traffic:
    flops: float
    read_bytes: float
    write_bytes: float

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte of global traffic, reads and writes."""
        return self.flops / self.bytes

    @property
    def read_intensity(self) -> float:
        """FLOPs per byte read (T/w for square tiles)."""
        return self.flops / self.read_bytes


def check_sizes(m: int, n: int, k: int, tile: int) -> None:
    """Sizes must be positive; N and K must be multiples of the tile; so must M, unless M = 1 (GEMV)."""
    for label, value in (("M", m), ("N", n), ("K", k), ("tile", tile)):
        if value <= 0:
            raise ValueError(f"{label} must be a positive integer, got {value}")
    for label, value in (("M", m), ("N", n), ("K", k)):
        if (label != "M" or m != 1) and value % tile:
            raise ValueError(f"{label}={value} is not a multiple of the tile {tile}")


def tiled_traffic(m: int, n: int, k: int, storage_bytes: float, tile: int, scaling: str = "none") -> Traffic:
    """Global traffic of a T×T tiled GEMM (formula in the module docstring)."""
    tm, tn = min(tile, m), min(tile, n)
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    reads = tiles * (tm * k + k * tn) * storage_bytes
    k_blocks = math.ceil(k / BLOCK_K)
    if scaling == "block":
        reads += tiles * (tm * k_blocks + k_blocks * math.ceil(tn / BLOCK_K)) * SCALE_BYTES
    elif scaling == "tensor":
        reads += 2 * SCALE_BYTES
    return Traffic(2.0 * m * n * k, float(reads), float(m * n * OUTPUT_BYTES))


def variant_traffic(variant: Variant, m: int, n: int, k: int, tile: int) -> Traffic:
    return tiled_traffic(m, n, k, variant.storage_bytes, tile, variant.scaling)
