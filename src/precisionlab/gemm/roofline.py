"""Roofline: attainable rate = min(peak of the math unit, intensity × bandwidth).

Ceilings come either from measurements on this machine (copy bandwidth, best matmul rate
per precision) or from a datasheet (precisionlab.hardware presets, with overrides).
A point sits under the memory ceiling when I·bandwidth < peak (left of the ridge point
I* = peak / bandwidth), under the compute ceiling otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from precisionlab.hardware import Accelerator


@dataclass(frozen=True)
class Ceilings:
    """A machine's roofs: bandwidth in GB/s and peak GFLOP/s per precision."""

    name: str
    bandwidth_gbs: float
    peaks_gflops: dict[str, float] = field(default_factory=dict)

    def ridge(self, precision: str) -> float:
        """Ridge point I* = peak / bandwidth, in FLOP/byte."""
        return self.peak(precision) / self.bandwidth_gbs

    def peak(self, precision: str) -> float:
        if precision not in self.peaks_gflops:
            raise ValueError(f"{self.name} has no {precision} ceiling; it has {', '.join(self.peaks_gflops)}")
        return self.peaks_gflops[precision]

    def attainable(self, precision: str, intensity: float) -> float:
        """min(peak, I × bandwidth) in GFLOP/s."""
        return min(self.peak(precision), intensity * self.bandwidth_gbs)

    def bound(self, precision: str, intensity: float) -> str:
        """'memory' left of the ridge point, 'compute' right of it."""
        return "memory" if intensity < self.ridge(precision) else "compute"


def datasheet_ceilings(acc: Accelerator) -> Ceilings:
    """Ceilings of an accelerator preset (TFLOP/s -> GFLOP/s)."""
    return Ceilings(acc.name, acc.bandwidth_gbs, {p: v * 1e3 for p, v in acc.peak_tflops.items()})


def roof_curve(ceilings: Ceilings, precision: str, x_min: float, x_max: float,
               points: int = 64) -> tuple[list[float], list[float]]:
    """(intensities, attainable GFLOP/s) of one precision's roof over [x_min, x_max], log spaced."""
    xs = np.geomspace(x_min, x_max, points)
    return xs.tolist(), [ceilings.attainable(precision, float(x)) for x in xs]
