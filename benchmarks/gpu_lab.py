"""Build, check and time every GPU GEMM variant and axpy in one call; print one table.

    python3 benchmarks/gpu_lab.py [--size 8192] [--fma-size 4096] [--gemv 8192] [--axpy-n 16777216]

Rows: Triton tl.dot for tf32/fp16/bf16, an fp16 accumulator, e4m3 per-tensor scales (Triton's
default accumulation and max_num_imprecise_acc=128), e4m3 with 1x128/128x128 block scales;
torch.matmul per precision and torch._scaled_mm for e4m3 (with and without use_fast_accum);
Triton fp32-FMA tiles (no tensor cores) for fp32/fp16/bf16 storage; GEMV (M=1); Triton and
torch axpy; copy bandwidth. Each row is checked once against the float64 product, then timed
with triton.testing.do_bench (median after warm-up). "fraction" is achieved / the measured
ceiling of the same device: min(best torch.matmul rate of that precision, intensity x copy
bandwidth), and GB/s / copy GB/s for axpy. A row that raises is printed as ERROR with its
message and the run goes on. The three targets of issue #5 are printed as ratios at the end;
nothing is asserted. Progress (with elapsed seconds) goes to stderr, the table to stdout;
nothing is written except Triton's own kernel cache. Without CUDA it prints why and exits 0.
Expect about 2-4 minutes on an H200, most of it compiling the launch configurations.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="square GEMM size (a multiple of 128)")
    parser.add_argument("--fma-size", type=int, default=4096, help="square size of the fp32-FMA kernel rows")
    parser.add_argument("--gemv", type=int, default=8192, help="N = K of the GEMV rows")
    parser.add_argument("--axpy-n", type=int, default=1 << 24, help="elements per axpy vector")
    args = parser.parse_args()
    # This script measures compiled kernels: an interpreter setting left in the environment
    # (the CPU test suite uses one) would silently run everything in numpy.
    if os.environ.pop("TRITON_INTERPRET", "0") not in ("", "0"):
        print("gpu_lab: ignoring TRITON_INTERPRET (this script times compiled kernels)", file=sys.stderr)
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        print(f"gpu_lab: needs torch and triton ({exc}); nothing was run.")
        return 0
    if not torch.cuda.is_available():
        print("gpu_lab: no CUDA device on this machine; nothing was run. "
              "Use `precisionlab gemm` / `precisionlab axpy` for the CPU emulation.")
        return 0
    from precisionlab.gemm.kernels.bench import check_gpu_sizes, run_all

    try:
        check_gpu_sizes(args.size, args.fma_size, args.gemv, args.axpy_n, 4096, 64)
    except ValueError as exc:
        print(f"gpu_lab: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(relativeCreated)7.0f ms] %(message)s")
    start = time.perf_counter()
    report = run_all(size=args.size, fma_size=args.fma_size, gemv_n=args.gemv, axpy_n=args.axpy_n)
    print_report(report, time.perf_counter() - start, torch.__version__)
    return 0


def print_report(report: Any, seconds: float, torch_version: str) -> None:
    """The one table, the targets as ratios and the fp8 accumulation comparison."""
    import triton

    print(f"device: {report.device}   torch {torch_version}, triton {triton.__version__}   "
          f"copy bandwidth (torch copy_, fp32): {report.copy_gbps:.1f} GB/s   run: {seconds:.0f} s")
    header = (f"{'kernel':<32} {'kind':<7} {'math':<5} {'shape':<16} {'ms':>9} {'TFLOP/s':>9} {'GB/s':>8} "
              f"{'max rel err':>12} {'tolerance':>10} {'status':<18} {'fraction':>8}  note")
    print(header)
    print("-" * len(header))
    for r in report.rows:
        print(f"{r.name:<32} {r.kind:<7} {r.precision:<5} {r.shape:<16} {_num(r.ms, '9.4f')} "
              f"{_num(r.tflops if r.flops else math.nan, '9.2f')} {_num(r.gbps, '8.1f')} "
              f"{_num(r.max_rel_err, '12.3e')} {_num(r.tolerance, '10.2e')} {_status(r):<18} "
              f"{_num(report.fraction_of_ceiling(r), '8.2f')}  {r.error or r.note}")
    rows = {r.name: r for r in report.rows}
    print()
    print("targets (issue #5):")
    _target("triton tl.dot bf16 / torch.matmul bf16 TFLOP/s", _rate(rows, "triton_dot_bf16", "torch_bf16"), 0.80)
    for dtype in ("fp32", "fp16", "bf16"):
        row = rows.get(f"triton_axpy_{dtype}")
        value = row.gbps / report.copy_gbps if row is not None and report.copy_gbps else math.nan
        _target(f"triton axpy {dtype} GB/s / copy GB/s", value, 0.85)
    _target("torch._scaled_mm e4m3 / torch bf16 TFLOP/s", _rate(rows, "torch_scaled_mm_e4m3", "torch_bf16"), 1.5)
    _target("  same, use_fast_accum=True", _rate(rows, "torch_scaled_mm_e4m3_fastacc", "torch_bf16"), 1.5)
    _target("  triton e4m3 block-scaled / torch bf16", _rate(rows, "triton_e4m3_block", "torch_bf16"), None)
    print()
    print("fp8 accumulation, e4m3 per-tensor scales, 64x64 outputs, K = 4096 (max rel err):")
    for label, value in report.accumulation:
        print(f"  {label:<72} {_num(value, '.3e')}")
    failed = [r.name for r in report.rows if r.error]
    if failed:
        print(f"\n{len(failed)} row(s) raised and were not measured: {', '.join(failed)}")


def _status(row: Any) -> str:
    if row.error:
        return "ERROR"
    if row.passed is None:
        return ""
    if row.passed:
        return "PASS (unexpected)" if row.expected_to_fail else "PASS"
    return "FAILED (expected)" if row.expected_to_fail else "FAIL"


def _num(value: float | None, spec: str) -> str:
    width = spec.split(".")[0]
    if value is None or not math.isfinite(value):
        return f"{'-':>{width}}" if width else "-"
    return f"{value:{spec}}"


def _rate(rows: dict[str, Any], num: str, den: str) -> float:
    if num not in rows or den not in rows:
        return math.nan
    top, bottom = rows[num].tflops, rows[den].tflops
    return top / bottom if bottom and math.isfinite(bottom) else math.nan


def _target(label: str, value: float, goal: float | None) -> None:
    if goal is None:
        print(f"  {label}: {_num(value, '.2f')}")
        return
    verdict = "not measured" if not math.isfinite(value) else ("met" if value >= goal else "missed")
    print(f"  {label}: {_num(value, '.2f')} (target >= {goal}: {verdict})")


if __name__ == "__main__":
    sys.exit(main())
