"""Measured rates on this machine's CPU: library matmuls, copy bandwidth, axpy.

These are hardware timings (real library kernels), as opposed to the exact emulation,
whose time measures numpy bookkeeping and nothing about the formats. Each timing is the
median of repeated calls after one warm-up call, warm-up and repeats within a time budget;
a matmul too slow for the budget at the requested shape is timed at the largest halving
that fits (`fitting_shape`), and its Timing says which shape.
Byte counts are the compulsory traffic: each operand read once, each output written once.

torch is an optional peer: without it the torch rows are absent and the callers report them
as skipped. A timing whose arithmetic numpy emulates in software (numpy's float16 loops; bf16,
which numpy lacks, kept as uint16 bit patterns) is marked `software=True`: its time measures
that emulation, not the memory system.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.peers import install_hint, optional_import
from precisionlab.rounding import round_to

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
    software: bool = False
    """True when numpy emulates the arithmetic in software: the time measures that, not bandwidth."""

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
    """True when torch imports (a package that is found but fails to import counts as absent)."""
    return optional_import("torch") is not None


def median_seconds(fn: Callable[[], Any], budget_s: float = 0.3, max_repeats: int = 50) -> float:
    """Median wall time of fn() after one warm-up call, all of it within budget_s: the warm-up
    counts, and another timed call starts only while the time spent plus the median so far fits
    the budget. At least one call is timed, so a call longer than the budget costs two of them;
    `fitting_shape` picks a size whose calls fit."""
    start = time.perf_counter()
    fn()
    samples: list[float] = []
    while len(samples) < max_repeats:
        if samples and time.perf_counter() - start + statistics.median(samples) > budget_s:
            break
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


FITTING_CALLS = 2
"""A matmul is timed at a size whose warm-up and one timed call fit the budget (more repeats follow
where the budget allows)."""
PROBE_FLOPS = 2.0 * 128**3
"""The probe call that predicts a kernel's time: a shape of about 2·128³ FLOPs."""


