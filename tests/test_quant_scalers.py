"""FP8 per-tensor scalers: current scaling follows each tensor; delayed scaling remembers its window."""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.quant import CurrentScaler, DelayedScaler


def amaxes_to_tensors(amaxes: list[float]) -> list[np.ndarray]:
    return [np.array([a, -a / 2, 0.1], dtype=np.float32) for a in amaxes]


def test_delayed_uses_previous_steps_only() -> None:
    seq = amaxes_to_tensors([1.0, 1.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    delayed = DelayedScaler("e4m3", history=3)
    scales = [delayed.step(t) for t in seq]
    unit = np.float32(1.0 / 448)
    big = np.float32(100.0 / 448)
    # step 0 bootstraps from itself; step 2 (the outlier) still uses the history of 1s;
    # steps 3, 4, 5 see the outlier in their 3-step window; step 6 has forgotten it
    assert scales == [unit, unit, unit, big, big, big, unit, unit]
    current = CurrentScaler("e4m3")
    assert [current.step(t) for t in seq] == [unit, unit, big, unit, unit, unit, unit, unit]


def test_margin_and_zero() -> None:
    s = CurrentScaler("e5m2", margin=1).step(np.array([57344.0]))
    assert s == 2.0
    assert CurrentScaler().step(np.zeros(3)) == 1.0
    with pytest.raises(ValueError, match="history"):
        DelayedScaler(history=0)


def test_nonfinite_step_is_refused_without_touching_the_history() -> None:
    delayed = DelayedScaler("e4m3", history=2)
    delayed.step(np.array([1.0]))
    with pytest.raises(ValueError, match="NaN or inf"):
        delayed.step(np.array([np.inf, 1.0]))
    assert list(delayed.amax_history) == [1.0]
    assert delayed.step(np.array([2.0])) == np.float32(1.0 / 448)  # still the previous step's amax
