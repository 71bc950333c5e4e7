"""Install a method's weights into a model for evaluation, reversibly, with honest byte accounting.

    report = install(model, change, stored_bytes, label)
    ...                      # the model now computes with the new weights
    report.restore()         # every changed parameter back, bit for bit

`change(model)` writes whatever it writes in place (a PTQResult's dequantized weights and AWQ's
folds, the ladder's outlier-column weights); every parameter is snapshotted first and only the
ones that changed are kept to restore. The report is a `models.weights.QuantizationReport`, the
record the evaluation reads for any candidate: one record per layer named in `stored_bytes`
(its bytes as stored: codes, scales, zero points, padding and kept fp16 columns), errors of the
new weight against the original, and `unchanged` when the new weight equals it bit for bit
(the grid caveat: the scheme's grid already held the source's values). `model_bytes` counts
every other parameter at its stored width, each tensor once.

    candidate = ptq_candidate(result)    # an eval Candidate that installs a PTQResult
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from precisionlab.ptq.peers import require_torch


def install(model: Any, change: Callable[[Any], None], stored_bytes: Mapping[str, int], label: str) -> Any:
    """Apply `change(model)` and return a QuantizationReport that can undo it (see the module docstring)."""
    torch = require_torch("installing weights")
    from precisionlab.models.loading import unique_parameters
    from precisionlab.models.weights import QuantizationReport, layer_kind

    start = time.perf_counter()
    parameters = unique_parameters(model)
    before = [p.detach().clone() for p in parameters]
    try:
        change(model)
    except BaseException:
        with torch.no_grad():
            for p, old in zip(parameters, before, strict=True):
                p.data = old
        raise
    changed = [(p, old) for p, old in zip(parameters, before, strict=True) if not torch.equal(p.data, old)]
    old_by_id = {id(p): old for p, old in zip(parameters, before, strict=True)}
    modules = dict(model.named_modules())
    records = []
    bytes_by_param: dict[int, int] = {}
    for name, nbytes in stored_bytes.items():
        module = modules.get(name)
        if module is None or getattr(module, "weight", None) is None:
            raise ValueError(f"the model has no layer named {name!r}")
        weight = module.weight
        old = old_by_id.get(id(weight), weight.detach())
        records.append(_record(name, layer_kind(module) or "linear", old, weight.detach(), int(nbytes)))
        bytes_by_param[id(weight)] = int(nbytes)
    reference = sum(p.numel() * p.element_size() for p in parameters)
    model_bytes = sum(bytes_by_param.get(id(p), p.numel() * p.element_size()) for p in parameters)
    return QuantizationReport(label, records, model_bytes, reference, time.perf_counter() - start,
                              _originals=changed)


def _record(name: str, kind: str, old: Any, new: Any, nbytes: int) -> Any:
    from precisionlab.models.weights import LayerRecord

    reference = old.float().numpy().astype(np.float64)
    values = new.float().numpy().astype(np.float64)
    signal = float(np.sum(reference * reference))
    noise = float(np.sum((values - reference) ** 2))
    rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return LayerRecord(name, kind, tuple(int(d) for d in old.shape), old.numel() * old.element_size(), nbytes, True,
                       rel, sqnr, signal, noise, unchanged=bool(noise == 0 and np.array_equal(values, reference)))


def ptq_candidate(result: Any, label: str | None = None) -> Any:
    """An eval Candidate that installs `result` (a weight-only PTQResult: rtn, gptq, awq) with its stored bytes.

    The include / exclude patterns of the evaluation do not apply: the result's own layers are what change."""
    from precisionlab.eval.candidates import Candidate

    if result.method not in ("rtn", "gptq", "awq"):
        raise ValueError(f"{result.method} also quantizes activations or the KV cache at run time: its task-level "
                         "evaluation is not installable as weights")
    stored = {name: q.nbytes for name, q in result.quantized.items()}

    def prepare(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
        return install(model, result.apply, stored, label or f"{result.method} {result.scheme}")

    return Candidate(result.scheme, name=label or f"{result.method}:{result.scheme}", prepare=prepare)
