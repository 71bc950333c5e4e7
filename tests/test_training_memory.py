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


# Hand tables: bytes per element of each tensor, per recipe (fp32 4, bf16 2, e4m3 1), and the optimizer state
# per parameter from each paper's definition, for a recipe whose state elements take s bytes.
HAND_COMPONENTS = {  # weights, weight copy, master, gradients, state element bytes s
    "fp32": (4, 0, 0, 4, 4),
    "mixed_precision": (2, 0, 4, 2, 4),
    "bf16_no_master": (2, 0, 0, 2, 2),
    "fp8_mixed": (2, 1, 4, 2, 4),
    "fp8_lean": (1, 0, 4, 2, 2),
}
D = 4096  # Adafactor's square matrix side


def hand_state(optimizer: str, s: int) -> float:
    return {
        "adam": 2 * s,                      # Kingma & Ba: first and second moment
        "adamw": 2 * s,                     # Loshchilov & Hutter: same state as Adam
        "sgd": s,                           # one momentum buffer
        "adafactor": s * (D + D) / (D * D),  # Shazeer & Stern: row and column accumulators, beta1 = 0
        "adam8bit": 2 * (1 + 4 / 2048),     # Dettmers et al.: two int8 states, one fp32 absmax per 2048 block
    }[optimizer]


@pytest.mark.parametrize("recipe", sorted(HAND_COMPONENTS))
@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd", "adafactor", "adam8bit"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_recipe_optimizer_and_zero_stage_by_hand(recipe: str, optimizer: str, stage: int) -> None:
    w, copy, master, g, s = HAND_COMPONENTS[recipe]
    k = hand_state(optimizer, s)
    n, params = 8, 3e9
    # ZeRO (Rajbhandari et al.): stage 1 partitions optimizer state (incl. master), 2 adds gradients, 3 parameters
    per_param = {
        0: w + copy + master + g + k,
        1: w + copy + g + (master + k) / n,
        2: w + copy + (g + master + k) / n,
        3: (w + copy + g + master + k) / n,
    }[stage]
    b = bill(recipe, optimizer)
    assert b.bytes_per_param == pytest.approx(w + copy + master + g + k, rel=1e-15)
    assert b.per_device_bytes(params, n, stage) == pytest.approx(per_param * params, rel=1e-14)


def test_zero_paper_worked_example() -> None:
    # ZeRO paper, Figure 1: 7.5B parameters, mixed-precision Adam (K = 12), 64 devices:
    # 120 GB baseline, 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p)
    b = bill("mixed_precision", "adam")
    got = [b.per_device_bytes(7.5e9, 64, stage) / 1e9 for stage in range(4)]
    assert [round(v, 1) for v in got] == [120.0, 31.4, 16.6, 1.9]
