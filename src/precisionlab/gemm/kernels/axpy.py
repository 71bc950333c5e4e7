"""Triton axpy: y = a·x + y in place, fp32 math, storage in y's dtype (3 elements moved per element)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, (alpha * x + y).to(y_ptr.dtype.element_ty), mask=mask)


def axpy(alpha: float, x: torch.Tensor, y: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """y ← alpha·x + y (rounded once from fp32 to y's dtype); returns y."""
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError("x and y must share shape, dtype and device")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("axpy needs contiguous x and y")
    n = x.numel()
    _axpy_kernel[(triton.cdiv(n, block),)](x, y, n, float(alpha), BLOCK=block)
    return y
