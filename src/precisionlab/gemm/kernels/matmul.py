"""Triton matmul kernels: fp32-FMA tiles, tensor-core tl.dot, and block-scaled fp8.

All take A (M×K) and B (K×N) as torch tensors on one device and return C (M×N) fp32.
Launch wrappers check shapes and dtypes, allocate C and pick the grid.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

SCALE_BLOCK = 128
"""Block edge of the fp8 block scales: A has one scale per row per 128 of K, B one per 128×128."""


@triton.jit
def _fma_kernel(  # type: ignore[no-untyped-def]
        a_ptr, b_ptr, c_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C tile += a_k ⊗ b_k for k = 0..K-1: one fp32 rank-1 update (FMA per output) per k, in order."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = rm < M
    mask_n = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        for kk in tl.static_range(BLOCK_K):
            k = k0 + kk
            a = tl.load(a_ptr + rm * stride_am + k * stride_ak, mask=mask_m & (rm * 0 + k < K),
                        other=0.0).to(tl.float32)
            b = tl.load(b_ptr + k * stride_bk + rn * stride_bn, mask=mask_n & (rn * 0 + k < K),
                        other=0.0).to(tl.float32)
            acc += a[:, None] * b[None, :]
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _dot_kernel(  # type: ignore[no-untyped-def]
        a_ptr, b_ptr, c_ptr, scale_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        ACC_FP16: tl.constexpr, ACC_DTYPE: tl.constexpr, HAS_SCALE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
        MAX_IMPRECISE: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped tile order (L2 reuse), tl.dot per BLOCK_K step, fp32 or fp16 accumulator, optional
    per-tensor scale product applied to the fp32 output."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_size
    pid_n = (pid % group) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k0 < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k0 < K) & (rn[None, :] < N), other=0.0)
        if ACC_FP16:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        else:
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, max_num_imprecise_acc=MAX_IMPRECISE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(tl.float32)
    if HAS_SCALE:
        c = c * tl.load(scale_ptr)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _fp8_block_kernel(  # type: ignore[no-untyped-def]
        a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        stride_asm, stride_ask, stride_bsk, stride_bsn,
        SCALE_BLOCK_K: tl.constexpr, MAX_IMPRECISE: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Per 128-block of K: partial = tl.dot(a, b) (tensor core, fresh accumulator), then promotion on
    the CUDA cores: acc += partial · s_a[row] · s_b[block]  (fp32). BLOCK_N divides 128."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, SCALE_BLOCK_K)
    mask_m = rm < M
    mask_n = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    n_block = (pid_n * BLOCK_N) // SCALE_BLOCK_K
    for k0 in range(0, K, SCALE_BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak,
                    mask=mask_m[:, None] & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k0 + rk)[:, None] < K) & mask_n[None, :], other=0.0)
        partial = tl.dot(a, b, max_num_imprecise_acc=MAX_IMPRECISE)
        k_block = k0 // SCALE_BLOCK_K
        sa = tl.load(as_ptr + rm * stride_asm + k_block * stride_ask, mask=mask_m, other=0.0)
        sb = tl.load(bs_ptr + k_block * stride_bsk + n_block * stride_bsn)
        acc += partial * (sa[:, None] * sb)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def _check(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need A (M×K) and B (K×N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"A and B are on different devices: {a.device} and {b.device}")
    return a.shape[0], b.shape[1], a.shape[1]


def matmul_fma(a: torch.Tensor, b: torch.Tensor, block_m: int = 64, block_n: int = 64,
               block_k: int = 8) -> torch.Tensor:
    """C = A·B in fp32 FMAs, operands widened from their storage dtype (no tensor cores)."""
    m, n, k = _check(a, b)
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _fma_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c


def matmul_dot(a: torch.Tensor, b: torch.Tensor, acc_fp16: bool = False, scale: torch.Tensor | None = None,
               input_precision: str = "ieee", max_num_imprecise_acc: int | None = None,
               block_m: int = 128, block_n: int = 128, block_k: int = 64, group_m: int = 8,
               **launch: Any) -> torch.Tensor:
    """C = A·B with tl.dot (tensor cores). acc_fp16: fp16 accumulator (fp16 inputs only).
    scale: a one-element fp32 tensor multiplied into C (fp8 per-tensor scales s_a·s_b).
    input_precision: 'ieee' or 'tf32' for fp32 inputs. `launch`: num_warps / num_stages."""
    m, n, k = _check(a, b)
    if acc_fp16 and a.dtype != torch.float16:
        raise ValueError("an fp16 accumulator needs fp16 inputs")
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    scale_arg = scale if scale is not None else c
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _dot_kernel[grid](a, b, c, scale_arg, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1), ACC_FP16=acc_fp16,
                      ACC_DTYPE=tl.float16 if acc_fp16 else tl.float32, HAS_SCALE=scale is not None,
                      INPUT_PRECISION=input_precision, MAX_IMPRECISE=max_num_imprecise_acc,
                      BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, **launch)
    return c


def matmul_fp8_blockscaled(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                           max_num_imprecise_acc: int | None = None, block_m: int = 128, block_n: int = 128,
                           **launch: Any) -> torch.Tensor:
    """C = Σ_blocks (A_blk·B_blk)·s_a·s_b with fp32 promotion per 128 of K.

    a: (M×K) fp8; a_scale: (M, ceil(K/128)) fp32; b: (K×N) fp8; b_scale: (ceil(K/128), ceil(N/128)) fp32.
    """
    m, n, k = _check(a, b)
    blocks_k, blocks_n = triton.cdiv(k, SCALE_BLOCK), triton.cdiv(n, SCALE_BLOCK)
    if tuple(a_scale.shape) != (m, blocks_k) or tuple(b_scale.shape) != (blocks_k, blocks_n):
        raise ValueError(f"scales must be ({m}, {blocks_k}) and ({blocks_k}, {blocks_n}), got "
                         f"{tuple(a_scale.shape)} and {tuple(b_scale.shape)}")
    if SCALE_BLOCK % block_n:
        raise ValueError(f"block_n must divide {SCALE_BLOCK}, got {block_n}")
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _fp8_block_kernel[grid](a, b, c, a_scale, b_scale, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0),
                            b_scale.stride(1), SCALE_BLOCK_K=SCALE_BLOCK, MAX_IMPRECISE=max_num_imprecise_acc,
                            BLOCK_M=block_m, BLOCK_N=block_n, **launch)
    return c
