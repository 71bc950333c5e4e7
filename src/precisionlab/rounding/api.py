"""Public rounding API: round_to, encode, decode, ulp, neighbours.

Output dtype of round_to: the input's own dtype when it holds every value of the
target format (float32 holds every format of 32 bits or fewer; float16 holds e5m2
but not bf16), otherwise the narrowest of float32 and float64 that does. Type and
device are kept: numpy in, numpy out; tensor in, tensor out on the same device;
Python float in, Python float out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from precisionlab.formats import FloatFormat, Format, IntFormat, Overflow, get_float_format, get_format
from precisionlab.rounding import codes as _codes
from precisionlab.rounding import dispatch, engine
from precisionlab.rounding.arrays import (
    FLOAT64_PRECISION,
    ODD_SAFE_PRECISION,
    TORCH_FORMATS,
    Unpacked,
    is_torch_tensor,
    unpack,
)
from precisionlab.rounding.general import output_container, round_flat
from precisionlab.rounding.modes import NanPolicy, Rounding, overflow_policy, parse_nan, parse_rounding

RngLike = np.random.Generator | int | None

_FLOAT64 = np.dtype(np.float64)
_NDARRAY = np.ndarray
_find_kernel = dispatch.find


def _torch_float32() -> Any:
    import torch

    return torch.float32


def _rng(rng: RngLike, rounding: Rounding) -> np.random.Generator | None:
    if rounding is not Rounding.STOCHASTIC:
        return None
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator, an int seed or None, got {type(rng).__name__}")


def round_to(x: Any, fmt: str | Format, rounding: str | Rounding = "nearest_even",
             overflow: str | Overflow | None = None, rng: RngLike = None, nan: str | NanPolicy = "raise", *,
             straight_through: bool = False) -> Any:
    """Round every element of x once, exactly, to the nearest member of fmt under `rounding`.

    rounding: nearest_even, nearest_away, toward_zero, toward_positive, toward_negative,
    to_odd, stochastic (or an alias: rne, rna, rtz, rp, rm, rto, sr, or the P3109 names
    NearestTiesToEven, TowardPositive, ToOdd, ...).

    overflow: None for the format's default (inf if it has inf, else NaN if it has NaN,
    else saturate), or 'inf', 'nan', 'saturate' (everything, ±inf included, clamps to
    ±max_finite), 'saturate_propagate' (finite values clamp, ±inf stays where the format has
    inf); P3109's names SatFinite, SatPropagate and SatNone / OvfInf (the default) are accepted.
    nan: 'raise' (default) or 'zero', for formats that have no NaN. rng: a numpy Generator or
    seed for stochastic rounding.

    Autograd: a tensor result is detached (requires_grad False, no graph), on every path.
    straight_through=True (tensors only) returns the same values attached to x's graph with
    the identity gradient, d round(x) / dx = 1, for quantization-aware experiments; the
    output dtype is the same as without it and the gradient reaching x has x's dtype.
    """
    kind = x.__class__
    if kind is _NDARRAY and not straight_through:  # the fast path (rounding.dispatch), kept lean: it is
        kernel = _find_kernel(fmt, x.dtype, rounding, overflow, nan)  # most of a small call's time
        if kernel is not None:
            return kernel(x)
    elif kind is float and not straight_through:
        kernel = _find_kernel(fmt, _FLOAT64, rounding, overflow, nan)
        if kernel is not None:
            return float(kernel(np.array([x]))[0])
    target = get_format(fmt)
    mode = parse_rounding(rounding)
    if is_torch_tensor(x):
        rounded = _round_tensor(x.detach(), target, mode, overflow, rng, nan)
        if not straight_through:
            return rounded
        from precisionlab.rounding import torch_path

        return torch_path.straight_through(x, rounded)
    if straight_through:
        raise TypeError(f"straight_through=True needs a torch tensor (gradients), got {type(x).__name__}")
    result = _round_host(x, target, mode, overflow, rng, nan)
    if kind is np.ndarray or kind is float:  # accepted: later calls with these arguments take the fast path
        dtype = x.dtype if kind is np.ndarray else _FLOAT64
        dispatch.remember(fmt, dtype, rounding, overflow, nan, target, mode, parse_nan(nan))
    return result


def _round_tensor(x: Any, target: Format, mode: Rounding, overflow: str | Overflow | None, rng: RngLike,
                  nan: str | NanPolicy) -> Any:
    """round_to for a tensor that carries no graph: torch's own cast where it is the same rounding."""
    from precisionlab.rounding import torch_path

    policy = overflow_policy(overflow, target.default_overflow) if isinstance(target, FloatFormat) else None
    if torch_path.applies(x, target, mode) and policy in torch_path.POLICIES:
        assert isinstance(target, FloatFormat) and policy is not None
        engine.check_policies(target, policy)
        container = get_float_format(TORCH_FORMATS[str(x.dtype)])
        out_dtype = x.dtype if output_container(target, container) is container else _torch_float32()
        return torch_path.round_tensor(x, target, policy, out_dtype)
    return _round_host(x, target, mode, overflow, rng, nan)


