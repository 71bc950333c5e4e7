"""SmoothQuant over a model: per scale group (the layers after a norm) the smoothing scales of a migration
strength alpha (fixed, or searched with alpha="auto"), folded into the norm; then per layer the W8A8
output (the smoothed weight and the per-token quantized smoothed input) measured on the kept token sample
against the float layer, beside the same W8A8 without smoothing.

The scales fold into the preceding norm only (the paper's recipe): a previous linear's rows scaled by 1/s
would change that linear's own 8-bit grid, which per-tensor weight scales punish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab.ptq.activations import relative_error
from precisionlab.ptq.awq import rescale
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.common import Folds, Progress, captures, each_layer, layer_weights, sample_parts
from precisionlab.ptq.smoothquant import check_w8a8, search_alpha, smoothing_scales, w8a8_output
from precisionlab.ptq.structure import ScaleGroup
from precisionlab.quant import quantize


def norm_groups(model: Any, groups: Sequence[ScaleGroup]) -> list[ScaleGroup]:
    """The groups whose previous op is not a linear (a norm): the ones SmoothQuant folds into."""
    modules = dict(model.named_modules())
    return [g for g in groups if not hasattr(modules[g.prev], "out_features")]


def run_smoothquant(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                    evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                    progress: Progress | None, groups: Sequence[ScaleGroup] = ()) -> PTQResult:
    """SmoothQuant of the named layers with the norm groups `groups` (`norm_groups` of the model's)."""
    w_scheme, a_scheme = check_w8a8(scheme, opts["act_scheme"])
    cal, ev = captures(model, names, calibration, evaluation, meter, keep=int(opts["samples"]), progress=progress)
    weights = layer_weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    folds = Folds(result, names)
    alpha_opt = opts["alpha"]
    chosen: dict[str, float | None] = {}
    for g in groups:
        stats = cal.stats[g.layers[0]]
        ws = [weights[n][0] for n in g.layers]
        if alpha_opt == "auto":
            alpha, scales = search_alpha([stats.samples] * len(ws), ws, stats.abs_max, w_scheme, a_scheme)
        else:
            alpha, scales = float(alpha_opt), smoothing_scales(stats.abs_max, ws, float(alpha_opt))
        for n in g.layers:
            chosen[n] = alpha
        if alpha is not None:
            folds.add(g, scales)

    def measure(record: LayerRecord, w: np.ndarray, bias: np.ndarray | None) -> None:
        n = record.name
        record.details = {"smoothed": n in folds.columns, "alpha": chosen.get(n), "act_scheme": str(a_scheme)}
        c, r = folds.of(n)
        result.quantized[n] = quantize(rescale(w, c, r), w_scheme)
        for part, x in sample_parts(cal, ev, n):
            extra = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
            y = x.astype(np.float64) @ w.astype(np.float64).T + extra
            smoothed = w8a8_output(x, w, w_scheme, a_scheme, c, r) + extra
            plain = w8a8_output(x, w, w_scheme, a_scheme) + extra
            setattr(record, f"{part}output_error", relative_error(y, smoothed))
            setattr(record, f"rtn_{part}output_error", relative_error(y, plain))
        if n not in chosen:
            record.note = "no preceding op to fold smoothing scales into: plain W8A8"
        elif n not in folds.columns:
            record.note = "no alpha beat plain W8A8 on the calibration sample: not smoothed"
        record.tokens = cal.stats[n].samples.shape[0]

    each_layer(result, names, weights, meter, progress, measure)
    return result
