"""Mixed-precision GEMM: exact CPU emulation of storage × accumulator variants, traffic and rooflines.

    from precisionlab.gemm import emulated_matmul, random_inputs, standard_variants
    a, b = random_inputs(256, 256, 256)
    c = emulated_matmul(a, b, standard_variants()[3])    # fp16 storage, fp16 accumulator

GPU kernels (Triton) live in `precisionlab.gemm.kernels` and import torch/triton lazily.
"""

from precisionlab.gemm.emulate import (
    Operands,
    accumulate,
    emulated_matmul,
    random_inputs,
    reference,
    relative_errors,
    store,
    tolerance,
)
from precisionlab.gemm.rounded_sum import add_rounded
from precisionlab.gemm.scaling import Scaled, scale_and_round
from precisionlab.gemm.variants import (
    BLOCK_K,
    NARROW_ACC_BITS,
    PROMOTE_EVERY,
    Variant,
    bit_width_variants,
    narrow_accumulator,
    standard_variants,
)
from precisionlab.rounding.exact_sum import accumulator_format

__all__ = [
    "BLOCK_K",
    "NARROW_ACC_BITS",
    "PROMOTE_EVERY",
    "Operands",
    "Scaled",
    "Variant",
    "accumulate",
    "accumulator_format",
    "add_rounded",
    "bit_width_variants",
    "emulated_matmul",
    "narrow_accumulator",
    "random_inputs",
    "reference",
    "relative_errors",
    "scale_and_round",
    "standard_variants",
    "store",
    "tolerance",
]