def _round_host(x: Any, target: Format, mode: Rounding, overflow: str | Overflow | None, rng: RngLike,
                nan: str | NanPolicy) -> Any:
    """round_to through the numpy engine (tensors are copied to the host and back)."""
    src = _wide_int(unpack(x), x, target, mode)
    values, _ = round_flat(src.flat, target, mode, overflow, parse_nan(nan), _rng(rng, mode))
    return src.rebuild(values, output_container(target, src.container))


def _wide_int(src: Unpacked, x: Any, target: Format, mode: Rounding, action: str = "") -> Unpacked:
    """The input to round, given that a Python int wider than 53 bits arrives rounded to odd
    (arrays.int_to_float64_odd). That is exact for deterministic rounding to targets of at most 51
    significant bits; for 53 (fp64) and nearest-even, Python's own float(x) is the single rounding;
    anything else is a ValueError rather than a silent second rounding."""
    if not src.rounded_to_odd or not isinstance(target, FloatFormat):
        return src
    precision = target.man_bits + 1
    if mode is not Rounding.STOCHASTIC and precision <= ODD_SAFE_PRECISION:
        return src
    if mode is Rounding.NEAREST_EVEN and precision == FLOAT64_PRECISION:
        return unpack(float(x))
    action = action or f"rounding it exactly to {target.name} with {mode.value}"
    raise ValueError(f"the integer {x} has more significant bits than float64 holds; {action} is not supported "
                     "(round it to float64 first: float(x))")


def encode(x: Any, fmt: str | Format, rounding: str | Rounding = "nearest_even",
           overflow: str | Overflow | None = None, rng: RngLike = None, nan: str | NanPolicy = "raise",
           nan_code: str = "canonical") -> Any:
    """Round x to fmt and return its codes: uint8 for formats of <= 8 bits, uint16 up to 16,
    uint32 up to 32 (tf32: its 19-bit code in the low bits), uint64 above.

    nan_code: which code a NaN result gets. 'canonical' (default): the quiet NaN with the
    value's sign (e5m2 0x7E, fp16 0x7E00, bf16 0x7FC0, e4m3 0x7F/0xFF); 'all_ones': the
    all-ones code 2^bits - 1 where that is a NaN (gfloat's choice: e5m2 0xFF, fp16 0xFFFF). Formats
    with a single NaN (fnuz, P3109: 0x80 signed, 0xFF unsigned) write it either way."""
    target = get_format(fmt)
    mode = parse_rounding(rounding)
    _codes.check_nan_code(nan_code)
    src = _wide_int(unpack(x), x, target, mode)
    values, dom = round_flat(src.flat, target, mode, overflow, parse_nan(nan), _rng(rng, mode))
    if isinstance(target, IntFormat):
        flat_codes = _codes.encode_int_values(values, target)
    else:
        assert dom is not None
        flat_codes = _codes.encode_float_values(values, target, dom, nan_code)
    return _wrap_codes(flat_codes.reshape(src.shape), x)


def _wrap_codes(result: np.ndarray, like: Any) -> Any:
    if is_torch_tensor(like):
        import torch

        return torch.from_numpy(np.ascontiguousarray(result)).to(like.device)
    if isinstance(like, np.ndarray):
        return result
    return result.reshape(()).item() if isinstance(like, (int, float)) else result.reshape(())[()]


def decode(codes: Any, fmt: str | Format) -> Any:
    """Values of codes (unsigned or signed integers below 2^bits): float32 when it holds every
    value of the format, else float64. Tensors come back as tensors on their device."""
    target = get_format(fmt)
    host, back = _integer_input(codes)
    if host.size and (int(host.min()) < 0 or int(host.max()) >= target.code_count):
        raise ValueError(f"codes of {target.name} lie in 0..{target.code_count - 1}")
    flat = host.reshape(-1)
    if isinstance(target, IntFormat):
        values = _codes.decode_int_codes(flat, target)
    else:
        values = _codes.decode_float(flat, target)
    return back(values.reshape(host.shape))


