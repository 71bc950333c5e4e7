"""The memory quantization-aware training needs, counted from what is trained.

What is trained: every weight of the quantized linears (of the blocks `--blocks` selects), as a float32 offset
from the start in grid steps under fixed grid scales (qat.fakequant.parametrization). Each trained parameter
costs the fp32 + Adam bill of `training.memory` (weights, gradients, Adam's two moments: 4 + 4 + 4 + 4 bytes,
each a format's bits / 8, the source material's 16 bytes per parameter), plus, here:

    reference    the float weight (fp32), the distillation teacher's copy while the latent weight trains
    start        the starting weight (fp32) the offset is added to (RTN: the float weight; GPTQ / AWQ: their values)
    mask         the straight-through estimator's in-range mask (1 byte, torch.bool) saved for the backward
    grid         per element, the expanded divisor (and zero point) in float64 (8 bytes each), computed once

The rest of the model is frozen: its parameters are counted once, at their stored width, and take no
gradient or optimizer state. Activations are not in this bill (they scale with tokens x hidden x blocks);
the run's measured peak memory is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionlab.training.memory import bill, format_bytes


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes of one QAT run's parameter state (module docstring)."""

    trained: int
    """Trained parameters (the latent weights)."""
    frozen_bytes: int
    """Every other parameter, at its stored width."""
    zero_point: bool = False

    @property
    def per_trained(self) -> dict[str, float]:
        """Bytes per trained parameter, by component."""
        adam = bill("fp32", "adam").components
        out = {k: float(v) for k, v in adam.items() if v}
        out["reference"] = format_bytes("fp32")
        out["start"] = format_bytes("fp32")
        out["mask"] = 1.0  # torch.bool is one byte per element
        out["grid"] = format_bytes("fp64") * (2 if self.zero_point else 1)
        return out

    @property
    def adam_bytes_per_param(self) -> float:
        """The fp32 + Adam bill alone (weights, gradients, two moments)."""
        return bill("fp32", "adam").bytes_per_param

    @property
    def bytes_per_trained(self) -> float:
        return sum(self.per_trained.values())

    @property
    def trained_bytes(self) -> float:
        return self.bytes_per_trained * self.trained

    @property
    def total_bytes(self) -> float:
        return self.trained_bytes + self.frozen_bytes

    def findings(self, prefix: str = "qat.memory") -> dict[str, float | int]:
        out: dict[str, float | int] = {f"{prefix}.trained_parameters": self.trained,
                                       f"{prefix}.adam_bytes_per_parameter": self.adam_bytes_per_param,
                                       f"{prefix}.bytes_per_trained_parameter": self.bytes_per_trained,
                                       f"{prefix}.trained_mb": self.trained_bytes / 1e6,
                                       f"{prefix}.frozen_mb": self.frozen_bytes / 1e6,
                                       f"{prefix}.total_mb": self.total_bytes / 1e6}
        for key, value in self.per_trained.items():
            out[f"{prefix}.per_parameter.{key}"] = value
        return out
