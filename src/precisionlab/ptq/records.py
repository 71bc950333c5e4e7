"""What a PTQ run produced: one LayerRecord per layer and the PTQResult that holds them (plain records).

    result.layers          one LayerRecord per layer: output error (method and baseline, on the
                           calibration activations and, with evaluation batches, on held-out ones),
                           time, peak memory, method details (damping, alpha, outliers ...)
    result.quantized       the stored weights per layer (in the folded coordinates for awq / smoothquant)
    result.folds           the per-input-channel scales folded into the model: (group, s)
    result.findings()      the `ptq.<method>.*` keys (see docs/ptq.md)

Writing a result into a model is `ptq.install` (`apply_result`, `write_weights`, `install_result`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.ptq.structure import ScaleGroup
from precisionlab.quant.tensor import QuantizedTensor


@dataclass
class LayerRecord:
    """One layer under one method."""

    name: str
    shape: tuple[int, ...]
    status: str = "ok"
    """"ok", "failed" (the method could not run on it: `note` says why; no weight is produced)."""
    output_error: float | None = None
    rtn_output_error: float | None = None
    eval_output_error: float | None = None
    rtn_eval_output_error: float | None = None
    seconds: float = 0.0
    peak_mb: float = 0.0
    tokens: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """output_error / rtn_output_error (1 when both are 0)."""
        return _ratio(self.output_error, self.rtn_output_error)

    @property
    def eval_ratio(self) -> float | None:
        return _ratio(self.eval_output_error, self.rtn_eval_output_error)

    @property
    def improved(self) -> bool:
        return (self.status == "ok" and self.output_error is not None and self.rtn_output_error is not None
                and self.output_error < self.rtn_output_error)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


@dataclass
class PTQResult:
    """Everything one run produced (see the module docstring)."""

    method: str
    scheme: str
    layers: list[LayerRecord]
    quantized: dict[str, QuantizedTensor] = field(default_factory=dict)
    """Stored weights per layer (in the folded coordinates for awq / smoothquant)."""
    folds: list[tuple[ScaleGroup, np.ndarray]] = field(default_factory=list)
    """Per-input-channel scales folded into the model: (group, s)."""
    calibration_tokens: int = 0
    evaluation_tokens: int = 0
    seconds: float = 0.0
    peak_mb: float = 0.0
    memory_source: str = "rss"
    options: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    """Model-level numbers (kivi: KL on long text, cache bytes; awq / smoothquant: fold_check)."""

    @property
    def ok(self) -> list[LayerRecord]:
        return [r for r in self.layers if r.status == "ok"]

    def findings(self) -> dict[str, Any]:
        """Stable keys: ptq.<method>.layers_total / layers_improved / layers_failed / output_error_ratio /
        eval_output_error_ratio / seconds / peak_mb, and per layer ptq.<method>.layers.<name>.output_error
        beside ptq.rtn.layers.<name>.output_error (plus eval_output_error and the method's details)."""
        m = self.method
        out: dict[str, Any] = {
            f"ptq.{m}.scheme": self.scheme,
            f"ptq.{m}.layers_total": len(self.layers),
            f"ptq.{m}.layers_improved": sum(r.improved for r in self.layers),
            f"ptq.{m}.layers_failed": sum(r.status == "failed" for r in self.layers),
            f"ptq.{m}.output_error_ratio": _mean([r.ratio for r in self.ok]),
            f"ptq.{m}.seconds": self.seconds,
            f"ptq.{m}.peak_mb": self.peak_mb,
            f"ptq.{m}.calibration_tokens": self.calibration_tokens,
        }
        if self.evaluation_tokens:
            out[f"ptq.{m}.eval_output_error_ratio"] = _mean([r.eval_ratio for r in self.ok])
            out[f"ptq.{m}.evaluation_tokens"] = self.evaluation_tokens
        for key, value in self.summary.items():
            out[f"ptq.{m}.{key}"] = value
        for r in self.layers:
            base = f"ptq.{m}.layers.{r.name}"
            out[f"{base}.status"] = r.status
            out[f"{base}.output_error"] = r.output_error
            out[f"ptq.rtn.layers.{r.name}.output_error"] = r.rtn_output_error
            if self.evaluation_tokens:
                out[f"{base}.eval_output_error"] = r.eval_output_error
                out[f"ptq.rtn.layers.{r.name}.eval_output_error"] = r.rtn_eval_output_error
            for key, value in r.details.items():
                if isinstance(value, (int, float, str, bool)) or value is None:
                    out[f"{base}.{key}"] = value
        return out


def _mean(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None
