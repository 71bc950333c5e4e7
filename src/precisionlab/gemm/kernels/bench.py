"""Build, check and time every GPU variant on a CUDA device: Triton kernels and library paths.

Each row is timed with triton.testing.do_bench (median after warm-up) on random inputs in
(0, 1] (never zero) and checked against the float64 product of the fp32 inputs, with the
tolerance rule of the CPU emulation (precisionlab.gemm.emulate.tolerance). Ceilings are
measured on the same device: copy bandwidth (torch copy_) and the best torch.matmul rate
per precision. Nothing here runs without CUDA: `require_cuda()` raises a one-line error.

A row that fails (a launch that does not fit, an unsupported library path, a compile error)
is reported as a row with ms = NaN and the error in `error`, never aborts the run. Progress
goes to the `precisionlab.gemm.kernels.bench` logger (benchmarks/gpu_lab.py shows it on stderr).

fp8 operands: B is passed column-major (K contiguous) to every fp8 kernel, the layout
Hopper's fp8 wgmma and torch._scaled_mm require; the Triton kernels take any strides.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import triton
import triton.testing

from precisionlab.gemm.emulate import accumulate, store, tolerance
from precisionlab.gemm.kernels.axpy import axpy
from precisionlab.gemm.kernels.matmul import SCALE_BLOCK, matmul_dot, matmul_fma, matmul_fp8_blockscaled
from precisionlab.gemm.variants import A_BLOCK, B_BLOCK, PROMOTE_EVERY, Variant, narrow_accumulator
from precisionlab.rounding.arrays import TORCH_FORMATS

AXPY_ALPHA = 0.5
STORAGE_DTYPES = {name: getattr(torch, key.removeprefix("torch."))
                  for name in ("fp32", "fp16", "bf16") for key, known in TORCH_FORMATS.items() if known == name}
"""The 16- and 32-bit storages these benchmarks time, in the order fp32, fp16, bf16 (from rounding.arrays' map)."""
E4M3 = torch.float8_e4m3fn
_LOG = logging.getLogger(__name__)
E4M3_MAX = float(torch.finfo(E4M3).max)


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise ValueError("no CUDA device: the GPU backend needs one (use --backend cpu)")


def median_ms(fn: Callable[[], Any], device: str = "cuda") -> float:
    """Median milliseconds per call: triton.testing.do_bench (warm-up, cache flush, repeats) on CUDA;
    elsewhere (the interpreter smoke test) a wall-clock median of a few calls."""
    if device == "cuda":
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass
class GpuRow:
    """One timed GPU kernel. precision: the math unit whose measured ceiling applies."""

    name: str
    kind: str
    precision: str
    shape: str
    ms: float
    flops: float
    bytes: float
    max_rel_err: float | None = None
    tolerance: float | None = None
    expected_to_fail: bool = False
    note: str = ""
    error: str = ""
    """Why the row has no measurement (empty when it ran)."""

    @property
    def tflops(self) -> float:
        return self.flops / self.ms / 1e9

    @property
    def gbps(self) -> float:
        return self.bytes / self.ms / 1e6

    @property
    def passed(self) -> bool | None:
        if self.max_rel_err is None or self.tolerance is None:
            return None
        return self.max_rel_err <= self.tolerance


def failed_row(name: str, kind: str, precision: str, shape: str, flops: float, moved: float,
               exc: BaseException) -> GpuRow:
    """The row reported in place of a measurement that raised: ms = NaN, the error's first line."""
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0][:160] if text else ''}"
    _LOG.warning("%s failed: %s", name, message)
    return GpuRow(name, kind, precision, shape, math.nan, flops, moved, error=message)


