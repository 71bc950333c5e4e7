"""Build, check and time every GPU GEMM variant and axpy in one call; print one table.

    python3 benchmarks/gpu_lab.py [--size 8192] [--fma-size 4096] [--gemv 8192] [--axpy-n 16777216]

Rows: Triton fp32-FMA tiles (no tensor cores) for fp32/fp16/bf16 storage, Triton tl.dot for
tf32/fp16/bf16, an fp16 accumulator, e4m3 per-tensor and 1x128/128x128 block scales; torch.matmul
per precision and torch._scaled_mm for e4m3; GEMV (M=1); Triton and torch axpy; copy bandwidth.
Each is timed with triton.testing.do_bench (median) and checked against the float64 product.
"fraction" is achieved / the measured ceiling of the same device: min(best torch.matmul rate of that
precision, intensity x copy bandwidth), and GB/s / copy GB/s for axpy. The targets of issue #5 are
printed as ratios at the end; nothing is asserted. Without CUDA it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import math
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--fma-size", type=int, default=4096)
    parser.add_argument("--gemv", type=int, default=8192)
    parser.add_argument("--axpy-n", type=int, default=1 << 24)
    args = parser.parse_args()
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
    from precisionlab.gemm.kernels.bench import run_all

    report = run_all(size=args.size, fma_size=args.fma_size, gemv_n=args.gemv, axpy_n=args.axpy_n)
    print(f"device: {report.device}   copy bandwidth (torch copy_, fp32): {report.copy_gbps:.1f} GB/s")
    header = f"{'kernel':<26} {'kind':<7} {'math':<5} {'shape':<16} {'ms':>9} {'TFLOP/s':>9} {'GB/s':>8} " \
             f"{'max rel err':>12} {'status':<18} {'fraction':>8}"
    print(header)
    print("-" * len(header))
    for r in report.rows:
        fraction = report.fraction_of_ceiling(r)
        status = "" if r.passed is None else ("PASS" if r.passed else
                                             "FAILED (expected)" if r.expected_to_fail else "FAIL")
        err = "" if r.max_rel_err is None else f"{r.max_rel_err:.3e}"
        print(f"{r.name:<26} {r.kind:<7} {r.precision:<5} {r.shape:<16} {r.ms:>9.4f} {r.tflops:>9.2f} "
              f"{r.gbps:>8.1f} {err:>12} {status:<18} {_fmt(fraction):>8}  {r.note}")
    rows = {r.name: r for r in report.rows}
    print()
    print("targets (issue #5):")
    _ratio("triton tl.dot bf16 / torch bf16 (>= 0.80)", rows, "triton_dot_bf16", "torch_bf16", "tflops")
    for dtype in ("fp32", "fp16", "bf16"):
        name = f"triton_axpy_{dtype}"
        if name in rows:
            print(f"  axpy {dtype} / copy bandwidth (>= 0.85): {rows[name].gbps / report.copy_gbps:.2f}")
    _ratio("torch._scaled_mm e4m3 / torch bf16 (>= 1.5)", rows, "torch_scaled_mm_e4m3", "torch_bf16", "tflops")
    _ratio("triton e4m3 block-scaled / torch bf16", rows, "triton_e4m3_block", "torch_bf16", "tflops")
    print()
    print("fp8 accumulation, K = 4096 (max rel err):")
    for label, value in report.accumulation:
        print(f"  {label:<40} {value:.3e}")
    return 0


def _fmt(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _ratio(label: str, rows: dict, num: str, den: str, attr: str) -> None:  # type: ignore[type-arg]
    if num in rows and den in rows:
        value = getattr(rows[num], attr) / getattr(rows[den], attr)
        print(f"  {label}: {_fmt(value)}")
    else:
        print(f"  {label}: not measured")


if __name__ == "__main__":
    sys.exit(main())
