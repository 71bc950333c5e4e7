"""The memory bill of training: bytes per parameter for weights, master copy, gradients and
optimizer state, and how ZeRO sharding divides them over N devices.

Every byte count is a format's bit width / 8 (`get_format(name).bits / 8`), never typed in:

    bytes/param = weights + extra weight copy + master + gradients + optimizer state
    optimizer state (per parameter, s = bytes of one state element in the recipe's state format):
        adam, adamw   2 s                   (first and second moment)
        sgd           1 s                   (momentum buffer)
        adafactor     s * (r + c) / (r c)   (factored second moment of an r x c matrix, no
                                             first moment; a square d x d matrix gives 2 s / d)
        adam8bit      2 (1 + 4 / 2048)      (two int8 moments plus one fp32 absmax per block
                                             of 2048 values, whatever the recipe's state format)

ZeRO stage k shards over N devices: stage 1 the optimizer state and master weights, stage 2
also the gradients, stage 3 also the weights. A sharded component costs bytes / N per device.

Activations are not in the bill: they scale with batch x sequence x hidden x layers, not with
the parameter count. Storing them in 16 bits is what mixed precision does halve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from precisionlab.formats import get_format

ADAM8BIT_BLOCK = 2048
"""Values per block of 8-bit Adam's block-wise quantized moments (one fp32 absmax each)."""

COMPONENTS = ("weights", "weight_copy", "master", "gradients", "optimizer")

ZERO_SHARDED = {
    0: frozenset(),
    1: frozenset({"optimizer", "master"}),
    2: frozenset({"optimizer", "master", "gradients"}),
    3: frozenset({"optimizer", "master", "gradients", "weights", "weight_copy"}),
}


def format_bytes(name: str) -> float:
    """Bytes of one element of a format: bits / 8."""
    return get_format(name).bits / 8


@dataclass(frozen=True)
class Recipe:
    """Which format holds each per-parameter tensor (None: the recipe has no such tensor)."""

    name: str
    description: str
    weights: str
    gradients: str
    state: str
    master: str | None = None
    weight_copy: str | None = None


RECIPES = (
    Recipe("fp32", "fp32 weights, gradients and optimizer state", "fp32", "fp32", "fp32"),
    Recipe("mixed_precision", "bf16 weights + fp32 master + fp32 state + bf16 gradients",
           "bf16", "bf16", "fp32", master="fp32"),
    Recipe("bf16_no_master", "bf16 weights, gradients and optimizer state; no master copy",
           "bf16", "bf16", "bf16"),
    Recipe("fp8_mixed", "mixed precision plus a cached e4m3 copy of the weights for fp8 GEMMs",
           "bf16", "bf16", "fp32", master="fp32", weight_copy="e4m3"),
    Recipe("fp8_lean", "e4m3 weights + fp32 master + bf16 gradients + bf16 optimizer state",
           "e4m3", "bf16", "bf16", master="fp32"),
)

OPTIMIZERS = ("adam", "adamw", "sgd", "adafactor", "adam8bit")


def get_recipe(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise ValueError(f"unknown recipe {name!r}; recipes: {', '.join(r.name for r in RECIPES)}")


def check_optimizer(name: str) -> str:
    key = name.strip().lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    return key


def optimizer_state_bytes(optimizer: str, state_format: str, matrix_dim: int = 4096) -> float:
    """Optimizer state bytes per parameter (see the module docstring for each rule)."""
    key = check_optimizer(optimizer)
    if matrix_dim < 1:
        raise ValueError(f"matrix_dim must be >= 1, got {matrix_dim}")
    s = format_bytes(state_format)
    if key in ("adam", "adamw"):
        return 2 * s
    if key == "sgd":
        return s
    if key == "adafactor":
        return s * (2 * matrix_dim) / (matrix_dim * matrix_dim)
    return 2 * (format_bytes("int8") + format_bytes("fp32") / ADAM8BIT_BLOCK)


@dataclass(frozen=True)
class Bill:
    """Bytes per parameter of each component, for one recipe and optimizer."""

    recipe: Recipe
    optimizer: str
    components: dict[str, float]

    @property
    def bytes_per_param(self) -> float:
        return sum(self.components.values())

    def total_bytes(self, params: float) -> float:
        return self.bytes_per_param * params

    def per_device_bytes(self, params: float, devices: int = 1, zero_stage: int = 0) -> float:
        """Bytes on each of `devices` devices under ZeRO stage `zero_stage` (0 = no sharding)."""
        check_sharding(devices, zero_stage)
        sharded = ZERO_SHARDED[zero_stage]
        per_param = sum(b / devices if name in sharded else b for name, b in self.components.items())
        return per_param * params


def check_params(params: float) -> float:
    if not (math.isfinite(params) and params > 0):
        raise ValueError(f"parameter count must be finite and > 0, got {params:g}")
    return float(params)


def check_sharding(devices: int, zero_stage: int) -> None:
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    if zero_stage not in ZERO_SHARDED:
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage}")


def bill(recipe: str | Recipe, optimizer: str = "adam", matrix_dim: int = 4096) -> Bill:
    """The per-parameter bill of one recipe with one optimizer."""
    chosen = get_recipe(recipe) if isinstance(recipe, str) else recipe
    key = check_optimizer(optimizer)
    components = {
        "weights": format_bytes(chosen.weights),
        "weight_copy": format_bytes(chosen.weight_copy) if chosen.weight_copy else 0.0,
        "master": format_bytes(chosen.master) if chosen.master else 0.0,
        "gradients": format_bytes(chosen.gradients),
        "optimizer": optimizer_state_bytes(key, chosen.state, matrix_dim),
    }
    return Bill(chosen, key, components)


def all_bills(optimizers: tuple[str, ...] = OPTIMIZERS, matrix_dim: int = 4096) -> list[Bill]:
    """Every recipe with every optimizer."""
    return [bill(r, o, matrix_dim) for r in RECIPES for o in optimizers]
