"""AWQ over a model: per scale group a searched per-input-channel scale (`ptq.awq.search_scales`), folded
into the op before the group; then per layer the folded weight quantized, with the clipping search
(`ptq.awq.quantize_layer`), and measured against RTN of the same scheme over every calibration token.

A group's scale is judged by its inspected module's output (option objective="block": the attention for
q/k/v, the MLP for gate/up, as the reference implementation does) on the captured calibration inputs, or
by the layers' own outputs (objective="linear", or a single following linear). The groups come from the
model's architecture (`ptq.architectures`), checked by folding random scales first (`structure.fold_check`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.models.weights import replace_weights
from precisionlab.ptq import awq as awq_mod
from precisionlab.ptq.activations import LayerOutputError
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.common import Folds, Progress, captures, each_layer, layer_weights, tick, weight_errors
from precisionlab.ptq.structure import ScaleGroup
from precisionlab.quant import quantize
from precisionlab.quant.scheme import parse_scheme


def run_awq(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
            evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter, progress: Progress | None,
            groups: Sequence[ScaleGroup] = ()) -> PTQResult:
    """AWQ of the named layers with the scale groups `groups` (the model's, checked by the caller)."""
    torch = peers.torch("AWQ")
    s = parse_scheme(scheme)
    modules = dict(model.named_modules())
    inspect = [g.inspect for g in groups
               if opts["objective"] == "block" and not isinstance(modules[g.inspect], torch.nn.Linear)]
    cal, ev = captures(model, names, calibration, evaluation, meter, modules=inspect,
                       module_tokens=int(opts["module_tokens"]), progress=progress)
    weights = layer_weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    folds = Folds(result, names)
    search: dict[str, awq_mod.ScaleSearch] = {}
    search_seconds: dict[str, float] = {}
    for gi, g in enumerate(groups):
        stats = cal.stats[g.layers[0]]
        ws = [weights[n][0] for n in g.layers]
        with meter.section() as sec:
            if g.inspect in cal.module_inputs:
                loss = module_objective(model, g, cal.module_inputs[g.inspect], s, ws)
            else:
                loss = awq_mod.linear_objective(ws, stats, s)
            # a single layer judged by its own output needs no guard: its objective is that error
            own = g.inspect not in cal.module_inputs and len(g.layers) == 1
            guard = awq_mod.layer_guard(ws, stats, s) if opts["guard"] and not own else None
            found = awq_mod.search_scales(stats.mean_abs(), ws, s, loss, int(opts["n_grid"]),
                                          bool(opts["duo_scaling"]), guard)
        for n in g.layers:
            search[n] = found
            search_seconds[n] = sec.seconds / len(g.layers)
        if found.alpha is not None:
            folds.add(g, found.scales)
        tick(progress, f"scales {g.prev}", gi + 1, len(groups))

    def measure(record: LayerRecord, w: np.ndarray, bias: np.ndarray | None) -> None:
        n = record.name
        w_rtn = quantize(w, s).dequantize()
        c, r = folds.of(n)
        layer_error = LayerOutputError(w, cal.stats[n], bias)
        q, w_eff, ratios = awq_mod.quantize_layer(w, s, c, r, layer_error, bool(opts["clip"]), n)
        record.seconds = search_seconds.get(n, 0.0)
        found_n = search.get(n)
        record.details = {
            "alpha": None if found_n is None else found_n.alpha,
            "scaled": n in folds.columns,
            "clipped_fraction": None if ratios is None else float(np.mean(ratios < 1)),
        }
        if found_n is None:
            record.note = "no preceding op to fold scales into: clipping only"
        result.quantized[n] = q
        weight_errors(record, w, bias, w_eff, w_rtn, layer_error, ev.stats[n] if ev else None)

    each_layer(result, names, weights, meter, progress, measure)
    return result


def module_objective(model: Any, group: ScaleGroup, inputs: list[tuple[tuple[Any, ...], dict[str, Any]]],
                     scheme: Any, weights: Sequence[np.ndarray]) -> Callable[[np.ndarray | None], float]:
    """loss(s): mean squared error of the inspected module's output with the group's layers quantized
    (Q(W diag s) diag(1/s)) against its full-precision output, on the captured calibration inputs."""
    torch = peers.torch("AWQ")
    modules = dict(model.named_modules())
    block = modules[group.inspect]
    layers = [modules[n] for n in group.layers]

    def run() -> list[Any]:
        with torch.no_grad():
            return [_first(block(*args, **kwargs)).double() for args, kwargs in inputs]

    reference = run()
    count = sum(r.numel() for r in reference)

    held = sum(layer.weight.numel() * layer.weight.element_size() for layer in layers)

    def loss(scales: np.ndarray | None) -> float:
        values = ((layer.weight, awq_mod.scaled_weight(w, scheme, scales).astype(np.float32))
                  for layer, w in zip(layers, weights, strict=True))
        # the group's originals stay in memory (the grid asks 20 times per group), nothing else is kept
        with replace_weights(model, values, spill_above=held):
            outputs = run()
        return float(sum(((o - r) ** 2).sum() for o, r in zip(outputs, reference, strict=True))) / count

    return loss


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output
