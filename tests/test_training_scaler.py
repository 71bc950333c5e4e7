"""DynamicLossScaler: a hand-worked sequence, validation, and torch.amp.GradScaler's observable behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.training.scaler import DynamicLossScaler, has_overflow, scale_trace


def test_hand_worked_sequence() -> None:
    # init 8, grow x2 after 2 clean steps, halve on overflow:
    # step: 0 clean (count 1), 1 clean (count 2 -> 16), 2 inf (-> 8, skip), 3 clean, 4 inf (-> 4, skip),
    #       5 clean, 6 clean (-> 8)
    overflows = [False, False, True, False, True, False, False, False]
    scales, applied = scale_trace(overflows, DynamicLossScaler(8.0, 2.0, 0.5, 2))
    assert scales == [8.0, 8.0, 16.0, 8.0, 8.0, 4.0, 4.0, 8.0]
    assert applied == [True, True, False, True, False, True, True, True]


def test_growth_that_overflows_fp32_is_refused() -> None:
    scaler = DynamicLossScaler(2.0**127, growth_interval=1)
    scaler.update(False)
    assert scaler.scale == 2.0**127


@pytest.mark.parametrize("kwargs", [
    {"init_scale": 0.0}, {"init_scale": float("inf")}, {"growth_factor": 1.0}, {"backoff_factor": 1.0},
    {"backoff_factor": 0.0}, {"growth_interval": 0},
])
def test_invalid_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        DynamicLossScaler(**kwargs)  # type: ignore[arg-type]


def test_has_overflow() -> None:
    assert not has_overflow(np.array([1.0, -2.0, 0.0]))
    assert has_overflow(np.array([1.0, np.inf]))
    assert has_overflow(np.array([np.nan, 1.0]))


def torch_trace(overflows: list[bool], init_scale: float, growth: float, backoff: float,
                interval: int) -> tuple[list[float], list[bool]]:
    """Drive torch.amp.GradScaler on the CPU with gradients that are finite or inf; observe the scale
    used at each step and whether the optimizer step changed the parameter."""
    torch = pytest.importorskip("torch")
    param = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth, backoff_factor=backoff,
                                  growth_interval=interval)
    scales, applied = [], []
    for found_inf in overflows:
        opt.zero_grad()
        scaler.scale(torch.tensor(1.0))
        scale = scaler.get_scale()
        scales.append(scale)
        before = param.detach().clone()
        value = float("inf") if found_inf else 1.0
        param.grad = torch.full((4,), value) * scale
        scaler.step(opt)
        scaler.update()
        applied.append(not torch.equal(before, param.detach()))
    return scales, applied


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_torch_gradscaler(seed: int) -> None:
    pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    overflows = [bool(v) for v in rng.random(60) < 0.2]
    overflows[:3] = [True, True, False]
    settings = (2.0**16, 2.0, 0.5, 3) if seed != 2 else (1024.0, 4.0, 0.25, 5)
    expected_scales, expected_applied = torch_trace(overflows, *settings)
    init, growth, backoff, interval = settings
    scales, applied = scale_trace(overflows, DynamicLossScaler(init, growth, backoff, int(interval)))
    assert scales == expected_scales
    assert applied == expected_applied


def test_growth_refusal_matches_torch() -> None:
    pytest.importorskip("torch")
    expected, _ = torch_trace([False, False, False], 2.0**126, 2.0, 0.5, 1)
    scales, _ = scale_trace([False, False, False], DynamicLossScaler(2.0**126, growth_interval=1))
    assert scales == expected == [2.0**126, 2.0**127, 2.0**127]
