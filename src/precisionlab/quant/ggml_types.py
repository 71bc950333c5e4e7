"""Which GGML tensor type holds a precisionlab scheme exactly (the table the GGUF export, its verification and the
llama.cpp runtime share), and a float array as that type's values.

A scheme maps onto a GGML type when the type's stored fields hold its stored values one for one, so that
llama.cpp's dequantizer reads back exactly `QuantizedTensor.dequantize()`:

    gguf_q8_0, gguf_q4_0, gguf_q4_1, gguf_q5_0, gguf_q5_1, gguf_q4_k, gguf_q6_k    their own types
    int8:g32                         Q8_0   (codes -127..127 or -128..127, one fp16 scale per 32)
    int4:g32, int4:g32:range=...     Q4_0   (codes within -8..7, one fp16 scale per 32)
    int5:g32, int5:g32:range=...     Q5_0   (codes within -16..15)
    uint4:g32:min=fp16               Q4_1   (codes 0..15, an fp16 scale and an fp16 min per 32)
    uint5:g32:min=fp16               Q5_1

with groups along the last axis (a Linear's inputs: ggml's ne[0]), the default fp16 scale, no outlier rows.
Anything else is refused with the nearest type that exists (`ggml_type` raises ValueError): ggml has no
group of 64 or 128, no per-row or per-tensor scale, no fp32 / bf16 / ue8m0 block scale, no integer zero point
(its Q4_1 / Q5_1 store a float min), no fp8 / fp4 / nf4 elements among these types.

Float tensors are F32, F16 or BF16 (`float_bytes`), refused when the type would change a value. The bytes of a
quantized tensor under its type are the GGUF writer's (interop.writers.gguf_tensors.quantized_rows).

`VEC_DOT_TYPE` is what llama.cpp's CPU matmul quantizes the activations to for each weight type
(ggml-cpu.c `type_traits_cpu[...].vec_dot_type`): Q8_0 for Q4_0 / Q5_0 / Q8_0, Q8_1 for Q4_1 / Q5_1, Q8_K for
the K-quants; F16 and BF16 weights take F16 / BF16 activations, F32 weights F32 ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from precisionlab.quant.scheme import GGUF_PRESETS, PRESETS, Granularity, Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor

FLOAT_TYPES = ("F32", "F16", "BF16")
QUANTIZED_TYPES = tuple(s.ggml for s in GGUF_PRESETS.values() if s.ggml)
PRESET_OF = {s.ggml: name for name, s in GGUF_PRESETS.items() if s.ggml}
"""GGML type -> its gguf_* preset."""

VEC_DOT_TYPE = {"Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1",
                "Q4_K": "Q8_K", "Q6_K": "Q8_K", "F16": "F16", "BF16": "BF16", "F32": "F32"}

_ONE_LEVEL = {("int8", False): "Q8_0", ("int4", False): "Q4_0", ("int5", False): "Q5_0",
              ("uint4", True): "Q4_1", ("uint5", True): "Q5_1"}
"""(element, has a float min) -> the 32-element type whose fields hold it."""


def ggml_type(scheme: str | Scheme, ndim: int = 2) -> str:
    """The GGML type that holds `scheme` exactly (module docstring); ValueError naming the nearest otherwise."""
    s = parse_scheme(scheme)
    if s.ggml is not None:
        _check_axis(s, ndim)
        return s.ggml
    found = _one_level(s)
    if found is not None:
        _check_axis(s, ndim)
        return found
    nearest = nearest_type(s)
    raise ValueError(f"{s} has no GGML type: {_why_not(s)}; the nearest that exists is {nearest} "
                     f"({PRESET_OF[nearest]})")


def _check_axis(s: Scheme, ndim: int) -> None:
    if s.axis not in (-1, ndim - 1):
        raise ValueError(f"{s}: GGML blocks run along a row's contiguous axis (the inputs); axis={s.axis} groups "
                         "another one")


def _one_level(s: Scheme) -> str | None:
    if s.granularity is not Granularity.GROUP or s.group != 32 or s.outliers or s.tensor_scale or s.is_mx:
        return None
    if s.scale != "fp16" or s.is_two_level:
        return None
    if s.has_zero_point:
        return None
    if s.has_min and s.min_format != "fp16":
        return None
    if not s.has_min and not s.symmetric:
        return None
    return _ONE_LEVEL.get((s.element, s.has_min))


def _why_not(s: Scheme) -> str:
    if s.element not in ("int8", "int4", "int5", "uint4", "uint5", "int6"):
        return f"ggml's types hold integer codes, not {s.element}"
    if s.has_zero_point:
        return "ggml stores a float block min (Q4_1, Q5_1), not an integer zero point"
    if s.outliers:
        return "ggml keeps no fp16 outlier rows inside a quantized tensor"
    if s.granularity is not Granularity.GROUP:
        return f"ggml's scales are per block of 32 (or 256), not per {s.granularity.value}"
    if s.group != 32:
        return f"ggml's blocks are 32 elements (K-quants: 256 in sub-blocks), not {s.group}"
    if s.scale != "fp16":
        return f"ggml stores fp16 block scales, not {s.scale}"
    return "its layout is none of ggml's block structs"


def nearest_type(s: Scheme) -> str:
    """The GGML type closest to `s`: same code width where one exists (a float min for unsigned / asym)."""
    bits = {"int8": 8, "uint8": 8, "int6": 6, "uint6": 6, "int5": 5, "uint5": 5, "int4": 4, "uint4": 4, "nf4": 4,
            "e2m1": 4, "e3m2": 6, "e2m3": 6, "int2": 4, "uint2": 4}.get(s.element, 8)
    asym = not s.symmetric
    if bits >= 8:
        return "Q8_0"
    if bits == 6:
        return "Q6_K"
    if bits == 5:
        return "Q5_1" if asym else "Q5_0"
    return "Q4_1" if asym else "Q4_0"


def as_preset(q: QuantizedTensor) -> QuantizedTensor:
    """The same stored values under the gguf_* preset of their GGML type (the one-level spellings share its
    element codes, scales and mins field for field)."""
    kind = ggml_type(q.scheme, len(q.shape))
    if q.scheme.ggml is not None:
        return q
    preset = dataclasses.replace(PRESETS[PRESET_OF[kind]], axis=q.scheme.axis)
    return dataclasses.replace(q, scheme=preset)


def float_bytes(values: np.ndarray, kind: str) -> np.ndarray:
    """float32 values as an F32 / F16 / BF16 array (BF16 as its uint16 bit patterns); ValueError when the type
    would change a value (a float layer is written as the evaluation used it, or not at all)."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    back: np.ndarray | None
    if kind == "F32":
        return x
    if kind == "F16":
        with np.errstate(over="ignore"):
            out = x.astype(np.float16)
        back = out.astype(np.float32)
    elif kind == "BF16":  # exact when the low 16 bits are zero: the upper half is the bf16 pattern
        bits = x.view(np.uint32)
        out = (bits >> np.uint32(16)).astype(np.uint16)
        back = None if np.any((bits & np.uint32(0xFFFF)) != 0) else x
    else:
        raise ValueError(f"unknown GGML float type {kind!r}; choose one of {', '.join(FLOAT_TYPES)}")
    if back is None or not np.array_equal(back.view(np.uint32), x.view(np.uint32)):
        raise ValueError(f"{kind} would change values of this tensor (the evaluation used its float32 values)")
    return out


def narrowest_float(values: np.ndarray) -> str:
    """BF16 or F16 when that type holds every value exactly (BF16 first), else F32."""
    for kind in ("BF16", "F16"):
        try:
            float_bytes(values, kind)
        except ValueError:
            continue
        return kind
    return "F32"
