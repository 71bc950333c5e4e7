"""Measured rates on this machine's CPU: library matmuls, copy bandwidth, axpy.

These are hardware timings (real library kernels), as opposed to the exact emulation,
whose time measures numpy bookkeeping and nothing about the formats. Each timing is the
median of repeated calls after one warm-up call, within a small time budget.
Byte counts are the compulsory traffic: each operand read once, each output written once.
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

AXPY_ALPHA = 0.5
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Timing:
    """One measured kernel: median seconds per call, its FLOPs and compulsory bytes."""

    name: str
    library: str
    precision: str
    seconds: float
    flops: float
    bytes: float
    shape: str = ""

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def median_seconds(fn: Callable[[], Any], budget_s: float = 0.3, min_repeats: int = 3, max_repeats: int = 50) -> float:
    """Median wall time of fn() over repeats after one warm-up call (stops at the budget)."""
    fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_repeats and (len(samples) < min_repeats or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def matmul_timings(m: int, n: int, k: int, budget_s: float = 0.3, seed: int = 0) -> list[Timing]:
    """numpy fp32 matmul, and torch fp32/bf16/fp16 matmul on the CPU when torch is installed."""
    rng = np.random.default_rng(seed)
    a = (1.0 - rng.random((m, k))).astype(np.float32)
    b = (1.0 - rng.random((k, n))).astype(np.float32)
    shape = f"{m}x{n}x{k}"
    flops = 2.0 * m * n * k
    out: list[Timing] = []
    seconds = median_seconds(lambda: a @ b, budget_s)
    out.append(Timing("numpy fp32 matmul", "numpy", "fp32", seconds, flops, _gemm_bytes(m, n, k, 4), shape))
    if torch_available():
        import torch

        for precision, dtype_name in TORCH_DTYPES.items():
            dtype = getattr(torch, dtype_name)
            ta, tb = torch.from_numpy(a).to(dtype), torch.from_numpy(b).to(dtype)
            seconds = median_seconds(functools.partial(torch.matmul, ta, tb), budget_s)
            w = ELEMENT_BYTES[precision]
            out.append(Timing(f"torch {precision} matmul", "torch", precision, seconds, flops,
                              _gemm_bytes(m, n, k, w, w), shape))
    return out


def _gemm_bytes(m: int, n: int, k: int, w: float, out_w: float = 4) -> float:
    return float((m * k + k * n) * w + m * n * out_w)


def copy_bandwidth(n: int = 1 << 24, budget_s: float = 0.3) -> Timing:
    """The machine's streaming ceiling: the fastest of four fp32 kernels that move 2 elements per
    element (2·n·4 bytes per call): copy dst ← src and in-place scale y ← c·y, in numpy and torch.

    In-place scale is included because a CPU copy also reads dst's lines before writing them
    (write-allocate), traffic the 2·n·4 count does not see; an in-place update has none.
    """
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    dst = np.empty_like(src)
    scale = np.float32(1.0)
    candidates: list[tuple[str, str, Callable[[], Any]]] = [
        ("numpy copyto", "numpy", lambda: np.copyto(dst, src)),
        ("numpy in-place scale", "numpy", lambda: np.multiply(dst, scale, out=dst)),
    ]
    if torch_available():
        import torch

        tsrc, tdst = torch.from_numpy(src), torch.empty(n, dtype=torch.float32)
        candidates += [("torch copy_", "torch", lambda: tdst.copy_(tsrc)),
                       ("torch in-place scale", "torch", lambda: tdst.mul_(1.0))]
    timings = [Timing(name, library, "fp32", median_seconds(fn, budget_s), 0.0, 2.0 * src.nbytes, str(n))
               for name, library, fn in candidates]
    return min(timings, key=lambda t: t.seconds)


def axpy_timing(precision: str, n: int = 1 << 24, budget_s: float = 0.3) -> Timing:
    """y = a·x + y over n elements: the fastest honest CPU path for the precision.

    Candidates: torch `y.add_(x, alpha=a)` (one fused pass) and numpy (`multiply` then `add`
    into preallocated buffers: two passes; bf16 through ml_dtypes). GB/s counts the
    3 elements per element that an axpy must move (read x, read y, write y); FLOPs are 2n.
    """
    if precision not in ELEMENT_BYTES:
        raise ValueError(f"axpy precisions are {', '.join(ELEMENT_BYTES)}, got {precision!r}")
    candidates = [_axpy_numpy(precision, n, budget_s)]
    if torch_available():
        candidates.append(_axpy_torch(precision, n, budget_s))
    measured = [c for c in candidates if c is not None]
    if not measured:
        raise ValueError(f"no CPU path for {precision} axpy (install torch or ml_dtypes)")
    return min(measured, key=lambda t: t.seconds)


def _axpy_inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (1.0 - rng.random(n, dtype=np.float32)), (1.0 - rng.random(n, dtype=np.float32))


def _axpy_numpy(precision: str, n: int, budget_s: float) -> Timing | None:
    dtype: Any = {"fp32": np.float32, "fp16": np.float16}.get(precision)
    if dtype is None and importlib.util.find_spec("ml_dtypes") is not None:
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    if dtype is None:
        return None
    x32, y32 = _axpy_inputs(n)
    x, y = x32.astype(dtype), y32.astype(dtype)
    tmp = np.empty_like(x)
    alpha = np.asarray(AXPY_ALPHA, dtype=dtype)

    def step() -> None:
        np.multiply(x, alpha, out=tmp)
        np.add(y, tmp, out=y)

    seconds = median_seconds(step, budget_s)
    return Timing(f"numpy {precision} axpy", "numpy", precision, seconds, 2.0 * n, 3.0 * n * ELEMENT_BYTES[precision],
                  str(n))


def _axpy_torch(precision: str, n: int, budget_s: float) -> Timing:
    import torch

    dtype = getattr(torch, TORCH_DTYPES[precision])
    x32, y32 = _axpy_inputs(n)
    x, y = torch.from_numpy(x32).to(dtype), torch.from_numpy(y32).to(dtype)
    seconds = median_seconds(lambda: y.add_(x, alpha=AXPY_ALPHA), budget_s)
    return Timing(f"torch {precision} axpy", "torch", precision, seconds, 2.0 * n, 3.0 * n * ELEMENT_BYTES[precision],
                  str(n))
