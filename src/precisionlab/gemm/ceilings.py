"""Which roofline to draw: the measured CPU one, and optionally a datasheet one.

`datasheet(accelerator, peaks, bandwidth)` resolves the command-line overrides: an
accelerator preset from precisionlab.hardware, with `peaks` ("VALUE" for bf16, or
"PREC=VALUE", in TFLOP/s) and `bandwidth` (GB/s) replacing its numbers; without a preset,
both a bandwidth and at least one peak are needed.
"""

from __future__ import annotations

import math

from precisionlab.gemm.roofline import Ceilings, datasheet_ceilings
from precisionlab.hardware import Accelerator, get_accelerator

DEFAULT_PEAK_PRECISION = "bf16"


def parse_peaks(specs: list[str] | tuple[str, ...]) -> dict[str, float]:
    """'989' -> {'bf16': 989.0}; 'fp8=1979' -> {'fp8': 1979.0}."""
    peaks: dict[str, float] = {}
    for spec in specs:
        precision, _, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--peak-tflops takes VALUE or PREC=VALUE, got {spec!r}") from None
        if not (math.isfinite(number) and number > 0):
            raise ValueError(f"peak TFLOP/s must be a positive number, got {spec!r}")
        peaks[precision.strip().lower() or DEFAULT_PEAK_PRECISION] = number
    return peaks


def datasheet(accelerator: str | None, peaks: list[str] | tuple[str, ...] = (),
              bandwidth: float | None = None) -> Ceilings | None:
    """Datasheet ceilings from a preset and/or overrides; None when nothing was asked for."""
    peak_values = parse_peaks(peaks)
    if bandwidth is not None and not (math.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number of GB/s, got {bandwidth}")
    if accelerator is None and not peak_values and bandwidth is None:
        return None
    if accelerator is not None:
        base = get_accelerator(accelerator)
    else:
        if bandwidth is None or not peak_values:
            raise ValueError("a datasheet roofline without --accelerator needs both --bandwidth and --peak-tflops")
        base = Accelerator("datasheet", 0.0, bandwidth, {})
    return datasheet_ceilings(base.with_overrides(bandwidth_gbs=bandwidth, peak_tflops=peak_values or None))
