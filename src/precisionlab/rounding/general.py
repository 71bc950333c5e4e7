"""The exact engine on a flat float array, every format, mode and policy: the reference path.

`round_flat` validates the policies, picks the compute domain and runs `engine`; the fast
paths of `dispatch` are built from it (tables and thresholds are its results on chosen inputs)
and every call they do not cover goes through it.

Output container: the input's own format when it holds every value of the target (float32
holds every format of 32 bits or fewer; float16 holds e5m2 but not bf16), otherwise the
narrowest of float32 and float64 that does.
"""

from __future__ import annotations

import numpy as np

from precisionlab.formats import FloatFormat, Format, IntFormat, Overflow, get_float_format
from precisionlab.rounding import engine
from precisionlab.rounding.modes import NanPolicy, Rounding, overflow_policy

FP32 = get_float_format("fp32")
FP64 = get_float_format("fp64")
_NUMPY_CONTAINERS: dict[np.dtype, FloatFormat] = {
    np.dtype(np.float16): get_float_format("fp16"), np.dtype(np.float32): FP32, np.dtype(np.float64): FP64}


def output_container(fmt: Format, container: FloatFormat) -> FloatFormat:
    for candidate in (container, FP32, FP64):
        if engine.holds_all_values(fmt, candidate):
            return candidate
    return FP64


def output_dtype(fmt: Format, dtype: np.dtype) -> np.dtype:
    """The numpy dtype round_to returns for a numpy array of dtype (float16/32/64)."""
    container = output_container(fmt, _NUMPY_CONTAINERS[np.dtype(dtype)])
    for numpy_dtype, candidate in _NUMPY_CONTAINERS.items():
        if candidate is container:
            return numpy_dtype
    raise ValueError(f"no numpy dtype for {container.name}")


def round_flat(flat: np.ndarray, fmt: Format, rounding: Rounding, overflow: str | Overflow | None,
               nan: NanPolicy, rng: np.random.Generator | None) -> tuple[np.ndarray, engine.Domain | None]:
    """Round a flat float array; returns the values (float32/float64) and the domain used."""
    if flat.dtype == np.float16:
        flat = flat.astype(np.float32)
    if isinstance(fmt, IntFormat):
        if overflow_policy(overflow, Overflow.SATURATE) not in (Overflow.SATURATE, Overflow.SATURATE_PROPAGATE):
            raise ValueError(f"{fmt.name} has neither inf nor NaN: integers always saturate")
        return engine.round_int_array(flat, fmt, rounding, nan, rng), None
    policy = overflow_policy(overflow, fmt.default_overflow)
    engine.check_policies(fmt, policy)
    dom = engine.compute_domain(fmt, flat.dtype)
    plan = engine.FloatPlan(fmt, dom, rounding, policy, nan)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN is exact; numpy only warns
        widened = flat.astype(dom.float_dtype, copy=False)
    return engine.round_float_array(widened, plan, rng), dom


def round_values(flat: np.ndarray, fmt: Format, rounding: Rounding, overflow: str | Overflow | None,
                 nan: NanPolicy) -> np.ndarray:
    """round_flat for a deterministic mode, in the output dtype of round_to."""
    values, _ = round_flat(flat, fmt, rounding, overflow, nan, None)
    return values.astype(output_dtype(fmt, flat.dtype), copy=False)
