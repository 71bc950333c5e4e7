"""GPTQ (and RTN, the same weight-only loop without the error feedback) over a model's layers.

Every layer is quantized from its own captured input statistics: RTN is `quant.quantize` of the weight,
GPTQ `ptq.gptq.gptq_quantize` with the layer's Hessian 2 X^T X / n. Both are measured against RTN of
the same scheme over every calibration token (and every held-out one), exactly, from X^T X.

With the GPTQ option `sequential` (`support.SEQUENTIAL`) the layers are calibrated in stages, each on
the inputs the model gives with the earlier stages quantized (`runners.sequential`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab.ptq.activations import InputStatistics, output_error
from precisionlab.ptq.calibration import Capture
from precisionlab.ptq.gptq import gptq_quantize
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.common import Progress, captures, layer_weights, tick, weight_errors
from precisionlab.ptq.runners.sequential import sequential
from precisionlab.quant import quantize


def run_weight_only(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                    evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                    progress: Progress | None) -> PTQResult:
    """RTN or GPTQ (`method`) of every named layer, in one capture or in GPTQ's sequential stages."""
    weights = layer_weights(model, names)
    result = PTQResult(method, scheme, [])
    records: dict[str, LayerRecord] = {}
    mode = opts.get("sequential", "off") if method == "gptq" else "off"
    gptq_opts = {k: v for k, v in opts.items() if k != "sequential"}

    def quantize_layers(layers: Sequence[str], cal: Capture, ev: Capture | None) -> None:
        for n in layers:
            records[n] = quantize_layer(method, scheme, n, weights[n], cal.stats[n], ev.stats[n] if ev else None,
                                        gptq_opts, meter, result)
            tick(progress, n, len(records), len(names))

    if mode == "off":
        cal, ev = captures(model, names, calibration, evaluation, meter, progress=progress)
        result.calibration_tokens, result.evaluation_tokens = cal.tokens, ev.tokens if ev else 0
        quantize_layers(names, cal, ev)
    else:
        sequential(model, names, mode, calibration, evaluation, meter, progress, result, quantize_layers)
    result.layers = [records[n] for n in names]
    return result


def quantize_layer(method: str, scheme: str, name: str, weight: tuple[np.ndarray, np.ndarray | None],
                   cal: InputStatistics, ev: InputStatistics | None, opts: dict[str, Any], meter: MemoryMeter,
                   result: PTQResult) -> LayerRecord:
    """RTN or GPTQ of one layer on its captured inputs; the quantized weight goes into result.quantized."""
    w, bias = weight
    record = LayerRecord(name, tuple(w.shape))
    rtn = quantize(w, scheme)
    w_rtn = rtn.dequantize()
    with meter.section() as sec:
        if method == "rtn":
            q, w_eff = rtn, w_rtn
        else:
            r = gptq_quantize(w, cal.hessian(), scheme, **opts)
            record.details = {"damping": r.damping, "damping_tries": r.damping_tries,
                              "dead_columns": r.dead_columns}
            if r.status != "ok" or r.quantized is None or r.weight is None:
                record.status, record.note = "failed", r.message
                q = None
            else:
                q, w_eff = r.quantized, r.weight
    record.seconds, record.peak_mb = sec.seconds, sec.peak_mb
    if q is not None:
        result.quantized[name] = q
        weight_errors(record, w, bias, w_eff, w_rtn, cal, ev)
    else:
        record.rtn_output_error = output_error(w, w_rtn, cal, bias)
    return record
