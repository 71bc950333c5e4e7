"""The memory bill against hand arithmetic (bytes per element: fp32 4, bf16 2, e4m3 1, int8 1)."""

from __future__ import annotations

import pytest

from precisionlab.training.memory import bill, check_params, optimizer_state_bytes


@pytest.mark.parametrize(("recipe", "optimizer", "expected"), [
    ("fp32", "adam", 4 + 4 + 2 * 4),                  # weights, grads, m and v
    ("mixed_precision", "adam", 2 + 4 + 2 + 2 * 4),   # bf16 w, fp32 master, bf16 grads, fp32 m, v = 16
    ("mixed_precision", "adamw", 16),
    ("mixed_precision", "sgd", 2 + 4 + 2 + 4),
    ("bf16_no_master", "adam", 2 + 2 + 2 * 2),
    ("fp8_mixed", "adam", 2 + 1 + 4 + 2 + 2 * 4),
    ("fp8_lean", "adam", 1 + 4 + 2 + 2 * 2),
    ("fp32", "adam8bit", 4 + 4 + 2 * (1 + 4 / 2048)),
    ("mixed_precision", "adafactor", 2 + 4 + 2 + 4 * (4096 + 4096) / 4096**2),
])
def test_bytes_per_param(recipe: str, optimizer: str, expected: float) -> None:
    assert bill(recipe, optimizer).bytes_per_param == pytest.approx(expected, rel=1e-15)


def test_mixed_precision_costs_what_fp32_costs() -> None:
    assert bill("mixed_precision", "adam").bytes_per_param == 16
    assert bill("fp32", "adam").bytes_per_param == 16


def test_adafactor_depends_on_matrix_shape() -> None:
    assert optimizer_state_bytes("adafactor", "fp32", matrix_dim=1024) == pytest.approx(4 * 2 / 1024)


@pytest.mark.parametrize(("stage", "per_param"), [
    (0, 16.0),
    (1, 2 + 2 + (4 + 8) / 8),      # master and moments sharded
    (2, 2 + (2 + 4 + 8) / 8),      # plus gradients
    (3, 16 / 8),                   # everything
])
def test_zero_stages_mixed_adam_over_8(stage: int, per_param: float) -> None:
    b = bill("mixed_precision", "adam")
    assert b.per_device_bytes(7e9, 8, stage) == pytest.approx(per_param * 7e9, rel=1e-15)


def test_totals() -> None:
    assert bill("mixed_precision", "adam").total_bytes(7e9) == pytest.approx(112e9)


@pytest.mark.parametrize("params", [-7e9, 0.0, float("inf"), float("nan")])
def test_bad_params(params: float) -> None:
    with pytest.raises(ValueError, match="parameter count"):
        check_params(params)


def test_bad_optimizer_recipe_and_sharding() -> None:
    with pytest.raises(ValueError, match="unknown optimizer"):
        bill("fp32", "lion")
    with pytest.raises(ValueError, match="unknown recipe"):
        bill("fp64", "adam")
    with pytest.raises(ValueError, match="ZeRO stage"):
        bill("fp32", "adam").per_device_bytes(1e9, 4, 5)
    with pytest.raises(ValueError, match="devices"):
        bill("fp32", "adam").per_device_bytes(1e9, 0, 1)
