"""The activation side of llama.cpp's CPU matmul: what a linear's input becomes before the dot products.

ggml's CPU backend converts the activations to the weight type's `vec_dot_type` (ggml-cpu.c type_traits_cpu)
and multiplies in integers or floats of that type. Each function returns the values the dot products see
(float32, exact), per row of `x` (..., K), blocks along the last axis:

    Q8_0   weights Q4_0, Q5_0, Q8_0   (x86 AVX2 quantize_row_q8_0, per 32)
           amax = max |x|,  d = amax / 127,  id = 127 / amax (0 when amax = 0),
           q = round-half-even(x * id) (_mm256_round_ps), stored d' = fp16(d);  value = d' * q (exact in fp32)
    Q8_1   weights Q4_1, Q5_1   (quantize_row_q8_1): Q8_0's d', q, and s = fp16(d * sum(q)) per block, which
           the dot product uses for the weight's min term (m_w * s instead of m_w * d' * sum(q)): `q8_1` returns
           the values and that per-block correction s - d' * sum(q)
    Q8_K   weights Q4_K, Q6_K   (quantize_row_q8_K_ref, per 256; x86 has no SIMD version)
           max = the element of largest |x| (the first if tied), iscale = -127 / max,
           q = min(127, nearest_int(iscale * x)), d = 1 / iscale (float32);  value = fp32(d * q)
    F16    weights F16: each activation rounded to fp16 (nearest even)
    BF16   weights BF16: rounded to bf16 (nearest even)
    F32    weights F32: unchanged

Rows must be whole blocks (K a multiple of 32, or of 256 for Q8_K), as in llama.cpp.
"""

from __future__ import annotations

import numpy as np

from precisionlab.quant.ggml import fp16, nearest_int

F32 = np.float32
BLOCKS = {"Q8_0": 32, "Q8_1": 32, "Q8_K": 256}


def _blocks(x: np.ndarray, size: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=F32)
    if x.shape[-1] % size:
        raise ValueError(f"llama.cpp quantizes activations in blocks of {size}; a row of {x.shape[-1]} is not whole "
                         "blocks")
    return x.reshape(-1, size)


def _q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, float32 d, fp16-rounded d) per 32-block, as quantize_row_q8_0 / q8_1 on AVX2."""
    b = _blocks(x, 32)
    amax = np.abs(b).max(axis=1)
    d = amax / F32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax != 0, F32(127) / np.where(amax != 0, amax, F32(1)), F32(0)).astype(F32)
    q = np.clip(np.rint(b * inverse[:, None]), -128, 127)
    return q.astype(F32), d.astype(F32), fp16(d)


def q8_0(x: np.ndarray) -> np.ndarray:
    q, _, stored = _q8(x)
    return (q * stored[:, None]).reshape(np.shape(x))


def q8_1(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, correction): the Q8_0 values, and per block s - d' * sum(q) with s = fp16(d * sum(q)), shape
    (..., K / 32) (what llama.cpp's Q4_1 / Q5_1 dot product adds, times the weight block's min)."""
    q, d, stored = _q8(x)
    total = q.sum(axis=1, dtype=np.float64).astype(F32)  # an integer sum: exact
    s = fp16((d * total).astype(F32))
    correction = (s.astype(np.float64) - stored.astype(np.float64) * total).astype(F32)
    shape = np.shape(x)
    return (q * stored[:, None]).reshape(shape), correction.reshape(*shape[:-1], shape[-1] // 32)


def q8_k(x: np.ndarray) -> np.ndarray:
    b = _blocks(x, 256)
    index = np.argmax(np.abs(b), axis=1)
    top = np.take_along_axis(b, index[:, None], axis=1)[:, 0]
    zero = top == 0
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, F32(0), F32(-127) / np.where(zero, F32(1), top)).astype(F32)
        d = np.where(zero, F32(0), F32(1) / np.where(zero, F32(1), iscale)).astype(F32)
    q = np.minimum(nearest_int(iscale[:, None] * b), 127).astype(F32)
    q[zero] = 0
    return (d[:, None] * q).astype(F32).reshape(np.shape(x))


def f16(x: np.ndarray) -> np.ndarray:
    return fp16(np.asarray(x, dtype=F32))


def bf16(x: np.ndarray) -> np.ndarray:
    from precisionlab.rounding import round_to

    return np.asarray(round_to(np.asarray(x, dtype=F32), "bf16"), dtype=F32)


def activations(x: np.ndarray, vec_dot_type: str) -> np.ndarray:
    """The values llama.cpp's dot products see for activations x under `vec_dot_type` (module docstring; Q8_1's
    correction term is `q8_1`'s second result)."""
    if vec_dot_type == "Q8_0":
        return q8_0(x)
    if vec_dot_type == "Q8_1":
        return q8_1(x)[0]
    if vec_dot_type == "Q8_K":
        return q8_k(x)
    if vec_dot_type == "F16":
        return f16(x)
    if vec_dot_type == "BF16":
        return bf16(x)
    if vec_dot_type == "F32":
        return np.asarray(x, dtype=F32)
    raise ValueError(f"unknown vec_dot_type {vec_dot_type!r}")
