"""GEMM variants: a storage format × an accumulator × a scaling scheme × a promotion interval."""

from __future__ import annotations

from dataclasses import dataclass

from precisionlab.formats import FloatFormat, get_format

SCALINGS = ("none", "tensor", "block")
ACC_ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero")
BLOCK_K = 128
"""Block edge of the block-scaled fp8 recipe (DeepSeek-V3): A in 1×128 tiles, B in 128×128 blocks."""
A_BLOCK = (1, BLOCK_K)
B_BLOCK = (BLOCK_K, BLOCK_K)
PROMOTE_EVERY = 128
"""DeepSeek-V3's promotion interval: partial sums leave the tensor core every 128 of K."""
NARROW_ACC_BITS = 14
"""Significant bits Hopper's fp8 tensor core keeps while accumulating (DeepSeek-V3: about 14)."""


def narrow_accumulator(bits: int = NARROW_ACC_BITS) -> str:
    """Format name of an accumulator with `bits` significant bits and fp32's range: e8m<bits-1>."""
    if not 2 <= bits <= 24:
        raise ValueError(f"accumulator bits must lie in 2..24, got {bits}")
    return f"e8m{bits - 1}"


@dataclass(frozen=True)
class Variant:
    """One GEMM pipeline.

    storage: format A and B are rounded to; accumulator: format every addition is rounded to;
    scaling: 'none', 'tensor' (one fp32 scale per operand, applied to the output) or 'block'
    (A 1×128, B 128×128, applied when a block's partial sum is promoted);
    promote_every: partial sums kept in the accumulator are added into an fp32 sum every this
    many elements of K (None: one accumulator for all of K). Block scaling promotes per block.
    """

    name: str
    storage: str
    accumulator: str = "fp32"
    scaling: str = "none"
    promote_every: int | None = None
    acc_rounding: str = "nearest_even"
    expected_to_fail: bool = False
    label: str = ""

    def __post_init__(self) -> None:
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {self.scaling!r}")
        if self.acc_rounding not in ACC_ROUNDINGS:
            raise ValueError(f"acc_rounding must be one of {', '.join(ACC_ROUNDINGS)}, got {self.acc_rounding!r}")
        if self.promote_every is not None and self.promote_every <= 0:
            raise ValueError(f"promote_every must be positive, got {self.promote_every}")
        if self.scaling == "block" and self.promote_every not in (None, BLOCK_K):
            raise ValueError(f"block scaling promotes once per {BLOCK_K}-block of K")
        storage = get_format(self.storage)
        if not isinstance(storage, FloatFormat) or storage.man_bits > 25:
            raise ValueError(f"storage must be a float of at most 26 significant bits, got {self.storage}")

    @property
    def storage_format(self) -> FloatFormat:
        fmt = get_format(self.storage)
        assert isinstance(fmt, FloatFormat)
        return fmt

    @property
    def chunk(self) -> int | None:
        """K elements summed in the accumulator before each promotion into fp32 (None: never)."""
        return BLOCK_K if self.scaling == "block" else self.promote_every

    @property
    def storage_bytes(self) -> float:
        """Bytes per stored element (tf32 travels in a 32-bit container)."""
        fmt = self.storage_format
        return (fmt.stored_bits or fmt.bits) / 8

    def describe(self) -> str:
        if self.label:
            return self.label
        parts = [f"{self.storage} storage", f"{self.accumulator} acc"]
        if self.scaling != "none":
            parts.append(f"{self.scaling} scales")
        if self.chunk:
            parts.append(f"fp32 promotion every {self.chunk}")
        return ", ".join(parts)


NARROW_ACC_ROUNDING = "toward_zero"
"""How the narrow accumulator rounds each addition: modelled as truncation (bits shifted out are
dropped), the behaviour reported for Hopper's fp8 MMA; 'nearest_even' is the optimistic case."""


def standard_variants(acc_bits: int = NARROW_ACC_BITS, acc_rounding: str = NARROW_ACC_ROUNDING) -> list[Variant]:
    """The lab's rows: the four storage × accumulator rows (fp32, fp16, bf16, fp16 with an fp16
    accumulator), the fp8 storage rows and the fp8 accumulation rows."""
    narrow = narrow_accumulator(acc_bits)
    return [
        Variant("fp32", "fp32", label="fp32 storage, fp32 acc"),
        Variant("fp16", "fp16", label="fp16 storage, fp32 acc"),
        Variant("bf16", "bf16", label="bf16 storage, fp32 acc"),
        Variant("fp16_acc16", "fp16", accumulator="fp16", expected_to_fail=True, label="fp16 storage, fp16 acc"),
        Variant("e4m3_tensor", "e4m3", scaling="tensor", label="e4m3 (OCP) per-tensor scales, fp32 acc"),
        Variant("e4m3fnuz_tensor", "e4m3fnuz", scaling="tensor", label="e4m3 (FNUZ) per-tensor scales, fp32 acc"),
        Variant("e4m3_block", "e4m3", scaling="block", label="e4m3 1x128 / 128x128 block scales, fp32 acc"),
        Variant("e4m3_narrowacc", "e4m3", accumulator=narrow, scaling="tensor", acc_rounding=acc_rounding,
                label=f"e4m3 per-tensor, {acc_bits}-bit acc, no promotion"),
        Variant("e4m3_narrowacc_promoted", "e4m3", accumulator=narrow, scaling="tensor", promote_every=PROMOTE_EVERY,
                acc_rounding=acc_rounding,
                label=f"e4m3 per-tensor, {acc_bits}-bit acc, fp32 promotion every {PROMOTE_EVERY}"),
        Variant("e4m3_block_narrowacc", "e4m3", accumulator=narrow, scaling="block", acc_rounding=acc_rounding,
                label=f"e4m3 block scales, {acc_bits}-bit acc, promotion per block (DeepSeek-V3)"),
    ]


def bit_width_variants() -> list[Variant]:
    """Storage sweep at fp32 accumulation (fp8 formats with per-tensor scales)."""
    return [
        Variant("fp32", "fp32"),
        Variant("tf32", "tf32"),
        Variant("bf16", "bf16"),
        Variant("fp16", "fp16"),
        Variant("e4m3_tensor", "e4m3", scaling="tensor"),
        Variant("e5m2_tensor", "e5m2", scaling="tensor"),
    ]


GEMV_VARIANTS = ("fp32", "fp16", "bf16", "fp16_acc16", "e4m3_tensor", "e4m3_block")
