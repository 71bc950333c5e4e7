"""A test-only correction of Triton's CPU interpreter for bf16 (triton 3.9).

The interpreter keeps bf16 tensors as their uint16 bit patterns and gets two things wrong
(triton/runtime/interpreter.py):
- `create_dot` widens only 8-bit float operands before `np.matmul(a, b, dtype=float32)`,
  so a bf16 dot multiplies the bit patterns as integers;
- `cast_impl` narrows float32 to bf16 with no rounding mode, i.e. it truncates, where the
  GPU's `.to(tl.bfloat16)` (cvt.rn.bf16.f32) rounds to nearest even.
Loads, stores and bf16 → float32 widening are right.

`corrected_bf16()` patches those two builder calls: bf16 dot operands are first widened
exactly to float32 (bf16 is the high half of a float32: bits << 16), which is what a
tensor core does (bf16 products are exact in fp32 and accumulate in fp32), and float32 →
bf16 rounds to nearest even through ml_dtypes. The kernels themselves are untouched; only
the emulator is corrected. `interpreter_bf16_faults()` lists the faults still present, so
the patch is dropped once Triton fixes them (a test asserts they are there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import triton.language as tl
from triton.runtime import interpreter

BF16_TO_FP32_SHIFT = 16
"""bf16 keeps float32's sign, exponent and top 7 fraction bits: its 16 bits are float32's high half."""


def _widen(handle: Any) -> Any:
    if handle.dtype != tl.bfloat16:
        return handle
    bits = handle.data.astype(np.uint32) << BF16_TO_FP32_SHIFT
    return interpreter.TensorHandle(bits.view(np.float32), tl.float32)


@contextlib.contextmanager
def corrected_bf16() -> Iterator[None]:
    """While active, the interpreter's tl.dot widens bf16 operands exactly to float32 first, and
    its float32 → bf16 casts round to nearest even."""
    builder = interpreter.InterpreterBuilder
    original_dot, original_cast = builder.create_dot, builder.cast_impl

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        return original_dot(self, _widen(a), _widen(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = src.data.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
            return interpreter.TensorHandle(rounded, tl.bfloat16)
        return original_cast(self, src, dst_type)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builder, "create_dot", create_dot)
        patch.setattr(builder, "cast_impl", cast_impl)
        yield


BF16_ONE = 0x3F80
"""bf16 1.0: sign 0, exponent 127, fraction 0."""


def interpreter_bf16_faults() -> list[str]:
    """The bf16 faults the interpreter shows now: a dot of bf16 ones (2×2, K = 2) that is not 2,
    and 1 + 2^-8 + 2^-16 (just above a bf16 tie, so nearest is 1 + 2^-7) narrowed to 1.0."""
    builder = interpreter.interpreter_builder
    faults = []
    ones = interpreter.TensorHandle(np.full((2, 2), BF16_ONE, dtype=np.uint16), tl.bfloat16)
    acc = interpreter.TensorHandle(np.zeros((2, 2), dtype=np.float32), tl.float32)
    if not np.array_equal(builder.create_dot(ones, ones, acc, "ieee", None).data, np.full((2, 2), 2.0, np.float32)):
        faults.append("dot")
    above_tie = interpreter.TensorHandle(np.array([1 + 2.0**-8 + 2.0**-16], dtype=np.float32), tl.float32)
    narrowed = builder.cast_impl(above_tie, tl.bfloat16).data.view(ml_dtypes.bfloat16).astype(np.float64)
    if narrowed[0] != 1 + 2.0**-7:
        faults.append("fp32 to bf16 cast")
    return faults
