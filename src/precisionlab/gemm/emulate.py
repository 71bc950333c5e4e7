"""Emulated GEMM C = A·B for one Variant: storage rounding, scaled fp8, per-step accumulation.

Pipeline (every rounding explicit):
1. storage: A and B rounded once to the storage format (fp8: after dividing by their scales);
2. products of stored values, exact in float64;
3. accumulation: acc_k = fl_acc(acc_{k-1} + a_k·b_k) over each chunk of K (accumulate.py);
4. promotion (when the variant has a chunk): main = fl32(main + fl32(partial · s_a·s_b))
   after every chunk (block scales) or main = fl32(main + partial) (no block scales);
5. output in fp32; per-tensor scales applied last: C = fl32(C_acc · fl32(s_a·s_b)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from precisionlab.formats import get_format
from precisionlab.gemm.rounded_sum import add_rounded
from precisionlab.gemm.scaling import scale_and_round
from precisionlab.gemm.variants import A_BLOCK, B_BLOCK, BLOCK_K, Variant
from precisionlab.rounding import round_to
from precisionlab.rounding.exact_sum import accumulator_format

_FP32 = accumulator_format("fp32")
Progress = Callable[[int], None]
"""Called with the number of K steps just completed."""


def _fp32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64)


@dataclass(frozen=True)
class Operands:
    """Stored A (M×K) and B (K×N) as float64 values of the storage format, with their scales.

    a_scale: (M, K-blocks) for block scaling, 1×1 per tensor, None without scales;
    b_scale: (K-blocks, N) (each block's scale repeated over its 128 columns), likewise.
    """

    a: np.ndarray
    b: np.ndarray
    a_scale: np.ndarray | None
    b_scale: np.ndarray | None

    def dequantized(self) -> tuple[np.ndarray, np.ndarray]:
        """(A, B) as the values the pipeline multiplies: q·s per element, exact in float64."""
        if self.a_scale is None or self.b_scale is None:
            return self.a, self.b
        if self.a_scale.size == 1:
            return self.a * self.a_scale.reshape(()), self.b * self.b_scale.reshape(())
        depth = self.a.shape[1]
        a_scale = np.repeat(self.a_scale, BLOCK_K, axis=1)[:, :depth]
        b_scale = np.repeat(self.b_scale, BLOCK_K, axis=0)[:depth, :]
        return self.a * a_scale, self.b * b_scale


def store(a: np.ndarray, b: np.ndarray, variant: Variant) -> Operands:
    """Round A and B to the variant's storage, with the variant's scaling."""
    fmt = variant.storage_format
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if variant.scaling == "none":
        return Operands(np.asarray(round_to(a64, fmt), dtype=np.float64),
                        np.asarray(round_to(b64, fmt), dtype=np.float64), None, None)
    if variant.scaling == "tensor":
        sa, sb = scale_and_round(a64, fmt), scale_and_round(b64, fmt)
        return Operands(sa.q, sb.q, sa.scales, sb.scales)
    sa, sb = scale_and_round(a64, fmt, A_BLOCK), scale_and_round(b64, fmt, B_BLOCK)
    n = b64.shape[1]
    b_cols = np.repeat(sb.scales, B_BLOCK[1], axis=1)[:, :n]
    return Operands(sa.q, sb.q, sa.scales, b_cols)


def accumulate(ops: Operands, variant: Variant, checkpoints: Iterable[int] | None = None,
               progress: Progress | None = None) -> dict[int, np.ndarray]:
    """C after the first k elements of K, for each k in checkpoints (default: all of K), in fp32 values."""
    m, depth = ops.a.shape
    n = ops.b.shape[1]
    marks = sorted(set(checkpoints)) if checkpoints is not None else [depth]
    if not marks or marks[0] < 1 or marks[-1] > depth:
        raise ValueError(f"checkpoints must lie in 1..{depth}, got {marks}")
    acc_fmt = accumulator_format(variant.accumulator)
    chunk = variant.chunk
    main = np.zeros((m, n))
    partial = np.zeros((m, n))
    results: dict[int, np.ndarray] = {}
    for k in range(marks[-1]):
        partial = add_rounded(partial, np.outer(ops.a[:, k], ops.b[k, :]), acc_fmt, variant.acc_rounding)
        done = k + 1
        if chunk is not None and done % chunk == 0:
            main = add_rounded(main, _promoted(partial, ops, variant, (done - 1) // BLOCK_K), _FP32)
            partial = np.zeros((m, n))
        if done in marks:
            results[done] = _output(main, partial, ops, variant, done)
        if progress is not None:
            progress(1)
    return results


def _promoted(partial: np.ndarray, ops: Operands, variant: Variant, block: int) -> np.ndarray:
    """A chunk's partial sum as it enters the fp32 sum: times its block scales for block scaling."""
    if variant.scaling != "block":
        return _fp32(partial)
    assert ops.a_scale is not None and ops.b_scale is not None
    scale = _fp32(ops.a_scale[:, block, None] * ops.b_scale[None, block, :])
    return _fp32(partial * scale)


def _output(main: np.ndarray, partial: np.ndarray, ops: Operands, variant: Variant, done: int) -> np.ndarray:
    """fp32 result after `done` steps: flush a pending chunk, then apply per-tensor scales."""
    if variant.chunk is None:
        out = _fp32(partial)
    elif done % variant.chunk == 0:
        out = main
    else:
        out = add_rounded(main, _promoted(partial, ops, variant, (done - 1) // BLOCK_K), _FP32)
    if variant.scaling == "tensor":
        assert ops.a_scale is not None and ops.b_scale is not None
        out = _fp32(out * _fp32(ops.a_scale.reshape(()) * ops.b_scale.reshape(())))
    return out


def emulated_matmul(a: np.ndarray, b: np.ndarray, variant: Variant, progress: Progress | None = None) -> np.ndarray:
    """C = A·B through the variant's exact pipeline; fp32 values in a float64 array."""
    check_operands(a, b)
    return accumulate(store(a, b, variant), variant, progress=progress)[a.shape[1]]


def check_operands(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need A (M×K) and B (K×N), got shapes {a.shape} and {b.shape}")


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The float64 product of the original inputs: what the pipeline is measured against."""
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)


def relative_errors(c: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max, mean) of |c - ref| / |ref| over the outputs (ref = 0 counts as |c|)."""
    denom = np.where(ref != 0, np.abs(ref), 1.0)
    rel = np.abs(c - ref) / denom
    return float(rel.max()), float(rel.mean())


def random_inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A (M×K), B (K×N): fp32 values uniform in (0, 1], never zero, so every output is well conditioned."""
    rng = np.random.default_rng(seed)
    a = (1.0 - rng.random((m, k))).astype(np.float32)
    b = (1.0 - rng.random((k, n))).astype(np.float32)
    return a, b


def tolerance(variant: Variant, k: int) -> float:
    """Worst-case relative error for non-negative data with fp32 accumulation, to first order in u_32
    (Higham's γ_K = K·u_32/(1 - K·u_32) bound, cross terms u_s·K·u_32 dropped; subnormals ignored):

        tol = 2u_s + u_s² + K·u_32,  u = ulp(1)/2 of the storage (u_s) and of fp32 (u_32).

    Narrow-accumulator variants are held to the bound of their storage with fp32
    accumulation, on purpose: the accumulator is what makes them fail.
    """
    storage = get_format(variant.storage)
    u_s = storage.eps / 2
    return float(2 * u_s + u_s**2 + k * _FP32.eps / 2)

