"""Dynamic loss scaling: the hill-climbing rule of torch.amp.GradScaler, on plain numbers.

Each step the caller reports whether the scaled gradients held an inf or NaN:

    overflow:  scale <- scale * backoff_factor,  clean count <- 0,  the step is SKIPPED
    clean:     clean count += 1; when it reaches growth_interval:
                   scale <- scale * growth_factor (only if that is finite in fp32),  count <- 0

The scale is held in fp32, as GradScaler holds it (every product is rounded to fp32).
Powers of two stay exact, so scaling and unscaling gradients by it changes no mantissa bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from precisionlab.rounding import round_to


def _fp32(value: float) -> float:
    return float(round_to(float(value), "fp32"))


@dataclass
class DynamicLossScaler:
    """Loss scale state: `scale` to multiply the loss by, updated by `update(found_inf)`."""

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    scale: float = field(init=False)
    clean_steps: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.init_scale) and self.init_scale > 0):
            raise ValueError(f"init_scale must be finite and > 0, got {self.init_scale}")
        if not self.growth_factor > 1:
            raise ValueError(f"growth_factor must be > 1, got {self.growth_factor}")
        if not 0 < self.backoff_factor < 1:
            raise ValueError(f"backoff_factor must lie in (0, 1), got {self.backoff_factor}")
        if self.growth_interval < 1:
            raise ValueError(f"growth_interval must be >= 1, got {self.growth_interval}")
        self.scale = _fp32(self.init_scale)

    def update(self, found_inf: bool) -> bool:
        """Record one step's overflow check; return True when the step may be applied."""
        if found_inf:
            self.scale = _fp32(self.scale * self.backoff_factor)
            self.clean_steps = 0
            return False
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            grown = _fp32(self.scale * self.growth_factor)
            if math.isfinite(grown):
                self.scale = grown
            self.clean_steps = 0
        return True


def has_overflow(grads: np.ndarray) -> bool:
    """True when any element is inf or NaN (the check made before unscaled gradients are used)."""
    return not bool(np.all(np.isfinite(grads)))


def scale_trace(overflows: Iterable[bool], scaler: DynamicLossScaler) -> tuple[list[float], list[bool]]:
    """Feed a sequence of overflow events to scaler: the scale used at each step, and whether
    each step was applied (False = skipped)."""
    scales: list[float] = []
    applied: list[bool] = []
    for found_inf in overflows:
        scales.append(scaler.scale)
        applied.append(scaler.update(bool(found_inf)))
    return scales, applied
