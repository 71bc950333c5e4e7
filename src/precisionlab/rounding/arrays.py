"""Array adapters: numpy arrays, numpy / Python scalars and torch tensors in, same kind out.

torch is never imported here: a tensor is recognised by its type's module, and only
its own methods are used (detach, cpu, numpy, view, to), so importing precisionlab
does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.formats import FloatFormat, get_float_format
from precisionlab.rounding.bf16 import bf16_to_float32

_NUMPY_FLOATS: dict[np.dtype, str] = {
    np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64",
}


def is_torch_tensor(x: object) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "dtype") and hasattr(x, "device")


@dataclass
class Unpacked:
    """A float input as a flat numpy array, with what is needed to rebuild its kind."""

    flat: np.ndarray  # float16, float32 or float64, contiguous, 1-D
    shape: tuple[int, ...]
    container: FloatFormat  # the input's own format (fp16/bf16/fp32/fp64)
    rebuild: Callable[[np.ndarray, FloatFormat], Any]
    rounded_to_odd: bool = False
    """True for a Python int wider than float64's 53 bits: flat holds it rounded to odd."""


FLOAT64_PRECISION = 53
ODD_SAFE_PRECISION = FLOAT64_PRECISION - 2
"""Widest target (significand bits) that a value rounded to odd at 53 bits still rounds exactly."""


def int_to_float64_odd(n: int) -> tuple[float, bool]:
    """(n rounded to float64 by round-to-odd, whether it was inexact).

    Round-to-odd keeps the 53 leading bits and, when any bit below them is set, forces the
    last kept bit to 1. The result never equals a member or a midpoint of a format of at most
    51 significant bits, and lies on the same side of each as n, so rounding it once more to
    such a format in any deterministic mode gives the single rounding of n (Boldo and
    Melquiond, 2008). OverflowError beyond float64's range.
    """
    shift = abs(n).bit_length() - FLOAT64_PRECISION
    if shift <= 0:
        return float(n), False
    top = abs(n) >> shift
    inexact = top << shift != abs(n)
    magnitude = math.ldexp(float(top | 1 if inexact else top), shift)
    return (-magnitude if n < 0 else magnitude), inexact


def unpack(x: object, what: str = "input") -> Unpacked:
    """Accept float arrays, tensors and scalars; reject integer, bool and complex data."""
    if is_torch_tensor(x):
        return _unpack_torch(x, what)
    if isinstance(x, np.ndarray):
        _check_dtype(x.dtype, what)
        flat = np.ascontiguousarray(x).reshape(-1)
        return Unpacked(flat, x.shape, get_float_format(_NUMPY_FLOATS[x.dtype]), _rebuild_numpy(x.shape))
    if isinstance(x, np.generic):
        _check_dtype(x.dtype, what)
        arr = np.asarray(x).reshape(-1)
        container = get_float_format(_NUMPY_FLOATS[x.dtype])
        return Unpacked(arr, (), container, lambda out, fmt: _to_dtype(out, fmt).reshape(())[()])
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what} must be a float array, tensor or number, got {type(x).__name__}")
    try:
        value, odd = int_to_float64_odd(x) if isinstance(x, int) else (float(x), False)
    except OverflowError:
        raise ValueError(f"{what} is an integer of {int(x).bit_length()} bits, too large for float64") from None
    arr = np.array([value], dtype=np.float64)
    return Unpacked(arr, (), get_float_format("fp64"), lambda out, fmt: float(out.reshape(-1)[0]), odd)


def _check_dtype(dtype: np.dtype, what: str) -> None:
    if dtype not in _NUMPY_FLOATS:
        raise TypeError(f"{what} must hold float16, float32 or float64 values, got dtype {dtype}")


def _to_dtype(out: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    return out.astype(_numpy_dtype(fmt), copy=False)


def _numpy_dtype(fmt: FloatFormat) -> np.dtype:
    for dtype, name in _NUMPY_FLOATS.items():
        if name == fmt.name:
            return dtype
    raise ValueError(f"no numpy dtype for {fmt.name}")


def _rebuild_numpy(shape: tuple[int, ...]) -> Callable[[np.ndarray, FloatFormat], np.ndarray]:
    def rebuild(out: np.ndarray, fmt: FloatFormat) -> np.ndarray:
        return _to_dtype(out, fmt).reshape(shape)

    return rebuild


TORCH_FORMATS = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float64": "fp64"}
"""str(tensor.dtype) of the float tensors round_to takes -> the registry name of that container format."""


def _unpack_torch(t: Any, what: str) -> Unpacked:
    name = TORCH_FORMATS.get(str(t.dtype))
    if name is None:
        raise TypeError(f"{what} must be a float16, bfloat16, float32 or float64 tensor, got {t.dtype}")
    import torch  # the caller already holds a tensor, so torch is loaded

    device, shape = t.device, tuple(t.shape)
    host = t.detach().contiguous().cpu().reshape(-1)
    flat = bf16_to_float32(host.view(torch.int16).numpy().view(np.uint16)) if name == "bf16" else host.numpy()

    def rebuild(out: np.ndarray, fmt: FloatFormat) -> Any:
        if fmt.name == "bf16":
            as32 = out.astype(np.float32, copy=False)
            top = (as32.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(np.int16)
            tensor = torch.from_numpy(top).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(np.ascontiguousarray(_to_dtype(out, fmt)))
        return tensor.reshape(shape).to(device)

    return Unpacked(flat, shape, get_float_format(name), rebuild)