def _integer_input(codes: Any) -> tuple[np.ndarray, Any]:
    if is_torch_tensor(codes):
        if codes.dtype.is_floating_point or codes.dtype.is_complex:
            raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
        import torch

        device = codes.device
        host = codes.detach().cpu().to(torch.int64).numpy()
        return host, lambda v: torch.from_numpy(np.ascontiguousarray(v)).to(device)
    if isinstance(codes, bool):
        raise TypeError("codes must be integers, got bool")
    if isinstance(codes, (int, np.integer)):
        if not 0 <= int(codes) < 1 << 64:
            raise ValueError(f"code {codes} is negative or wider than 64 bits")
        return np.asarray(int(codes), dtype=np.uint64), lambda v: v.reshape(()).item()
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {arr.dtype}")
    return arr.astype(np.uint64 if arr.dtype.kind == "u" else np.int64), lambda v: v


def ulp(x: Any, fmt: str | Format) -> Any:
    """Grid spacing of fmt in the binade holding |x|: 2^(max(floor(log2|x|), emin) - M).

    ulp(1) is fmt.eps; below the normal range it is the subnormal quantum; NaN for
    inf/NaN input; 1 for integer formats.
    """
    target = get_format(fmt)
    src = unpack(x)
    a = np.abs(src.flat.astype(np.float64))
    if isinstance(target, IntFormat):
        spacing = np.where(np.isfinite(a), 1.0, np.nan)
    else:
        with np.errstate(divide="ignore"):
            exponent = np.frexp(a)[1].astype(np.int64) - 1
        exponent = np.maximum(np.where(a == 0, target.emin, exponent), target.emin)
        spacing = np.ldexp(1.0, exponent - target.man_bits)
        spacing[~np.isfinite(a)] = np.nan
    return src.rebuild(spacing, output_container(target, src.container))


def neighbours(x: float, fmt: str | Format) -> tuple[float, float]:
    """(largest member <= x, smallest member >= x) of fmt; both x when x is a member
    (±inf included, where the format has inf). Beyond the largest finite value the outer
    neighbour is ±inf where the format has inf and NaN where it has none; below an unsigned
    format's smallest value (negatives, and below 2^-127 in ue8m0, which has no zero) the
    lower one is NaN."""
    target = get_format(fmt)
    value = _python_float(x, target)
    if math.isnan(value):
        return math.nan, math.nan
    if isinstance(target, IntFormat):  # no inf: past either end the outer neighbour is NaN
        if value > target.max_value:
            return float(target.max_value), math.nan
        if value < target.min_value:
            return math.nan, float(target.min_value)
        return float(math.floor(value)), float(math.ceil(value))
    smallest = 0.0 if target.has_zero else target.min_subnormal
    if not target.signed and value < smallest:
        return math.nan, smallest  # nothing of an unsigned format lies at or below x
    if math.isinf(value) and target.has_inf:
        return value, value
    if value == 0:
        zero = float(round_to(value, target, nan="zero"))
        return zero, zero
    magnitude = abs(value)
    inner = round_to(magnitude, target, "toward_zero", overflow="saturate", nan="zero")
    if math.isnan(inner):  # unsigned format, no zero: below its smallest value
        inner = 0.0
    outer = inner if inner == magnitude else _next_up(inner, target)
    if value < 0:  # -inner is -0.0 when x lies between zero and the first negative member
        return -outer, -inner if inner or target.has_negative_zero else 0.0
    return inner, outer


def _python_float(x: Any, target: Format) -> float:
    """x as a Python float; a Python int wider than 53 bits comes rounded to odd (see _wide_int),
    one beyond float64's range is a ValueError."""
    if isinstance(x, int) and not isinstance(x, bool):
        action = f"finding its neighbours in {target.name}"
        return float(_wide_int(unpack(x), x, target, Rounding.TOWARD_ZERO, action).flat[0])
    return float(x)


def _next_up(magnitude: float, fmt: FloatFormat) -> float:
    """The next larger member above a non-negative member (inf / NaN past the end)."""
    beyond = math.inf if fmt.has_inf else math.nan
    if magnitude == 0 and not fmt.has_zero:
        return fmt.min_subnormal
    if magnitude >= fmt.max_finite:
        return beyond
    code = int(encode(magnitude, fmt)) + 1
    if fmt.signed and code >= 1 << (fmt.bits - 1):
        return beyond
    value = float(decode(code, fmt))
    return beyond if math.isnan(value) else value
