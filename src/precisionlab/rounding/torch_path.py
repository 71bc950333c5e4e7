"""Fast path for torch tensors: torch's own cast where it is provably the same rounding.

torch's casts from float32 / bfloat16 / float16 to float8_e4m3fn, float8_e5m2, the fnuz
pair, bfloat16 and float16 round once, to nearest even, exactly as the engine does for
every value inside the format's range (tests/test_rounding_torch.py holds this path against
the numpy engine and the exact reference on every member and midpoint, one input ulp either
side). The torch dtype is chosen by the format's defining fields, never by its name.
The casts differ only in overflow policy (torch 2.13's CPU e4m3fn cast saturates, inf
included), so a value at or beyond the overflow threshold is patched to the policy's
result. float64 tensors never take this path: torch casts them to fp8 through float32,
which rounds twice.

The overflow threshold under nearest-even is max_finite + ulp/2 at the top binade;
the tie itself overflows when max_finite's mantissa is odd (IEEE and FNUZ formats) and
stays at max_finite when it is even (FN formats, whose all-ones mantissa is NaN).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from precisionlab.formats import Encoding, FloatFormat, Format, Overflow, get_float_format
from precisionlab.rounding.modes import Rounding

_TORCH_BY_REGISTRY_NAME = {
    "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
}
"""The registered formats torch has a dtype for, by the registry's name."""
_FAST_INPUTS = ("torch.float32", "torch.bfloat16", "torch.float16")
POLICIES = (Overflow.INF, Overflow.NAN, Overflow.SATURATE)
"""The overflow policies round_tensor patches torch's cast to; any other takes the exact engine."""


@lru_cache(maxsize=1)
def _dtypes_by_fields() -> dict[tuple[Any, ...], str]:
    return {get_float_format(name).defining_fields: dtype for name, dtype in _TORCH_BY_REGISTRY_NAME.items()}


def torch_dtype_name(fmt: FloatFormat) -> str | None:
    """The torch dtype with fmt's values, chosen by the defining fields (E, M, bias, encoding,
    signedness, subnormals), never by name: FloatFormat("e4m3", 4, 3, 8, FNUZ) is float8_e4m3fnuz."""
    return _dtypes_by_fields().get(fmt.defining_fields)


def _torch_overflow_behaviour(fmt: FloatFormat) -> Overflow:
    """What torch's cast does with values past the range (measured in the tests)."""
    if fmt.encoding is Encoding.FN:
        return Overflow.SATURATE
    if fmt.encoding is Encoding.FNUZ:
        return Overflow.NAN
    return Overflow.INF


def overflow_threshold(fmt: FloatFormat) -> tuple[float, bool]:
    """(threshold, inclusive): |x| >= threshold (inclusive) or > threshold overflows."""
    half_top_ulp = math.ldexp(1.0, fmt.emax - fmt.man_bits - 1)
    max_mantissa_is_odd = fmt.max_mantissa_at_emax % 2 == 1
    return fmt.max_finite + half_top_ulp, max_mantissa_is_odd


def applies(x: Any, fmt: Format, rounding: Rounding) -> bool:
    return (
        isinstance(fmt, FloatFormat)
        and rounding is Rounding.NEAREST_EVEN
        and torch_dtype_name(fmt) is not None
        and str(x.dtype) in _FAST_INPUTS
        and x.device.type == "cpu"
    )


def round_tensor(x: Any, fmt: FloatFormat, overflow: Overflow, out_dtype: Any) -> Any:
    import torch

    dtype_name = torch_dtype_name(fmt)
    if dtype_name is None:
        raise ValueError(f"torch has no dtype for {fmt.name}")
    target = getattr(torch, dtype_name)
    y = x.to(target).to(out_dtype)
    if overflow is _torch_overflow_behaviour(fmt):
        return y
    threshold, inclusive = overflow_threshold(fmt)
    if x.numel() == 0:
        return y
    low, high = torch.aminmax(x)  # one read-only pass; a NaN anywhere makes both NaN
    peak = max(-float(low), float(high))
    if math.isnan(float(low)) or math.isnan(float(high)):
        peak = math.inf  # NaN present: patch element by element
    if peak < threshold or (not inclusive and peak == threshold):
        return y  # nothing overflows (a NaN peak fails both tests and takes the exact patch below)
    # In float32, which holds every threshold exactly: a tensor compared with a Python float
    # converts the float to the tensor's dtype (65300 is 65280 in bfloat16).
    magnitude = x.abs().to(torch.float32)
    over = magnitude >= threshold if inclusive else magnitude > threshold
    if overflow is Overflow.SATURATE:
        replacement = torch.full_like(y, fmt.max_finite)
    else:
        replacement = torch.full_like(y, math.inf if overflow is Overflow.INF else math.nan)
    return torch.where(over, replacement.copysign(x.to(out_dtype)), y)


def straight_through(x: Any, rounded: Any) -> Any:
    """rounded, attached to x's graph with the identity gradient: d out / d x = 1 (as x's dtype).

    The forward value is rounded itself, bit for bit. The familiar x + (rounded - x).detach()
    is not: it turns -0 into +0, inf into NaN (inf - inf) and a saturated 1e30 into 0.
    """
    return _straight_through_function().apply(x, rounded)


@lru_cache(maxsize=1)
def _straight_through_function() -> Any:
    import torch

    class StraightThrough(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, rounded: Any) -> Any:
            ctx.input_dtype = x.dtype
            return rounded.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad.to(ctx.input_dtype), None

    return StraightThrough