def fitting_shape(run: Callable[[int, int, int], Any], m: int, n: int, k: int, budget_s: float) -> tuple[int, int, int]:
    """The largest of (m, n, k), (m, n, k) / 2, / 4, ... (each dimension halved down to 1) whose
    FITTING_CALLS calls fit in budget_s, predicted from one call at a probe shape of about
    PROBE_FLOPS (the fastest of three calls after a warm-up; time proportional to m·n·k); the probe
    shape when none fits. `run(m, n, k)` runs the kernel once at that shape. The probe costs a few
    milliseconds."""
    shapes = [(m, n, k)]
    while max(shapes[-1]) > 1 and 2.0 * math.prod(shapes[-1]) > PROBE_FLOPS:
        shapes.append(tuple(max(1, d // 2) for d in shapes[-1]))  # type: ignore[arg-type]
    probe = shapes[-1]
    if probe == (m, n, k):
        return probe
    run(*probe)  # warm-up: the first call of a kernel pays its set-up
    fastest = math.inf
    for _ in range(3):  # the fastest of three calls: a shared machine only ever slows a call down
        t0 = time.perf_counter()
        run(*probe)
        fastest = min(fastest, time.perf_counter() - t0)
    per_flop = fastest / math.prod(probe)
    for shape in shapes:
        if FITTING_CALLS * per_flop * math.prod(shape) <= budget_s:
            return shape
    return probe


def matmul_timings(m: int, n: int, k: int, budget_s: float = 0.3, seed: int = 0) -> list[Timing]:
    """numpy fp32 matmul, and torch fp32/bf16/fp16 matmul on the CPU when torch is installed, each at
    (m, n, k) or at the largest halving of it whose warm-up and repeats fit budget_s (torch's CPU
    16-bit matmul runs at a few GFLOP/s: 1024³ takes seconds a call). Timing.shape is the shape timed."""
    rng = np.random.default_rng(seed)
    out: list[Timing] = []

    def operands(shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        sm, sn, sk = shape
        a = (1.0 - rng.random((sm, sk))).astype(np.float32)
        b = (1.0 - rng.random((sk, sn))).astype(np.float32)
        return a, b

    def numpy_run(sm: int, sn: int, sk: int) -> Any:
        return np.ones((sm, sk), np.float32) @ np.ones((sk, sn), np.float32)

    shape = fitting_shape(numpy_run, m, n, k, budget_s)
    a, b = operands(shape)
    seconds = median_seconds(lambda: a @ b, budget_s)
    out.append(_matmul_timing("numpy fp32 matmul", "numpy", "fp32", seconds, shape, 4))
    if torch_available():
        import torch

        for precision, dtype_name in TORCH_DTYPES.items():
            dtype = getattr(torch, dtype_name)

            def torch_run(sm: int, sn: int, sk: int, dtype: Any = dtype) -> Any:
                return torch.matmul(torch.ones((sm, sk), dtype=dtype), torch.ones((sk, sn), dtype=dtype))

            shape = fitting_shape(torch_run, m, n, k, budget_s)
            a, b = operands(shape)
            ta, tb = torch.from_numpy(a).to(dtype), torch.from_numpy(b).to(dtype)
            seconds = median_seconds(functools.partial(torch.matmul, ta, tb), budget_s)
            out.append(_matmul_timing(f"torch {precision} matmul", "torch", precision, seconds, shape,
                                      ELEMENT_BYTES[precision]))
    return out


def _matmul_timing(name: str, library: str, precision: str, seconds: float, shape: tuple[int, int, int],
                   w: float) -> Timing:
    sm, sn, sk = shape
    out_w = 4 if library == "numpy" else w
    return Timing(name, library, precision, seconds, 2.0 * sm * sn * sk, _gemm_bytes(sm, sn, sk, w, out_w),
                  f"{sm}x{sn}x{sk}")


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


AXPY_LIBRARIES = ("numpy", "torch")


def axpy_timing(precision: str, n: int = 1 << 24, budget_s: float = 0.3, library: str | None = None) -> Timing:
    """y = a·x + y over n elements: the fastest honest CPU path for the precision.

    library=None picks: for fp32 the faster of numpy (`multiply` then `add` into preallocated
    buffers: two passes) and torch (`y.add_(x, alpha=a)`, one fused pass); for fp16 and bf16
    torch when it is installed (vectorised conversions, so the time is the memory traffic),
    otherwise numpy, whose 16-bit paths are software (`Timing.software`): numpy's float16
    ufuncs convert element by element, and bf16 is held as uint16 bit patterns (see
    `bf16_axpy_step`). library='numpy' or 'torch' times that library only.
    GB/s counts the 3 elements per element an axpy must move (read x, read y, write y); FLOPs are 2n.
    """
    if precision not in ELEMENT_BYTES:
        raise ValueError(f"axpy precisions are {', '.join(ELEMENT_BYTES)}, got {precision!r}")
    if library not in (None, *AXPY_LIBRARIES):
        raise ValueError(f"axpy library must be one of {', '.join(AXPY_LIBRARIES)}, got {library!r}")
    if library == "torch" and not torch_available():
        raise ValueError(f"the torch axpy path needs torch ({install_hint('torch')})")
    has_torch = library != "numpy" and torch_available()
    candidates: list[Timing] = []
    if library == "numpy" or not has_torch or precision == "fp32":
        candidates.append(_axpy_numpy(precision, n, budget_s))
    if has_torch:
        candidates.append(_axpy_torch(precision, n, budget_s))
    return min(candidates, key=lambda t: t.seconds)


def _axpy_inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (1.0 - rng.random(n, dtype=np.float32)), (1.0 - rng.random(n, dtype=np.float32))


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest-even, by precisionlab's engine), as uint16 bit patterns."""
    rounded = round_to(np.asarray(x, dtype=np.float32), "bf16")
    return (rounded.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns as float32 values (exact: bf16 is the top half of an fp32)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_axpy_step(alpha: np.float32, x_bits: np.ndarray, y_bits: np.ndarray) -> None:
    """y ← bf16(fp32(alpha·x) + y) in place on uint16 bf16 bit patterns, numpy only.

    Widen both operands to float32 (exact), multiply and add in float32 (what a CPU bf16 kernel
    does), round the sum once to bf16 with precisionlab's engine, store the top 16 bits."""
    total = bf16_values(x_bits) * alpha
    total += bf16_values(y_bits)
    y_bits[...] = bf16_bits(total)


def _axpy_numpy(precision: str, n: int, budget_s: float) -> Timing:
    x32, y32 = _axpy_inputs(n)
    moved = 3.0 * n * ELEMENT_BYTES[precision]
    if precision == "bf16":
        x_bits, y_bits = bf16_bits(x32), bf16_bits(y32)
        alpha32 = np.float32(AXPY_ALPHA)
        seconds = median_seconds(lambda: bf16_axpy_step(alpha32, x_bits, y_bits), budget_s)
        return Timing("numpy bf16 axpy (uint16 bit patterns, fp32 math, software rounding)", "numpy", precision,
                      seconds, 2.0 * n, moved, str(n), software=True)
    dtype = np.float32 if precision == "fp32" else np.float16
    x, y = x32.astype(dtype), y32.astype(dtype)
    tmp = np.empty_like(x)
    alpha = np.asarray(AXPY_ALPHA, dtype=dtype)

    def step() -> None:
        np.multiply(x, alpha, out=tmp)
        np.add(y, tmp, out=y)

    seconds = median_seconds(step, budget_s)
    software = precision != "fp32"
    name = "numpy fp16 axpy (software fp16)" if software else f"numpy {precision} axpy"
    return Timing(name, "numpy", precision, seconds, 2.0 * n, moved, str(n), software=software)


def _axpy_torch(precision: str, n: int, budget_s: float) -> Timing:
    import torch

    dtype = getattr(torch, TORCH_DTYPES[precision])
    x32, y32 = _axpy_inputs(n)
    x, y = torch.from_numpy(x32).to(dtype), torch.from_numpy(y32).to(dtype)
    seconds = median_seconds(lambda: y.add_(x, alpha=AXPY_ALPHA), budget_s)
    return Timing(f"torch {precision} axpy", "torch", precision, seconds, 2.0 * n, 3.0 * n * ELEMENT_BYTES[precision],
                  str(n))
