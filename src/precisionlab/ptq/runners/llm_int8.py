"""LLM.int8() over a model: per layer the int8 + fp16-outlier decomposition (`ptq.llm_int8.llm_int8_matmul`)
on the kept token sample, against the fp16 layer, beside plain int8 (no outlier columns); the stored weight
is the int8 row-wise one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab.ptq.activations import relative_error
from precisionlab.ptq.llm_int8 import fp16_output, llm_int8_matmul, quantize_weight
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.common import Progress, captures, each_layer, layer_weights, sample_parts


def run_llm_int8(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                 evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                 progress: Progress | None) -> PTQResult:
    cal, ev = captures(model, names, calibration, evaluation, meter, keep=int(opts["samples"]), progress=progress)
    weights = layer_weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    threshold = float(opts["threshold"])

    def measure(record: LayerRecord, w: np.ndarray, bias: np.ndarray | None) -> None:
        n = record.name
        wq = quantize_weight(w)
        result.quantized[n] = wq
        for part, x in sample_parts(cal, ev, n):
            b16 = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float16).astype(np.float64)
            reference = fp16_output(x, w) + b16
            product = llm_int8_matmul(x, w, threshold, wq, str(opts["outlier_weights"]), str(opts["token_absmax"]))
            mixed = product.output + b16
            plain = llm_int8_matmul(x, w, math.inf, wq).output + b16
            setattr(record, f"{part}output_error", relative_error(reference, mixed))
            setattr(record, f"rtn_{part}output_error", relative_error(reference, plain))
            record.details[f"{part}outlier_columns"] = int(product.outlier_columns.size)
            if not part:
                fp32 = x.astype(np.float64) @ w.astype(np.float64).T + (0.0 if bias is None else bias)
                record.details["fp32_output_error"] = relative_error(fp32, mixed)
        record.tokens = cal.stats[n].samples.shape[0]

    each_layer(result, names, weights, meter, progress, measure)
    return result