@dataclass
class BenchReport:
    device: str
    rows: list[GpuRow] = field(default_factory=list)
    copy_gbps: float = 0.0
    accumulation: list[tuple[str, float]] = field(default_factory=list)
    """(label, max rel err) of fp8 dots with and without promotion, GPU and emulated."""

    def best_tflops(self, precision: str) -> float | None:
        """Measured compute ceiling: the best torch.matmul rate at this precision."""
        rates = [r.tflops for r in self.rows if r.kind == "torch" and r.precision == precision and r.flops > 0
                 and not r.shape.startswith("1x") and math.isfinite(r.ms)]
        return max(rates) if rates else None

    def fraction_of_ceiling(self, row: GpuRow) -> float | None:
        """Achieved / attainable under the measured roofs: min(best rate, intensity × copy bandwidth)."""
        if row.flops == 0:
            return row.gbps / self.copy_gbps if self.copy_gbps else None
        peak = self.best_tflops(row.precision)
        memory_roof = (row.flops / row.bytes) * self.copy_gbps / 1e3
        roof = memory_roof if peak is None else min(peak, memory_roof)
        return row.tflops / roof if roof else None


def _inputs(m: int, n: int, k: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    a = 1.0 - torch.rand((m, k), generator=gen, device=device)
    b = 1.0 - torch.rand((k, n), generator=gen, device=device)
    return a, b


def _max_rel(c: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((c.double() - ref).abs() / ref.abs()).max())


def _tensor_scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / s saturated to e4m3, s) with s = amax / 448 in fp32 (the emulation's rule)."""
    scale = (x.abs().amax() / E4M3_MAX).float().reshape(1)
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def _block_scaled(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = x.shape
    bm, bk = block
    amax = x.abs().reshape(rows // bm, bm, cols // bk, bk).amax(dim=(1, 3))
    scales = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).float()
    grown = scales.repeat_interleave(bm, 0).repeat_interleave(bk, 1)
    return (x / grown).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scales


DOT_CONFIGS: tuple[dict[str, int], ...] = (
    {"block_m": 128, "block_n": 256, "block_k": 64, "num_warps": 8, "num_stages": 3},
    {"block_m": 256, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3},
    {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 4},
    {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 4, "num_stages": 4},
    {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 4, "num_stages": 3},
)
FP8_DOT_CONFIGS: tuple[dict[str, int], ...] = (
    {"block_m": 128, "block_n": 256, "num_warps": 8, "num_stages": 3},
    {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 4},
    {"block_m": 128, "block_n": 128, "num_warps": 4, "num_stages": 4},
)
"""fp8 tl.dot tiles; block_k is fixed at 128 (SCALE_BLOCK) so max_num_imprecise_acc=128 fits one dot."""
BLOCK_CONFIGS: tuple[dict[str, int], ...] = (
    {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 3},
    {"block_m": 128, "block_n": 128, "num_warps": 4, "num_stages": 4},
    {"block_m": 64, "block_n": 128, "num_warps": 4, "num_stages": 4},
)
TF32_CONFIGS: tuple[dict[str, int], ...] = (
    {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 8, "num_stages": 3},
    {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 4, "num_stages": 3},
    {"block_m": 128, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 4},
)


def tuned(kernel: Callable[..., torch.Tensor], args: tuple[Any, ...], configs: tuple[dict[str, int], ...],
          device: str, **fixed: Any) -> tuple[Callable[[], torch.Tensor], str]:
    """The fastest launch configuration of a kernel for these arguments (the 'build' step).

    On CUDA every config is compiled and timed and ones that do not fit (shared memory, registers)
    are skipped; elsewhere the wrapper's defaults are used. Returns the call and its config as text.
    """
    if device != "cuda":
        return functools.partial(kernel, *args, **fixed), "default config"
    best: tuple[float, dict[str, int]] | None = None
    last_error = ""
    for config in configs:
        call = functools.partial(kernel, *args, **fixed, **config)
        try:
            call()
            ms = median_ms(call, device)
        except Exception as exc:  # triton's OutOfResources and compile errors: this config does not fit
            last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            continue
        if best is None or ms < best[0]:
            best = (ms, config)
    if best is None:
        name = getattr(kernel, "__name__", "kernel")
        raise RuntimeError(f"no launch configuration of {name} ran on this device (last error: {last_error})")
    config = best[1]
    text = " ".join(f"{k.replace('block_', '').replace('num_', '')}={v}" for k, v in config.items())
    return functools.partial(kernel, *args, **fixed, **config), text


def _column_major(x: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column (K contiguous for a K×N operand)."""
    return x.t().contiguous().t()


def gemm_rows(size: int, fma_size: int, seed: int = 0, device: str = "cuda") -> list[GpuRow]:
    """Square GEMM rows (size³), the fp32-FMA kernel at fma_size³ (it is slow by design).

    Each row is checked (one call, error against the float64 product) before it is timed;
    a row whose build, check or timing raises is reported by failed_row and the run goes on."""
    if size <= 0 or size % SCALE_BLOCK:
        raise ValueError(f"the GEMM size must be a positive multiple of {SCALE_BLOCK}, got {size}")
    if fma_size <= 0:
        raise ValueError(f"the FMA kernel size must be positive, got {fma_size}")
    rows: list[GpuRow] = []
    a, b = _inputs(size, size, size, seed, device)
    ref = a.double() @ b.double()
    flops = 2.0 * size**3
    shape = f"{size}x{size}x{size}"

    moved_by_width = {w: (2 * size * size) * w + size * size * 4 for w in (1, 2, 4)}

    def add(name: str, kind: str, precision: str, storage: str, fn: Callable[[], torch.Tensor], width: int,
            expected_to_fail: bool = False, note: str = "", result: Callable[[], torch.Tensor] | None = None) -> None:
        """Check (result(), default fn()) then time fn; `result` lets a row time its raw output
        (torch's 16-bit C) while the check sees it widened."""
        _LOG.info("%s ...", name)
        try:
            c = (result or fn)()
            _sync(device)
            err = _max_rel(c, ref)
            del c
            rows.append(GpuRow(name, kind, precision, shape, median_ms(fn, device), flops, moved_by_width[width],
                               err, tolerance(Variant(name, storage), size), expected_to_fail, note))
        except Exception as exc:  # report the row, keep going
            rows.append(failed_row(name, kind, precision, shape, flops, moved_by_width[width], exc))

    def add_tuned(name: str, precision: str, storage: str, kernel: Callable[..., torch.Tensor],
                  args: tuple[Any, ...], configs: tuple[dict[str, int], ...], width: int,
                  expected_to_fail: bool = False, note: str = "", **fixed: Any) -> None:
        try:
            call, config = tuned(kernel, args, configs, device, **fixed)
        except Exception as exc:
            rows.append(failed_row(name, "triton", precision, shape, flops, moved_by_width[width], exc))
            return
        add(name, "triton", precision, storage, call, width, expected_to_fail, f"{config} {note}".strip())

    a16, b16 = a.half(), b.half()
    ab, bb = a.bfloat16(), b.bfloat16()
    add_tuned("triton_dot_tf32", "tf32", "tf32", matmul_dot, (a, b), TF32_CONFIGS, 4, input_precision="tf32")
    add_tuned("triton_dot_fp16", "fp16", "fp16", matmul_dot, (a16, b16), DOT_CONFIGS, 2)
    add_tuned("triton_dot_bf16", "bf16", "bf16", matmul_dot, (ab, bb), DOT_CONFIGS, 2)
    add_tuned("triton_dot_fp16_acc16", "fp16", "fp16", matmul_dot, (a16, b16), DOT_CONFIGS, 2,
              expected_to_fail=True, acc_fp16=True)
    a8, sa = _tensor_scaled(a)
    b8, sb = _tensor_scaled(b)
    b8 = _column_major(b8)
    scale = (sa * sb).float()
    add_tuned("triton_dot_e4m3_tensor", "fp8", "e4m3", matmul_dot, (a8, b8), FP8_DOT_CONFIGS, 1,
              note="Triton's default fp8 accumulation (sm_90: no promotion)", scale=scale, block_k=SCALE_BLOCK)
    add_tuned("triton_dot_e4m3_tensor_promoted", "fp8", "e4m3", matmul_dot, (a8, b8), FP8_DOT_CONFIGS, 1,
              note="max_num_imprecise_acc=128: fp32 promotion every 128", scale=scale,
              max_num_imprecise_acc=SCALE_BLOCK, block_k=SCALE_BLOCK)
    ab8, sab = _block_scaled(a, A_BLOCK)
    bb8, sbb = _block_scaled(b, B_BLOCK)
    add_tuned("triton_e4m3_block", "fp8", "e4m3", matmul_fp8_blockscaled, (ab8, sab, _column_major(bb8), sbb),
              BLOCK_CONFIGS, 1)
    torch.backends.cuda.matmul.allow_tf32 = False
    add("torch_fp32", "torch", "fp32", "fp32", lambda: a @ b, 4)
    torch.backends.cuda.matmul.allow_tf32 = True
    add("torch_tf32", "torch", "tf32", "tf32", lambda: a @ b, 4)
    torch.backends.cuda.matmul.allow_tf32 = False
    add("torch_fp16", "torch", "fp16", "fp16", functools.partial(torch.matmul, a16, b16), 2,
        note="fp16 C", result=lambda: (a16 @ b16).float())
    add("torch_bf16", "torch", "bf16", "bf16", functools.partial(torch.matmul, ab, bb), 2,
        note="bf16 C", result=lambda: (ab @ bb).float())
    for name, fast in (("torch_scaled_mm_e4m3", False), ("torch_scaled_mm_e4m3_fastacc", True)):
        add(name, "torch", "fp8", "e4m3",
            functools.partial(_scaled_mm, a8, b8, sa, sb, fast), 1, note=f"use_fast_accum={fast}")
    fa, fb = _inputs(fma_size, fma_size, fma_size, seed, device)
    fref = fa.double() @ fb.double()
    fshape = f"{fma_size}x{fma_size}x{fma_size}"
    pairs = {"fp32": (fa, fb), "fp16": (fa.half(), fb.half()), "bf16": (fa.bfloat16(), fb.bfloat16())}
    for storage, (x, y) in pairs.items():
        name = f"triton_fma_{storage}"
        moved = 2 * fma_size * fma_size * x.element_size() + fma_size * fma_size * 4
        _LOG.info("%s ...", name)
        try:
            c = matmul_fma(x, y)
            _sync(device)
            err = _max_rel(c, fref)
            ms = median_ms(functools.partial(matmul_fma, x, y), device)
            rows.append(GpuRow(name, "triton", "fp32", fshape, ms, 2.0 * fma_size**3, moved, err,
                               tolerance(Variant(storage, storage), fma_size), note="fp32 FMAs, no tensor cores"))
        except Exception as exc:
            rows.append(failed_row(name, "triton", "fp32", fshape, 2.0 * fma_size**3, moved, exc))
    return rows


def _scaled_mm(a8: torch.Tensor, b8_col: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
               fast_accum: bool) -> torch.Tensor:
    """torch._scaled_mm with per-tensor fp32 scales (one element each), fp32 output; B column-major."""
    out = torch._scaled_mm(a8, b8_col, scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=fast_accum)
    return out[0] if isinstance(out, tuple) else out


def gemv_rows(n: int, seed: int = 0, device: str = "cuda") -> list[GpuRow]:
    """Decode-like GEMV (M = 1): memory-bound, where storage width sets the time."""
    a, b = _inputs(1, n, n, seed, device)
    ref = a.double() @ b.double()
    rows = []
    for storage, dtype in STORAGE_DTYPES.items():
        name = f"torch_gemv_{storage}"
        moved = (n + n * n) * torch.empty((), dtype=dtype).element_size() + 4 * n
        try:
            x, y = a.to(dtype), b.to(dtype)
            c = (x @ y).float()
            rows.append(GpuRow(name, "torch", storage, f"1x{n}x{n}",
                               median_ms(functools.partial(torch.matmul, x, y), device), 2.0 * n * n, moved,
                               _max_rel(c, ref), tolerance(Variant(storage, storage), n)))
        except Exception as exc:
            rows.append(failed_row(name, "torch", storage, f"1x{n}x{n}", 2.0 * n * n, moved, exc))
    return rows


def copy_gbps(n: int = 1 << 24, device: str = "cuda") -> float:
    """The device's streaming ceiling: torch copy_ of n fp32 elements, 2·n·4 bytes per call."""
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_ms(lambda: dst.copy_(src), device) / 1e6


def axpy_rows(n: int = 1 << 24, device: str = "cuda") -> tuple[list[GpuRow], float]:
    """Triton and torch axpy in fp32/fp16/bf16, plus the copy bandwidth (torch copy_, fp32).

    The Triton row is checked first: one call must equal fl(alpha·x + y) computed in fp32 by torch."""
    try:
        copy = copy_gbps(n, device)
    except Exception as exc:
        failed_row("copy", "torch", "fp32", str(n), 0.0, 8.0 * n, exc)
        copy = math.nan
    rows = []
    for name, dtype in STORAGE_DTYPES.items():
        moved = 3.0 * n * torch.empty((), dtype=dtype).element_size()
        x = (1.0 - torch.rand(n, device=device)).to(dtype)
        y = (1.0 - torch.rand(n, device=device)).to(dtype)
        for kind, fn in (("triton", functools.partial(axpy, AXPY_ALPHA, x, y)),
                         ("torch", functools.partial(y.add_, x, alpha=AXPY_ALPHA))):
            row = f"{kind}_axpy_{name}"
            _LOG.info("%s ...", row)
            try:
                checked = kind == "triton"  # torch's add_ is timed, not checked
                expect = (AXPY_ALPHA * x.float() + y.float()).to(dtype) if checked else None
                fn()
                _sync(device)
                err = None if expect is None else float((y.float() - expect.float()).abs().max())
                rows.append(GpuRow(row, kind, name, str(n), median_ms(fn, device), 0.0, moved,
                                   err, 0.0 if checked else None))
            except Exception as exc:
                rows.append(failed_row(row, kind, name, str(n), 0.0, moved, exc))
    return rows, copy


NO_PROMOTION = "triton tl.dot, default accumulation (sm_90: one accumulator over all K)"
PROMOTED = "triton block kernel: fp32 promotion every 128"


def accumulation_study(k: int = 4096, outputs: int = 64, seed: int = 0, acc_bits: int = 14,
                       device: str = "cuda") -> list[tuple[str, float]]:
    """fp8 dots on the device against the CPU emulation of a narrow (acc_bits, truncating) accumulator.

    Device rows, same inputs, e4m3 with per-tensor scales, max relative error each:
    - tl.dot chained over K with Triton's default max_num_imprecise_acc (2^30 on sm_90): the
      tensor core's own accumulator carries all of K (no promotion);
    - tl.dot with max_num_imprecise_acc = 128 = BLOCK_K: Triton adds each 128-deep partial into
      an fp32 accumulator (promotion every 128);
    - the block kernel with uniform scales: a fresh partial per 128 of K, promoted into fp32.
    A device row that raises is reported as NaN (the failure is logged).
    """
    if k <= 0 or k % SCALE_BLOCK:
        raise ValueError(f"K must be a positive multiple of {SCALE_BLOCK}, got {k}")
    a, b = _inputs(outputs, outputs, k, seed, device)
    ref = a.double() @ b.double()
    a8, sa = _tensor_scaled(a)
    b8, sb = _tensor_scaled(b)
    b8 = _column_major(b8)
    scale = (sa * sb).float()
    tile = min(64, outputs)
    blocks = k // SCALE_BLOCK
    a_scales = sa.reshape(1, 1).expand(outputs, blocks).contiguous()
    b_scales = sb.reshape(1, 1).expand(blocks, triton.cdiv(outputs, SCALE_BLOCK)).contiguous()
    device_paths: list[tuple[str, Callable[[], torch.Tensor]]] = [
        (NO_PROMOTION, functools.partial(matmul_dot, a8, b8, scale=scale, max_num_imprecise_acc=None,
                                         block_m=tile, block_n=tile, block_k=SCALE_BLOCK)),
        ("triton tl.dot, max_num_imprecise_acc=128 (promotion every 128)",
         functools.partial(matmul_dot, a8, b8, scale=scale, max_num_imprecise_acc=SCALE_BLOCK,
                           block_m=tile, block_n=tile, block_k=SCALE_BLOCK)),
        (PROMOTED, functools.partial(matmul_fp8_blockscaled, a8, a_scales, b8, b_scales,
                                     max_num_imprecise_acc=SCALE_BLOCK, block_m=tile, block_n=tile)),
    ]
    out = []
    for label, fn in device_paths:
        try:
            out.append((label, _max_rel(fn(), ref)))
        except Exception as exc:
            failed_row(label, "triton", "fp8", f"{outputs}x{outputs}x{k}", 0.0, 0.0, exc)
            out.append((label, math.nan))
    a_np, b_np = a.cpu().numpy(), b.cpu().numpy()
    ref_np = ref.cpu().numpy()
    narrow = narrow_accumulator(acc_bits)
    for label, promote in ((f"emulated {acc_bits}-bit, no promotion", None),
                           (f"emulated {acc_bits}-bit, promotion every {PROMOTE_EVERY}", PROMOTE_EVERY)):
        variant = Variant("acc", "e4m3", accumulator=narrow, scaling="tensor", promote_every=promote,
                          acc_rounding="toward_zero")
        c_np = accumulate(store(a_np, b_np, variant), variant)[k]
        out.append((label, float(np.max(np.abs(c_np - ref_np) / np.abs(ref_np)))))
    return out


def run_all(size: int = 8192, fma_size: int = 4096, gemv_n: int = 8192, axpy_n: int = 1 << 24, seed: int = 0,
            acc_k: int = 4096, acc_outputs: int = 64, device: str = "cuda") -> BenchReport:
    """Every GPU row, the copy-bandwidth ceiling and the fp8 accumulation comparison.

    Sizes are checked before anything runs (a one-line ValueError). device: 'cuda' for
    measurements; 'cpu' only for the smoke test under TRITON_INTERPRET=1."""
    check_gpu_sizes(size, fma_size, gemv_n, axpy_n, acc_k, acc_outputs)
    if device == "cuda":
        require_cuda()
    report = BenchReport(torch.cuda.get_device_name() if device == "cuda" else device)
    sections: list[tuple[str, Callable[[], None]]] = [
        ("gemm", lambda: report.rows.extend(gemm_rows(size, fma_size, seed, device))),
        ("gemv", lambda: report.rows.extend(gemv_rows(gemv_n, seed, device))),
        ("axpy", lambda: _add_axpy(report, axpy_n, device)),
        ("fp8 accumulation", lambda: report.accumulation.extend(accumulation_study(acc_k, acc_outputs, seed,
                                                                                   device=device))),
    ]
    for name, section in sections:
        _LOG.info("section %s", name)
        try:
            section()
        except Exception as exc:  # rows inside a section report their own failures; this is the setup
            report.rows.append(failed_row(f"{name} (section)", "setup", "-", "-", 0.0, 0.0, exc))
        if device == "cuda":
            torch.cuda.empty_cache()
    return report


def _add_axpy(report: BenchReport, n: int, device: str) -> None:
    rows, report.copy_gbps = axpy_rows(n, device)
    report.rows.extend(rows)


def check_gpu_sizes(size: int, fma_size: int, gemv_n: int, axpy_n: int, acc_k: int, acc_outputs: int) -> None:
    """One-line errors for sizes the GPU rows cannot run: all positive; size and acc_k multiples of 128."""
    for label, value in (("size", size), ("fma_size", fma_size), ("gemv_n", gemv_n), ("axpy_n", axpy_n),
                         ("acc_k", acc_k), ("acc_outputs", acc_outputs)):
        if value <= 0:
            raise ValueError(f"{label} must be a positive integer, got {value}")
    for label, value in (("size", size), ("acc_k", acc_k)):
        if value % SCALE_BLOCK:
            raise ValueError(f"{label}={value} is not a multiple of {SCALE_BLOCK} (the fp8 block edge)")
