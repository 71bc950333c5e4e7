"""CPU GEMM: real library kernels against the exact emulation, in one run.

    python3 benchmarks/bench_gemm.py [size]

Peers at the same square size (default 256):
  hardware   numpy fp32 matmul; torch fp32 / bf16 / fp16 matmul on the CPU (when torch is installed)
  emulation  precisionlab.gemm.emulated_matmul for fp32, fp16 (fp32 acc), fp16 (fp16 acc), e4m3 with a
             14-bit truncating accumulator and promotion every 128 (one vectorised step per K)
Prints ms, GFLOP/s, and each row's time as a multiple of numpy's fp32 matmul; never asserts times.
"""

from __future__ import annotations

import sys
import time

from precisionlab.gemm import emulated_matmul, random_inputs, standard_variants
from precisionlab.gemm.timing import matmul_timings


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    flops = 2.0 * size**3
    hardware = matmul_timings(size, size, size, budget_s=0.5)
    base = hardware[0].seconds
    print(f"square GEMM {size}^3 on this CPU (hardware = real kernels; emulation = exact per-step rounding)")
    print(f"{'kind':<10} {'kernel':<60} {'ms':>10} {'GFLOP/s':>10} {'x numpy fp32':>13}")
    for t in hardware:
        print(f"{'hardware':<10} {t.name:<60} {t.seconds * 1e3:>10.3f} {t.gflops:>10.2f} {t.seconds / base:>13.1f}")
    a, b = random_inputs(size, size, size)
    wanted = {"fp32", "fp16", "fp16_acc16", "e4m3_narrowacc_promoted"}
    for variant in (v for v in standard_variants() if v.name in wanted):
        start = time.perf_counter()
        emulated_matmul(a, b, variant)
        seconds = time.perf_counter() - start
        print(f"{'emulation':<10} {variant.describe():<60} {seconds * 1e3:>10.1f} {flops / seconds / 1e9:>10.3f} "
              f"{seconds / base:>13.0f}")


if __name__ == "__main__":
    main()
