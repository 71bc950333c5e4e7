"""The limits lab's options: size bounds, the formats it compares, and the checks on what the user gave."""

from __future__ import annotations

import math
from collections.abc import Sequence

from precisionlab.formats import FloatFormat, get_format, list_formats

MAX_BLOCKS = 4096
MAX_ORDER_N = 1 << 24
"""Largest summation-order sum (64 MiB of fp32 values plus a float64 copy for the exact sum)."""
MAX_VALUES = 10**7
"""Largest variance / drift / stall size: Welford is a per-value Python loop (~3 µs a value)
and the pairwise stall fix holds every term in memory."""
HEADLINE_FORMATS = ("fp16", "bf16", "fp32")
"""Formats whose exp-overflow and 1 + t findings are always reported, whatever --formats shows."""


def float_formats(names: Sequence[str] | None) -> list[FloatFormat]:
    if names is None:
        return [f for f in list_formats("float") if isinstance(f, FloatFormat)]
    chosen: list[FloatFormat] = []
    for name in names:
        fmt = get_format(name)
        if not isinstance(fmt, FloatFormat):
            raise ValueError(f"{fmt.name} is an integer format; the limits lab compares float formats")
        if fmt not in chosen:  # an alias or a repeat names the same format once
            chosen.append(fmt)
    if not chosen:
        raise ValueError("give at least one format")
    return chosen


def check_sizes(value: float, min_log2_n: int, max_log2_n: int, order_n: int, variance_n: int, drift_n: int,
                 stall_count: int, seed: int) -> None:
    """ValueError (one line, naming the option) for any option the lab cannot run with."""
    if not math.isfinite(value):
        raise ValueError(f"value must be a finite number, got {value}")
    if not 1 <= min_log2_n <= max_log2_n <= 24:
        raise ValueError(f"need 1 <= min_log2_n <= max_log2_n <= 24, got {min_log2_n} and {max_log2_n}")
    if not 0 < order_n <= MAX_ORDER_N or order_n % MAX_BLOCKS:
        raise ValueError(f"order_n must be a positive multiple of {MAX_BLOCKS} up to {MAX_ORDER_N}, got {order_n}")
    if not 2 <= variance_n <= MAX_VALUES:
        raise ValueError(f"variance_n must be between 2 and {MAX_VALUES}, got {variance_n}")
    if drift_n != 0 and not 2 <= drift_n <= MAX_VALUES:
        raise ValueError(f"drift_n must be 0 (skip) or between 2 and {MAX_VALUES}, got {drift_n}")
    if not 1 <= stall_count <= MAX_VALUES:
        raise ValueError(f"stall_count must be between 1 and {MAX_VALUES}, got {stall_count}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")


def with_headline(formats: list[FloatFormat]) -> list[FloatFormat]:
    """The shown formats, then any headline format they lack (its finding is reported, not shown)."""
    shown = {f.name for f in formats}
    return formats + [f for f in map(get_format, HEADLINE_FORMATS)
                      if f.name not in shown and isinstance(f, FloatFormat)]
