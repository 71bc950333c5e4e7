"""The GEMM lab's GPU backend: the Triton kernels and library paths of precisionlab.gemm.kernels,
timed and checked on a CUDA device, as the same LabResult the CPU backend returns (needs CUDA;
device='cpu' runs the whole path under TRITON_INTERPRET=1 for the smoke tests)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from precisionlab.gemm.roofline import Ceilings
from precisionlab.gemm.study import status_label
from precisionlab.gemm.timing import Timing
from precisionlab.labs.gemm_roofline import roofline_figure
from precisionlab.results import Figure, LabResult, Scalar, Table


def gpu_status(row: Any) -> str | None:
    """PASS / FAIL / FAILED (expected) for a checked GPU row, ERROR for one that raised, None if unchecked."""
    if row.error:
        return "ERROR"
    return None if row.passed is None else status_label(row.passed, row.expected_to_fail)


def _ratio(values: dict[str, float], num: str, den: str) -> float:
    """values[num] / values[den]; NaN when either is missing (a failed row) or the denominator is 0."""
    top, bottom = values.get(num, math.nan), values.get(den, math.nan)
    return top / bottom if bottom else math.nan


def load_gpu_bench(device: str = "cuda") -> ModuleType:
    """precisionlab.gemm.kernels.bench, or a one-line error when torch/triton/CUDA are missing."""
    try:
        from precisionlab.gemm.kernels import bench
    except ImportError as exc:
        raise ValueError(f"the GPU backend needs torch and triton ({exc})") from None
    if device == "cuda":
        bench.require_cuda()
    return bench


GPU_TILE = 128
"""Tile edge drawn on the GPU roofline (T/4 and T/2 lines): the Triton kernels' smallest tile."""


def run_gpu(size: int, seed: int = 0, device: str = "cuda", datasheet: Ceilings | None = None,
            **sizes: int) -> LabResult:
    """GPU backend: every Triton kernel and library path, timed and checked on the CUDA device,
    and a roofline of the device's measured ceilings (plus the datasheet one, if given).

    sizes: optional fma_size, gemv_n, axpy_n, acc_k, acc_outputs for bench.run_all; device='cpu'
    exists only for the smoke test under TRITON_INTERPRET=1."""
    bench = load_gpu_bench(device)
    options = {"fma_size": min(size, 4096), **sizes}
    report = bench.run_all(size=size, seed=seed, device=device, **options)
    findings: dict[str, Scalar] = {"machine.copy_gbps": report.copy_gbps}
    rows: list[list[Scalar]] = []
    for r in report.rows:
        fraction = report.fraction_of_ceiling(r)
        status = gpu_status(r)
        rows.append([r.name, r.kind, r.precision, r.shape, r.ms, r.tflops, r.gbps, r.max_rel_err, r.tolerance,
                     status, fraction, r.error or r.note])
        findings[f"gpu.{r.name}.tflops"] = r.tflops
        findings[f"gpu.{r.name}.gbps"] = r.gbps
        findings[f"gpu.{r.name}.fraction_of_ceiling"] = fraction
        if r.passed is not None and r.flops > 0:
            findings[f"gemm.{r.name}.max_rel_err"] = r.max_rel_err
            findings[f"gemm.{r.name}.passed"] = r.passed
    err = {r.name: math.nan if r.max_rel_err is None else r.max_rel_err for r in report.rows}
    findings["gemm.bf16_over_fp16_error_ratio"] = _ratio(err, "triton_dot_bf16", "triton_dot_fp16")
    findings["gemm.fp16_acc_error_ratio"] = _ratio(err, "triton_dot_fp16_acc16", "triton_dot_fp16")
    findings["gemm.fp8_promotion_error_gain"] = _ratio(dict(report.accumulation), bench.NO_PROMOTION, bench.PROMOTED)
    findings["gpu.failed_rows"] = sum(1 for r in report.rows if r.error)
    table = Table(
        key="gpu", title=f"GPU kernels on {report.device} (hardware)",
        columns=["kernel", "kind", "math", "shape", "ms", "TFLOP/s", "GB/s", "max rel err", "tolerance", "status",
                 "fraction of ceiling", "note"],
        rows=rows,
        note=("triton.testing.do_bench medians after warm-up; each row checked once before timing. fraction of "
              "ceiling: achieved / min(best torch.matmul rate of the same precision, intensity × measured copy "
              "bandwidth); axpy rows: GB/s / copy GB/s. ERROR: the row raised (its message is in the note) and "
              "the run went on."),
        formats={"ms": ".4g", "TFLOP/s": ".4g", "GB/s": ".4g", "max rel err": ".3e", "tolerance": ".2e",
                 "fraction of ceiling": ".2f"},
    )
    accumulation = Table(
        key="fp8_accumulation", title="FP8 accumulation on the GPU against the emulated narrow accumulator",
        columns=["path", "max rel err"], rows=[[label, value] for label, value in report.accumulation],
        note=("e4m3 per-tensor scales, 64×64 outputs, K = 4096 (the defaults); the emulation uses the same "
              "inputs. NaN: that device path raised."),
        formats={"max rel err": ".3e"},
    )
    timings = [Timing(r.name, r.kind, r.precision, r.ms / 1e3, r.flops, r.bytes, r.shape) for r in report.rows
               if r.flops > 0 and math.isfinite(r.ms) and r.ms > 0]
    figures: list[Figure] = []
    if timings and math.isfinite(report.copy_gbps) and report.copy_gbps > 0:
        peaks = {p: rate * 1e3 for p in sorted({t.precision for t in timings})
                 if (rate := report.best_tflops(p)) is not None}
        measured = Ceilings(f"{report.device} (measured)", report.copy_gbps, peaks)
        for t in timings:
            if t.precision in peaks:
                findings[f"roofline.gpu.{t.name}.bound"] = measured.bound(t.precision, t.intensity)
        figures.append(roofline_figure(timings, measured, datasheet, {"tile": GPU_TILE}))
    return LabResult(name="gemm", title=f"Mixed-precision GEMM on {report.device}", sections=[table, accumulation],
                     figures=figures, findings=findings, params={"backend": "gpu", "size": size, "seed": seed})
