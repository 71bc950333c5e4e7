"""GPTQ (and RTN, the same weight-only loop without the error feedback) over a model's layers.

Every layer is quantized from its own captured input statistics: RTN is `quant.quantize` of the weight,
GPTQ `ptq.gptq.gptq_quantize` with the layer's Hessian 2 X^T X / n. Both are measured against RTN of
the same scheme over every calibration token (and every held-out one), exactly, from X^T X.

Memory: the inputs are captured one block at a time (`by_block`: the same statistics as one capture of
every layer, since nothing is written into the model in between), so one block's Hessians (calibration and
held-out) and one block's float weight copies are held at a time, beside the model.

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
from precisionlab.ptq.structure import block_of
from precisionlab.quant import quantize


def run_weight_only(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                    evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                    progress: Progress | None) -> PTQResult:
    """RTN or GPTQ (`method`) of every named layer, captured block by block (`by_block`) or in GPTQ's sequential
    stages."""
    weights: dict[str, Any] = {}
    result = PTQResult(method, scheme, [])
    records: dict[str, LayerRecord] = {}
    mode = opts.get("sequential", "off") if method == "gptq" else "off"
    gptq_opts = {k: v for k, v in opts.items() if k != "sequential"}

    def quantize_layers(layers: Sequence[str], cal: Capture, ev: Capture | None) -> None:
        weights.update(layer_weights(model, [n for n in layers if n not in weights]))
        for n in layers:
            records[n] = quantize_layer(method, scheme, n, weights[n], cal.stats[n], ev.stats[n] if ev else None,
                                        gptq_opts, meter, result)
            tick(progress, n, len(records), len(names))
            del weights[n]  # its float copy is no longer needed

    if mode == "off":
        for group in by_block(names):  # one block's statistics (its Hessians) at a time
            cal, ev = captures(model, group, calibration, evaluation, meter, progress=progress)
            if not result.calibration_tokens:
                result.calibration_tokens, result.evaluation_tokens = cal.tokens, ev.tokens if ev else 0
            quantize_layers(group, cal, ev)
            del cal, ev
    else:
        sequential(model, names, mode, calibration, evaluation, meter, progress, result, quantize_layers)
    result.layers = [records[n] for n in names]
    return result


def by_block(names: Sequence[str]) -> list[list[str]]:
    """The names grouped by transformer block, in order of first appearance (a name outside the blocks, its own
    group of those). Every layer still sees the float model's inputs (nothing is written between captures), so
    capturing group by group gives each layer the same statistics as one capture of all, with one block's
    Hessians in memory at a time; each capture's forward stops after its block."""
    groups: dict[int | None, list[str]] = {}
    for n in names:
        groups.setdefault(block_of(n), []).append(n)
    return list(groups.values())


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
