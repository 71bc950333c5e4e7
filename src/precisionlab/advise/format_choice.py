"""Which formats meet a range and a precision need on a target: the custom scenario's chooser.

A format meets a need when its unit roundoff is at most the relative error asked for and it
keeps that relative error over at least the decades of dynamic range asked for (floats: the
normal range; integers with a scale: log10(2·rel_error·qmax)). The fp8 encoding a target does
not implement is dropped (the OCP/FNUZ split); compute-bound work keeps only formats with a
matrix rate on the target. Policy tables below are data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precisionlab.formats import FloatFormat, Format, IntFormat, get_format, list_formats
from precisionlab.hardware import Accelerator, get_accelerator

# Every fp8 encoding; an accelerator implements one pair (`Accelerator.fp8_formats`: OCP on
# Hopper, Ada and Blackwell, FNUZ on MI300X).
ALL_FP8 = ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz")

# The peak-rate key a format's matrix path is listed under in `hardware` presets.
PEAK_KEY: dict[str, str] = {
    "fp64": "fp64", "fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "e4m3": "fp8", "e5m2": "fp8",
    "e4m3fnuz": "fp8", "e5m2fnuz": "fp8", "int8": "int8", "e2m1": "fp4",
}

# Formats the custom scenario considers (the chooser ranks them).
CANDIDATES = ("fp64", "fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "int8", "int4", "e2m1")
COMPUTE_ONLY = ("tf32",)  # a matrix-core input mode, not a storage format
ROLES = ("weights", "activations", "gradients", "kv_cache", "accumulator", "optimizer_state", "checkpoint")
BOUNDS = ("memory", "compute")

# What each tensor role adds to the custom scenario's risk column (templates: no typed numbers).
ROLE_NOTES: dict[str, str] = {
    "weights": "weights are well-behaved: per-channel or per-group scales, judged by a task-level eval",
    "activations": "activations carry outlier channels: per-token or tile scales rather than one per tensor",
    "gradients": "small gradients underflow first (fp16 flushes below {fmt[fp16].min_subnormal:.3g}): a loss "
                 "scale for narrow-exponent formats",
    "kv_cache": "keys carry outlier channels: per-channel key scales, as KIVI uses",
    "accumulator": "accumulate wide whatever the storage: a narrow running sum stalls once half an ulp exceeds "
                   "the next term",
    "optimizer_state": "Adam's second moment spans many decades: fp32, or block-scaled states with their own "
                       "scales",
    "checkpoint": "a file outlives the hardware it was written on: record the exact encoding",
}


def fp8_formats_for(gpu_key: str) -> tuple[str, str]:
    """(E4M3, E5M2) as the target's hardware encodes them."""
    return get_accelerator(gpu_key).fp8_formats


def float_format(name: str) -> FloatFormat:
    """A registered float format (TypeError for an integer one)."""
    fmt = get_format(name)
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"{name} is not a floating-point format")
    return fmt


def unit_roundoff(fmt: Format) -> float:
    """Largest relative rounding error: eps/2 for floats (normal range); half a step at full scale for
    integers (symmetric quantization with qmax = 2^(b-1) - 1), 1 / (2·qmax)."""
    if isinstance(fmt, IntFormat):
        return 1 / (2 * fmt.symmetric_max)
    return fmt.eps / 2


def decades_at(fmt: Format, rel_error: float) -> float:
    """Decades of magnitude over which a value keeps relative error <= rel_error (0 if never).

    Float: the normal range log10(max_finite / min_normal), when eps/2 <= rel_error.
    Integer with a scale: |x| >= step / (2·rel_error) up to qmax steps, log10(2·rel_error·qmax).
    """
    if isinstance(fmt, IntFormat):
        return max(0.0, math.log10(2 * rel_error * fmt.symmetric_max))
    if unit_roundoff(fmt) > rel_error:
        return 0.0
    return math.log10(fmt.max_finite) - math.log10(fmt.min_normal)


class _Formats(Mapping[str, Format]):
    """Every registered format by name, for `{fmt[NAME].prop}` template fields."""

    def __getitem__(self, name: str) -> Format:
        return get_format(name)

    def __iter__(self) -> Any:
        return iter(f.name for f in list_formats())

    def __len__(self) -> int:
        return len(list_formats())


class _Roundoff(Mapping[str, float]):
    """Unit roundoff by format name, for `{u[NAME]}` template fields."""

    def __getitem__(self, name: str) -> float:
        return unit_roundoff(get_format(name))

    def __iter__(self) -> Any:
        return iter(f.name for f in list_formats())

    def __len__(self) -> int:
        return len(list_formats())


def template_fields() -> dict[str, Any]:
    """The fields every template may use besides scenario facts: fmt[NAME] and u[NAME]."""
    return {"fmt": _Formats(), "u": _Roundoff()}


@dataclass(frozen=True)
class Candidate:
    name: str
    bits: int
    roundoff: float
    decades: float
    peak: float


def candidates(accelerator: Accelerator, gpu_key: str, role: str, range_decades: float, rel_error: float,
               bound: str) -> list[Candidate]:
    """Formats meeting the custom scenario's range and precision on the target (best first).

    Rule: keep formats with unit roundoff <= rel_error and decades_at(rel_error) >= range needed;
    drop the fp8 encoding the target does not implement; compute-bound keeps only formats with a
    matrix rate on the target and ranks by that rate (then fewer bits); memory-bound ranks by
    fewer bits (then more range). Accumulators consider floats only; tf32 only when compute-bound
    (it is a matrix-core input mode, not a storage format).
    """
    if role not in ROLES:
        raise ValueError(f"unknown tensor role {role!r}; choose from {', '.join(ROLES)}")
    if bound not in BOUNDS:
        raise ValueError(f"bound must be 'memory' or 'compute', got {bound!r}")
    if not rel_error > 0 or not range_decades >= 0:
        raise ValueError("precision needed must be a positive relative error and range a non-negative "
                         f"number of decades, got {rel_error} and {range_decades}")
    wrong_fp8 = set(ALL_FP8) - set(accelerator.fp8_formats)
    found = []
    for name in CANDIDATES:
        fmt = get_format(name)
        if name in wrong_fp8 or (role == "accumulator" and not isinstance(fmt, FloatFormat)):
            continue
        if name in COMPUTE_ONLY and bound == "memory":
            continue
        u, dec = unit_roundoff(fmt), decades_at(fmt, rel_error)
        peak = accelerator.peak_tflops.get(PEAK_KEY.get(name, ""), math.nan)
        if u > rel_error or dec < range_decades:
            continue
        if bound == "compute" and not peak > 0:
            continue
        found.append(Candidate(name, fmt.bits, u, dec, peak))
    if bound == "compute":
        found.sort(key=lambda c: (-c.peak, c.bits))
    else:
        found.sort(key=lambda c: (c.bits, -c.decades))
    return found


__all__ = [
    "ALL_FP8",
    "BOUNDS",
    "CANDIDATES",
    "COMPUTE_ONLY",
    "PEAK_KEY",
    "ROLES",
    "ROLE_NOTES",
    "Candidate",
    "candidates",
    "decades_at",
    "float_format",
    "fp8_formats_for",
    "template_fields",
    "unit_roundoff",
]
