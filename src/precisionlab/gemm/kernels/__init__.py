"""Triton GPU kernels for the GEMM and bandwidth labs (imported lazily; needs torch and triton).

- matmul.py: `matmul_fma` (tiled, widens operands to fp32 and does fp32 FMAs on the CUDA
  cores, no tensor cores), `matmul_dot` (tl.dot: tensor cores; fp32 or fp16 accumulator;
  fp8 inputs with per-tensor scales and an optional `max_num_imprecise_acc`),
  `matmul_fp8_blockscaled` (e4m3 with 1×128 / 128×128 scales, fp32 promotion every 128 of K).
- axpy.py: `axpy` (y = a·x + y, fp32 math, any storage dtype).
- bench.py: builds, checks and times every variant on a CUDA device (used by the lab's GPU
  backend and benchmarks/gpu_lab.py).

Importing this package imports nothing heavy; its submodules import torch and triton.
Correctness is tested on the CPU under TRITON_INTERPRET=1 for fp32, fp16, bf16 and fp8
operands (the tests correct the interpreter's bf16 dot and fp32 → bf16 cast; see
tests/test_kernels_triton.py), and again on a CUDA device by the gpu-marked test.
"""
