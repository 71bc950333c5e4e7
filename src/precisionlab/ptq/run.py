"""Run one PTQ method over a model's linear layers and measure every layer against the baseline.

    result = run_method(model, "gptq", "int4:g128", calibration_batches,
                        evaluation=evaluation_batches, blocks=[0, 1])
    result.layers          one LayerRecord per layer: output error (method and baseline, on the
                           calibration activations and, given `evaluation`, on held-out ones),
                           time, peak memory, method details (damping, alpha, outliers ...)
    result.findings()      the `ptq.<method>.*` keys (see docs/ptq.md)
    ptq.install.apply_result(model, result)   write the quantized weights (and AWQ's folds) into the model

The error of a layer is the relative Frobenius error of its output,
||Y_hat - Y||_F / ||Y||_F with Y = X W^T (+ b), X the layer's own full-precision inputs:
over every calibration token for the weight-only methods (exact, from X^T X), over the kept
token sample for the methods that quantize activations. On the calibration activations a
method is judged on the data it was fitted to; the evaluation activations (the evaluation
part of the data, never seen by the method) show whether it over-fitted.

The baseline (the `ptq.rtn.*` keys) is what the method improves on: round-to-nearest of the
same scheme for rtn / gptq / awq; the same W8A8 quantization without smoothing for
smoothquant; plain int8 (no fp16 outlier columns) for llm_int8; per-token keys and values at
the same bit width for kivi.

What each method accepts is declared in `ptq.support`; the runners are `ptq.runners.<method>`; the
records `ptq.records`. Before anything is captured the scheme is checked against every selected layer's
shape (`support.check_layer`), and a folding method (awq, smoothquant) takes its scale groups from the
model's architecture (`ptq.architectures`: refused when it has none) and folds random scales into the
float model on the first calibration batch (`structure.fold_check`, the model put back after): refused
when the logits move by more than FOLD_TOLERANCE (1e-4, relative), reported as `ptq.<method>.fold_check`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.awq import run_awq
from precisionlab.ptq.runners.common import Progress, Runner
from precisionlab.ptq.runners.gptq import run_weight_only
from precisionlab.ptq.runners.kivi import run_kivi
from precisionlab.ptq.runners.llm_int8 import run_llm_int8
from precisionlab.ptq.runners.smoothquant import norm_groups, run_smoothquant
from precisionlab.ptq.structure import FOLD_TOLERANCE, fold_check, linear_names, scale_groups
from precisionlab.ptq.support import (
    FOLDING,
    METHODS,
    OPTIONS,
    WEIGHT_ONLY,
    check_layer,
    check_method,
    check_scheme,
    method_options,
)

__all__ = ["METHODS", "OPTIONS", "WEIGHT_ONLY", "LayerRecord", "PTQResult", "check_method", "method_options",
           "run_method"]

RUNNERS: dict[str, Runner] = {"rtn": run_weight_only, "gptq": run_weight_only, "llm_int8": run_llm_int8,
                              "kivi": run_kivi}


def run_method(model: Any, method: str, scheme: str | None, calibration: Sequence[Any], *,
               evaluation: Sequence[Any] | None = None, blocks: Sequence[int] | None = None,
               layers: Sequence[str] | None = None, options: dict[str, Any] | None = None,
               progress: Progress | None = None) -> PTQResult:
    """Run `method` with `scheme` on the selected linear layers (all blocks when neither `blocks` nor
    `layers` is given; embeddings and lm_head are never selected by `blocks`).

    `calibration` and `evaluation` are token batches (LongTensor (b, t), e.g. from
    `calibration.token_batches`) of the calibration and evaluation parts of the data."""
    name, opts = method_options(method, options)
    if not calibration:
        raise ValueError("no calibration batches: give token batches of the calibration data")
    names = list(layers) if layers is not None else linear_names(model, blocks)
    if not names:
        raise ValueError("no linear layers selected")
    scheme_text = check_scheme(name, scheme, opts)
    modules = dict(model.named_modules())
    for n in names:  # before any capture: a scheme that cannot store a layer's shape fails now, not after it
        check_layer(name, scheme_text, tuple(modules[n].weight.shape))
    start = time.perf_counter()
    meter = MemoryMeter()
    if name in FOLDING:
        groups = scale_groups(model, names, method=name)
        if name == "smoothquant":
            groups = norm_groups(model, groups)
        change = fold_check(model, groups, calibration[0])
        if not change <= FOLD_TOLERANCE:
            raise ValueError(f"{name}: folding random scales into {len(groups)} group(s) of this model moved its "
                             f"logits by {change:.3g} (relative), more than {FOLD_TOLERANCE:g}: its folds are not "
                             "exact, refused")
        runner = run_awq if name == "awq" else run_smoothquant
        result = runner(model, name, scheme_text, names, calibration, evaluation, opts, meter, progress,
                        groups=groups)
        result.summary["fold_check"] = change
    else:
        result = RUNNERS[name](model, name, scheme_text, names, calibration, evaluation, opts, meter, progress)
    result.seconds = time.perf_counter() - start
    result.peak_mb = meter.peak_mb
    result.memory_source = meter.source
    result.options = opts
    return result
