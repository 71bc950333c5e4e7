"""What every method runner shares: the captures, the layers' float weights, the per-layer loop, the folds.

    captures(model, names, calibration, evaluation, meter, ...)   the calibration (and held-out) inputs
    layer_weights(model, names)                                    name -> (float32 weight, bias) copies
    each_layer(result, names, weights, meter, progress, measure)   the loop of SmoothQuant, LLM.int8()
                                                                   and AWQ: a record per layer, measured
                                                                   by `measure(record, weight, bias)`,
                                                                   timed, appended, ticked
    Folds                                                          the scales a folding method chose:
                                                                   per layer its input (column) scales
                                                                   and its output (row) scales
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from precisionlab.ptq.activations import InputStatistics, LayerOutputError
from precisionlab.ptq.calibration import Capture, capture, check_tokens
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.structure import ScaleGroup

Progress = Callable[[str, int, int], None]
Weights = dict[str, tuple[np.ndarray, np.ndarray | None]]
Measure = Callable[[LayerRecord, np.ndarray, np.ndarray | None], None]
"""measure(record, weight, bias): fills one layer's record (`each_layer`)."""
Runner = Callable[[Any, str, str, Sequence[str], Sequence[Any], Sequence[Any] | None, dict[str, Any], MemoryMeter,
                   Progress | None], PTQResult]
"""runner(model, method, scheme, names, calibration, evaluation, options, meter, progress) -> PTQResult."""


def captures(model: Any, names: Sequence[str], calibration: Sequence[Any], evaluation: Sequence[Any] | None,
             meter: MemoryMeter, keep: int = 0, modules: Sequence[str] = (), module_tokens: int = 512,
             progress: Progress | None = None) -> tuple[Capture, Capture | None]:
    """The layers' inputs over the calibration batches (and the evaluation ones, when given)."""
    with meter.section():
        cal = capture(model, names, calibration, keep=keep, modules=modules, module_tokens=module_tokens,
                      progress=progress)
        ev = None
        if evaluation:
            ev = capture(model, names, evaluation, keep=keep,
                         progress=None if progress is None else lambda _s, d, t: progress("evaluation", d, t))
    check_tokens(cal.stats)
    return cal, ev


def layer_weights(model: Any, names: Sequence[str]) -> Weights:
    """name -> (its weight as a float32 numpy copy, its bias likewise or None)."""
    modules = dict(model.named_modules())
    out = {}
    for n in names:
        m = modules[n]
        bias = None if getattr(m, "bias", None) is None else m.bias.detach().float().numpy().copy()
        out[n] = (m.weight.detach().float().numpy().copy(), bias)
    return out


def weight_errors(record: LayerRecord, w: np.ndarray, bias: np.ndarray | None, w_eff: np.ndarray, w_rtn: np.ndarray,
                  cal: InputStatistics | LayerOutputError, ev: InputStatistics | None) -> None:
    """The record's output errors of a weight-only result (w_eff) and of RTN (w_rtn), over every calibration
    token and, given `ev`, every held-out one (exact, from X^T X)."""
    meter = cal if isinstance(cal, LayerOutputError) else LayerOutputError(w, cal, bias)
    record.output_error = meter(w_eff)
    record.rtn_output_error = meter(w_rtn)
    record.tokens = meter.stats.n
    if ev is not None:
        eval_meter = LayerOutputError(w, ev, bias)
        record.eval_output_error = eval_meter(w_eff)
        record.rtn_eval_output_error = eval_meter(w_rtn)


def tick(progress: Progress | None, step: str, done: int, total: int) -> None:
    if progress is not None:
        progress(step, done, total)


def sample_parts(cal: Capture, ev: Capture | None, name: str) -> Iterator[tuple[str, np.ndarray]]:
    """("", the layer's kept calibration inputs), then ("eval_", its held-out ones) when there are any: the
    record field prefix and the samples the activation-quantizing methods are measured on."""
    yield "", cal.stats[name].samples
    if ev is not None:
        yield "eval_", ev.stats[name].samples


def each_layer(result: PTQResult, names: Sequence[str], weights: Weights, meter: MemoryMeter,
               progress: Progress | None, measure: Measure) -> None:
    """For every layer, in order: a LayerRecord, filled by `measure(record, weight, bias)` inside a timed
    memory section (its seconds and peak added to the record's), appended to `result.layers`, one tick."""
    for i, n in enumerate(names):
        w, bias = weights[n]
        record = LayerRecord(n, tuple(w.shape))
        with meter.section() as sec:
            measure(record, w, bias)
        record.seconds += sec.seconds
        record.peak_mb = sec.peak_mb
        result.layers.append(record)
        tick(progress, n, i + 1, len(names))


class Folds:
    """The per-input-channel scales a folding method chose, group by group: each group's layers get them on
    their input columns, the group's previous linear (when it is one of the selected layers) on its output
    rows, and the group is recorded in `result.folds`."""

    def __init__(self, result: PTQResult, selected: Sequence[str]) -> None:
        self.result = result
        self.selected = set(selected)
        self.columns: dict[str, np.ndarray] = {}
        self.rows: dict[str, np.ndarray] = {}

    def add(self, group: ScaleGroup, scales: np.ndarray) -> None:
        for n in group.layers:
            self.columns[n] = scales
        if group.prev in self.selected:
            self.rows[group.prev] = scales
        self.result.folds.append((group, scales))

    def of(self, name: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(column scales, row scales) of a layer (None where no fold touches it)."""
        return self.columns.get(name), self.rows.get(name)
