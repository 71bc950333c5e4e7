"""FP8 per-tensor scaling as stateful scalers: current and delayed (amax history).

Both return the decode-direction scale s (x is stored as fp8(x / s), read as q * s):

    current   s_t = amax_t * 2^margin / max_finite
    delayed   s_t = max(amax_{t-W} .. amax_{t-1}) * 2^margin / max_finite

The delayed scaler uses the history up to the previous step, never the current amax
(Transformer Engine's `amax_history_len` window with the "max" algorithm): a transient
outlier therefore dominates the scale for the next W steps, while the current scaler
recovers at once. With an empty history (the very first step) there is nothing to delay,
so the first step uses its own amax (Transformer Engine starts from s = 1 instead). An
all-zero amax gives s = 1.
"""

from __future__ import annotations

import numbers
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.formats import get_format


def _scale(amax: float, element: str, margin: int) -> float:
    if not np.isfinite(amax):
        raise ValueError(f"amax must be finite, got {amax}")
    if amax == 0:
        return 1.0
    return float(np.float32(amax * 2.0**margin / get_format(element).max_finite))


def _check(element: str, margin: int) -> None:
    """The element must name a format and the margin be a whole power of two (checked at construction)."""
    get_format(element)
    if isinstance(margin, bool) or not isinstance(margin, numbers.Integral):
        raise TypeError(f"margin is a power-of-two exponent and must be an integer, got {margin!r}")


def _amax(x: Any) -> float:
    """max |x|; a tensor holding NaN or inf is refused at once (it would poison the history)."""
    amax = float(np.max(np.abs(np.asarray(x, dtype=np.float64)), initial=0.0))
    if not np.isfinite(amax):
        raise ValueError("the tensor holds NaN or inf; an fp8 scale needs a finite amax (skip or clean the step)")
    return amax


@dataclass
class CurrentScaler:
    """s from this tensor's own amax."""

    element: str = "e4m3"
    margin: int = 0

    def __post_init__(self) -> None:
        _check(self.element, self.margin)

    def step(self, x: Any) -> float:
        return _scale(_amax(x), self.element, self.margin)


@dataclass
class DelayedScaler:
    """s from the max of the previous `history` amax values (window length W)."""

    element: str = "e4m3"
    history: int = 16
    margin: int = 0
    amax_history: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        _check(self.element, self.margin)
        if self.history < 1:
            raise ValueError(f"history must be >= 1, got {self.history}")

    def step(self, x: Any) -> float:
        current = _amax(x)
        basis = max(self.amax_history) if self.amax_history else current
        scale = _scale(basis, self.element, self.margin)
        self.amax_history.append(current)
        while len(self.amax_history) > self.history:
            self.amax_history.popleft()
        return scale


def fake_quantize_fp8(x: Any, scale: float, element: str = "e4m3") -> np.ndarray:
    """fp8(x / s) * s with saturation (what a .satfinite cast does), as float32."""
    from precisionlab.rounding import round_to

    v = np.asarray(x, dtype=np.float32) / np.float32(scale)
    return (np.asarray(round_to(v, element, overflow="saturate"), dtype=np.float32) * np.float32(scale))
