"""Run one PTQ method over a model's linear layers and measure every layer against the baseline.

    result = run_method(model, "gptq", "int4:g128", calibration_batches,
                        evaluation=evaluation_batches, blocks=[0, 1])
    result.layers          one LayerRecord per layer: output error (method and baseline, on the
                           calibration activations and, given `evaluation`, on held-out ones),
                           time, peak memory, method details (damping, alpha, outliers ...)
    result.findings()      the `ptq.<method>.*` keys (see docs/ptq.md)
    result.apply(model)    write the quantized weights (and AWQ's folds) into the model

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
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.ptq import awq as awq_mod
from precisionlab.ptq import kivi as kivi_mod
from precisionlab.ptq.activations import InputStatistics, LayerOutputError, output_error, relative_error
from precisionlab.ptq.calibration import (
    CalibrationWarning,
    Capture,
    block_calls,
    cache_keyword,
    capture,
    check_tokens,
    next_block_calls,
)
from precisionlab.ptq.gptq import gptq_quantize
from precisionlab.ptq.grid import check_columnwise
from precisionlab.ptq.llm_int8 import THRESHOLD, check_options, fp16_output, llm_int8_matmul, quantize_weight
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.peers import require_torch
from precisionlab.ptq.smoothquant import DEFAULT_ALPHA, check_w8a8, search_alpha, smoothing_scales, w8a8_output
from precisionlab.ptq.structure import ScaleGroup, block_of, fold_scales, linear_names, scale_groups
from precisionlab.ptq.structure import blocks as model_blocks
from precisionlab.quant import quantize
from precisionlab.quant.scheme import parse_scheme
from precisionlab.quant.tensor import QuantizedTensor

METHODS = ("rtn", "gptq", "awq", "smoothquant", "llm_int8", "kivi")
WEIGHT_ONLY = ("rtn", "gptq", "awq")

OPTIONS: dict[str, dict[str, Any]] = {
    "rtn": {},
    "gptq": {"block_size": 128, "damp": 0.01, "damp_growth": 2.0, "max_damp": 1.0, "act_order": False,
             "static_groups": False, "dtype": "float32", "sequential": "off"},
    "awq": {"n_grid": 20, "duo_scaling": True, "clip": True, "objective": "block", "guard": True,
            "module_tokens": 512},
    "smoothquant": {"alpha": DEFAULT_ALPHA, "act_scheme": None, "samples": 512},
    "llm_int8": {"threshold": THRESHOLD, "outlier_weights": "int8", "token_absmax": "columns", "samples": 512},
    "kivi": {"group": kivi_mod.DEFAULT_GROUP, "residual": kivi_mod.DEFAULT_RESIDUAL, "prefill": 256,
             "max_kl": None},
}
"""Each method's options and their defaults (`run_method(..., options={...})`)."""

Progress = Callable[[str, int, int], None]


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
    summary: dict[str, float] = field(default_factory=dict)
    """Model-level numbers (kivi: KL on long text, cache bytes)."""

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

    def apply(self, model: Any) -> None:
        """Write the result into the model in place: AWQ's folds, then every quantized layer's
        dequantized weight (what a kernel reading the stored weight computes with).

        Only the weight-only methods (rtn, gptq, awq) change nothing but weights; the others also
        quantize activations or the KV cache at run time, which this does not install."""
        if self.method not in WEIGHT_ONLY:
            raise ValueError(f"apply writes weights; {self.method} also quantizes activations or the KV cache at run "
                             "time, which needs the model's activation / KV-cache hooks (ptq.install.ptq_candidate "
                             "installs both)")
        self.apply_weights(model)

    def apply_weights(self, model: Any) -> None:
        """The weight part of any method, in place: the folds (AWQ's, SmoothQuant's), then every quantized
        layer's dequantized weight. For smoothquant and llm_int8 the model is then only half installed: their
        activation quantization runs at forward time (ptq.install adds it); kivi changes no weight."""
        torch = require_torch("apply")
        modules = dict(model.named_modules())
        for group, scales in self.folds:
            fold_scales(model, group, scales)
        with torch.no_grad():
            for name, q in self.quantized.items():
                weight = modules[name].weight
                weight.copy_(torch.from_numpy(q.dequantize()).to(weight.dtype))


def _mean(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


# --------------------------------------------------------------------------- entry point
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
    scheme_text = _check_scheme(name, scheme, opts)
    start = time.perf_counter()
    meter = MemoryMeter()
    runner = {"rtn": _weight_only, "gptq": _weight_only, "awq": _awq, "smoothquant": _smoothquant,
              "llm_int8": _llm_int8, "kivi": _kivi}[name]
    result = runner(model, name, scheme_text, names, calibration, evaluation, opts, meter, progress)
    result.seconds = time.perf_counter() - start
    result.peak_mb = meter.peak_mb
    result.memory_source = meter.source
    result.options = opts
    return result


def check_method(method: str, scheme: str | None, options: dict[str, Any] | None = None) -> str:
    """The canonical scheme text `run_method` would use, or ValueError when the method, an option or the
    scheme does not apply (checked before any model is loaded)."""
    name, opts = method_options(method, options)
    return _check_scheme(name, scheme, opts)


def method_options(method: str, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(the method's name, its defaults updated by `options`), or ValueError naming an unknown method or
    option."""
    name = str(method).lower()
    if name not in METHODS:
        raise ValueError(f"unknown PTQ method {method!r}; choose one of {', '.join(METHODS)}")
    opts = dict(OPTIONS[name])
    unknown = sorted(set(options or {}) - set(opts))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {name}; its options: {', '.join(opts) or 'none'}")
    opts.update(options or {})
    return name, opts


def _check_scheme(method: str, scheme: str | None, opts: dict[str, Any]) -> str:
    """The canonical scheme text, or ValueError when the method does not apply to it."""
    if method == "kivi":
        cfg = kivi_mod.kivi_config(scheme, opts["group"], opts["residual"])
        return f"int{cfg.bits}"
    if method == "llm_int8":
        check_options(opts["outlier_weights"], opts["token_absmax"])
        if scheme is not None:
            s = parse_scheme(scheme)
            if s.element != "int8" or s.granularity.value not in ("row", "tensor") or not s.symmetric or s.outliers:
                raise ValueError(f"LLM.int8() is a fixed recipe (int8 row-wise weights, token-wise activations, fp16 "
                                 f"outlier columns); scheme {s} does not apply: pass int8 or int8:row")
        return "int8:row:scale=fp32"
    if scheme is None:
        raise ValueError(f"{method} needs a scheme (e.g. int4:g128)")
    if method == "smoothquant":
        w, a = check_w8a8(scheme, opts["act_scheme"])
        opts["act_scheme"] = str(a)
        alpha = opts["alpha"]
        if alpha != "auto" and not (isinstance(alpha, (int, float)) and 0 <= float(alpha) <= 1):
            raise ValueError(f"SmoothQuant alpha must be a number in [0, 1] or 'auto', got {alpha!r}")
        return str(w)
    if method == "gptq":
        s = check_columnwise(scheme, (1, 1))
        grouped = s.granularity.value in ("group", "tile", "block", "col")
        if opts["act_order"] and grouped and not opts["static_groups"]:
            raise ValueError(f"act_order with the grouped scheme {s} needs static_groups=True: groups fitted in the "
                             "permuted order are not the scheme's layout (they need a g_idx)")
        if int(opts["block_size"]) < 1 or not 0 < float(opts["damp"]) <= float(opts["max_damp"]):
            raise ValueError("GPTQ needs block_size >= 1 and 0 < damp <= max_damp")
        if opts["dtype"] not in ("float32", "float64"):
            raise ValueError(f"GPTQ dtype must be 'float32' or 'float64', got {opts['dtype']!r}")
        if opts["sequential"] not in SEQUENTIAL:
            raise ValueError(f"GPTQ sequential must be one of {', '.join(SEQUENTIAL)}, got {opts['sequential']!r}")
        return str(s)
    if method == "awq" and opts["objective"] not in ("block", "linear"):
        raise ValueError(f"AWQ objective must be 'block' or 'linear', got {opts['objective']!r}")
    return str(parse_scheme(scheme))


def _captures(model: Any, names: Sequence[str], calibration: Sequence[Any], evaluation: Sequence[Any] | None,
              meter: MemoryMeter, keep: int = 0, modules: Sequence[str] = (), module_tokens: int = 512,
              progress: Progress | None = None) -> tuple[Capture, Capture | None]:
    with meter.section():
        cal = capture(model, names, calibration, keep=keep, modules=modules, module_tokens=module_tokens,
                      progress=progress)
        ev = None
        if evaluation:
            ev = capture(model, names, evaluation, keep=keep,
                         progress=None if progress is None else lambda _s, d, t: progress("evaluation", d, t))
    check_tokens(cal.stats)
    return cal, ev


def _weights(model: Any, names: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    modules = dict(model.named_modules())
    out = {}
    for n in names:
        m = modules[n]
        bias = None if getattr(m, "bias", None) is None else m.bias.detach().float().numpy().copy()
        out[n] = (m.weight.detach().float().numpy().copy(), bias)
    return out


def _errors(record: LayerRecord, w: np.ndarray, bias: np.ndarray | None, w_eff: np.ndarray, w_rtn: np.ndarray,
            cal: InputStatistics | LayerOutputError, ev: InputStatistics | None) -> None:
    meter = cal if isinstance(cal, LayerOutputError) else LayerOutputError(w, cal, bias)
    record.output_error = meter(w_eff)
    record.rtn_output_error = meter(w_rtn)
    record.tokens = meter.stats.n
    if ev is not None:
        eval_meter = LayerOutputError(w, ev, bias)
        record.eval_output_error = eval_meter(w_eff)
        record.rtn_eval_output_error = eval_meter(w_rtn)


def _tick(progress: Progress | None, step: str, done: int, total: int) -> None:
    if progress is not None:
        progress(step, done, total)


def _sample_parts(cal: Capture, ev: Capture | None, name: str) -> Iterator[tuple[str, np.ndarray]]:
    """("", the layer's kept calibration inputs), then ("eval_", its held-out ones) when there are any: the
    record field prefix and the samples the activation-quantizing methods are measured on."""
    yield "", cal.stats[name].samples
    if ev is not None:
        yield "eval_", ev.stats[name].samples


# --------------------------------------------------------------------------- rtn, gptq
SEQUENTIAL = ("off", "block", "layer")
"""GPTQ's calibration order (option `sequential`):
    off    every layer on the full-precision model's inputs (one capture)
    block  block by block, each block's layers on the inputs the model gives while the blocks before it
           hold their quantized weights (the GPTQ paper's reference code)
    layer  also inside a block: each set of layers reading one input (q/k/v, o, gate/up, down) on the inputs
           given while the sets before it, in module order, are quantized (AutoGPTQ's true_sequential)"""


def _weight_only(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                 evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                 progress: Progress | None) -> PTQResult:
    weights = _weights(model, names)
    result = PTQResult(method, scheme, [])
    records: dict[str, LayerRecord] = {}
    mode = opts.get("sequential", "off") if method == "gptq" else "off"
    gptq_opts = {k: v for k, v in opts.items() if k != "sequential"}

    def quantize_layers(layers: Sequence[str], cal: Capture, ev: Capture | None) -> None:
        for n in layers:
            records[n] = _weight_only_layer(method, scheme, n, weights[n], cal.stats[n],
                                            ev.stats[n] if ev else None, gptq_opts, meter, result)
            _tick(progress, n, len(records), len(names))

    if mode == "off":
        cal, ev = _captures(model, names, calibration, evaluation, meter, progress=progress)
        result.calibration_tokens, result.evaluation_tokens = cal.tokens, ev.tokens if ev else 0
        quantize_layers(names, cal, ev)
    else:
        _sequential(model, names, mode, calibration, evaluation, meter, progress, result, quantize_layers)
    result.layers = [records[n] for n in names]
    return result


def _sequential(model: Any, names: Sequence[str], mode: str, calibration: Sequence[Any],
                evaluation: Sequence[Any] | None, meter: MemoryMeter, progress: Progress | None, result: PTQResult,
                quantize_layers: Callable[[Sequence[str], Capture, Capture | None], None]) -> None:
    """Calibrate and quantize `names` in stages (SEQUENTIAL), each stage captured with the earlier stages'
    quantized weights written into the model; every weight is restored when done (or on an error).

    Block layers are captured on their own block only, run on its recorded inputs (`block_calls`), and the
    next block's inputs come from running the quantized block (`next_block_calls`): one pass of the block
    per stage and one to hand its output on, instead of a forward from the embeddings per stage. Layers
    outside the blocks come last, each stage captured by whole-model forwards."""
    torch = require_torch("sequential GPTQ")
    modules = dict(model.named_modules())
    prefix, children = model_blocks(model)
    originals = {n: modules[n].weight.detach().clone() for n in names}
    by_block: dict[int | None, list[str]] = {}
    for n in names:
        b = block_of(n)
        inside = b is not None and b < len(children) and n.startswith(f"{prefix}.{b}." if prefix else f"{b}.")
        by_block.setdefault(b if inside else None, []).append(n)

    def stages(layers: list[str], cal_batches: Sequence[Any], ev_batches: Sequence[Any] | None) -> None:
        if not layers:
            return
        if mode == "block":
            sets = [layers]
        else:  # the sets of layers reading one input, in module order, from one batch's forward
            shared = capture(model, layers, cal_batches[:1]).shared_with
            sets = [[n for n in layers if shared[n] == leader] for leader in dict.fromkeys(shared[n] for n in layers)]
        for stage in sets:
            first = not result.calibration_tokens  # the progress of the first capture only
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CalibrationWarning)  # checked below, for this stage's layers
                cal, ev = _captures(model, stage, cal_batches, ev_batches, meter, progress=progress if first else None)
            if first:
                result.calibration_tokens, result.evaluation_tokens = cal.tokens, ev.tokens if ev else 0
            check_tokens(cal.stats)
            quantize_layers(stage, cal, ev)
            with torch.no_grad():
                for n in stage:
                    if n in result.quantized:
                        w = modules[n].weight
                        w.copy_(torch.from_numpy(result.quantized[n].dequantize()).to(w.dtype))

    numbered = sorted(b for b in by_block if b is not None)
    try:
        if numbered:
            with meter.section():
                block = f"{prefix}.{numbered[0]}" if prefix else str(numbered[0])
                cal_calls = block_calls(model, block, calibration)
                ev_calls = block_calls(model, block, evaluation) if evaluation else None
            for b in range(numbered[0], numbered[-1] + 1):
                stages(list(by_block.get(b, [])), cal_calls, ev_calls)
                if b < numbered[-1]:
                    cal_calls = next_block_calls(cal_calls, children[b + 1])
                    ev_calls = next_block_calls(ev_calls, children[b + 1]) if ev_calls else None
        if None in by_block:
            stages(list(by_block[None]), calibration, evaluation)
    finally:
        with torch.no_grad():
            for n, w in originals.items():
                modules[n].weight.copy_(w)


def _weight_only_layer(method: str, scheme: str, name: str, weight: tuple[np.ndarray, np.ndarray | None],
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
        _errors(record, w, bias, w_eff, w_rtn, cal, ev)
    else:
        record.rtn_output_error = output_error(w, w_rtn, cal, bias)
    return record


# --------------------------------------------------------------------------- awq
def _awq(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
         evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
         progress: Progress | None) -> PTQResult:
    torch = require_torch("AWQ")
    s = parse_scheme(scheme)
    groups = scale_groups(model, names)
    modules = dict(model.named_modules())
    inspect = [g.inspect for g in groups
               if opts["objective"] == "block" and not isinstance(modules[g.inspect], torch.nn.Linear)]
    cal, ev = _captures(model, names, calibration, evaluation, meter, modules=inspect,
                        module_tokens=int(opts["module_tokens"]), progress=progress)
    weights = _weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    col: dict[str, np.ndarray] = {}
    row: dict[str, np.ndarray] = {}
    search: dict[str, awq_mod.ScaleSearch] = {}
    search_seconds: dict[str, float] = {}
    for gi, g in enumerate(groups):
        stats = cal.stats[g.layers[0]]
        ws = [weights[n][0] for n in g.layers]
        with meter.section() as sec:
            if g.inspect in cal.module_inputs:
                loss = _module_objective(model, g, cal.module_inputs[g.inspect], s, ws)
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
            for n in g.layers:
                col[n] = found.scales
            if g.prev in weights:
                row[g.prev] = found.scales
            result.folds.append((g, found.scales))
        _tick(progress, f"scales {g.prev}", gi + 1, len(groups))
    for i, n in enumerate(names):
        w, bias = weights[n]
        record = LayerRecord(n, tuple(w.shape))
        w_rtn = quantize(w, s).dequantize()
        c, r = col.get(n), row.get(n)
        layer_error = LayerOutputError(w, cal.stats[n], bias)
        with meter.section() as sec:
            folded = awq_mod.rescale(w, c, r)
            q = quantize(folded, s)
            w_eff = awq_mod.unscale(q.dequantize(), c, r)
            ratios = None
            if opts["clip"] and awq_mod.clip_applies(s, folded.shape) and not awq_mod.avoid_clipping(n):
                xtx = cal.stats[n].xtx if c is None else cal.stats[n].xtx / np.outer(c, c)
                clipped, ratios = awq_mod.search_clip(folded, xtx, s)
                q_clip = quantize(clipped, s)
                eff_clip = awq_mod.unscale(q_clip.dequantize(), c, r)
                if layer_error(eff_clip) < layer_error(w_eff):
                    q, w_eff = q_clip, eff_clip
                else:
                    ratios = np.ones_like(ratios)
        record.seconds = sec.seconds + search_seconds.get(n, 0.0)
        record.peak_mb = sec.peak_mb
        found_n = search.get(n)
        record.details = {
            "alpha": None if found_n is None else found_n.alpha,
            "scaled": n in col,
            "clipped_fraction": None if ratios is None else float(np.mean(ratios < 1)),
        }
        if found_n is None:
            record.note = "no preceding op to fold scales into: clipping only"
        result.quantized[n] = q
        _errors(record, w, bias, w_eff, w_rtn, layer_error, ev.stats[n] if ev else None)
        result.layers.append(record)
        _tick(progress, n, i + 1, len(names))
    return result


def _module_objective(model: Any, group: ScaleGroup, inputs: list[tuple[tuple[Any, ...], dict[str, Any]]],
                      scheme: Any, weights: Sequence[np.ndarray]) -> Callable[[np.ndarray | None], float]:
    """loss(s): mean squared error of the inspected module's output with the group's layers quantized
    (Q(W diag s) diag(1/s)) against its full-precision output, on the captured calibration inputs."""
    torch = require_torch("AWQ")
    modules = dict(model.named_modules())
    block = modules[group.inspect]
    layers = [modules[n] for n in group.layers]

    def run() -> list[Any]:
        with torch.no_grad():
            return [_first(block(*args, **kwargs)).double() for args, kwargs in inputs]

    reference = run()
    count = sum(r.numel() for r in reference)

    def loss(scales: np.ndarray | None) -> float:
        saved = [layer.weight.detach().clone() for layer in layers]
        try:
            with torch.no_grad():
                for layer, w in zip(layers, weights, strict=True):
                    eff = awq_mod.scaled_weight(w, scheme, scales).astype(np.float32)
                    layer.weight.copy_(torch.from_numpy(eff).to(layer.weight.dtype))
            outputs = run()
        finally:
            with torch.no_grad():
                for layer, w in zip(layers, saved, strict=True):
                    layer.weight.copy_(w)
        return float(sum(((o - r) ** 2).sum() for o, r in zip(outputs, reference, strict=True))) / count

    return loss


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output


# --------------------------------------------------------------------------- smoothquant
def _smoothquant(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
                 evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
                 progress: Progress | None) -> PTQResult:
    w_scheme, a_scheme = check_w8a8(scheme, opts["act_scheme"])
    modules = dict(model.named_modules())
    # folded into the preceding norm only (the paper's recipe): a previous linear's rows scaled by 1/s
    # would change that linear's own 8-bit grid, which per-tensor weight scales punish
    groups = [g for g in scale_groups(model, names) if not hasattr(modules[g.prev], "out_features")]
    cal, ev = _captures(model, names, calibration, evaluation, meter, keep=int(opts["samples"]), progress=progress)
    weights = _weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    col: dict[str, np.ndarray] = {}
    row: dict[str, np.ndarray] = {}
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
        if alpha is None:
            continue
        for n in g.layers:
            col[n] = scales
        if g.prev in weights:
            row[g.prev] = scales
        result.folds.append((g, scales))
    for i, n in enumerate(names):
        w, bias = weights[n]
        record = LayerRecord(n, tuple(w.shape), details={"smoothed": n in col, "alpha": chosen.get(n),
                                                         "act_scheme": str(a_scheme)})
        c, r = col.get(n), row.get(n)
        with meter.section() as sec:
            result.quantized[n] = quantize(awq_mod.rescale(w, c, r), w_scheme)
            for part, x in _sample_parts(cal, ev, n):
                extra = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
                y = x.astype(np.float64) @ w.astype(np.float64).T + extra
                smoothed = w8a8_output(x, w, w_scheme, a_scheme, c, r) + extra
                plain = w8a8_output(x, w, w_scheme, a_scheme) + extra
                setattr(record, f"{part}output_error", relative_error(y, smoothed))
                setattr(record, f"rtn_{part}output_error", relative_error(y, plain))
        if n not in chosen:
            record.note = "no preceding op to fold smoothing scales into: plain W8A8"
        elif n not in col:
            record.note = "no alpha beat plain W8A8 on the calibration sample: not smoothed"
        record.seconds, record.peak_mb, record.tokens = sec.seconds, sec.peak_mb, cal.stats[n].samples.shape[0]
        result.layers.append(record)
        _tick(progress, n, i + 1, len(names))
    return result


# --------------------------------------------------------------------------- llm.int8()
def _llm_int8(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
              evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
              progress: Progress | None) -> PTQResult:
    cal, ev = _captures(model, names, calibration, evaluation, meter, keep=int(opts["samples"]), progress=progress)
    weights = _weights(model, names)
    result = PTQResult(method, scheme, [], calibration_tokens=cal.tokens, evaluation_tokens=ev.tokens if ev else 0)
    threshold = float(opts["threshold"])
    for i, n in enumerate(names):
        w, bias = weights[n]
        record = LayerRecord(n, tuple(w.shape))
        with meter.section() as sec:
            wq = quantize_weight(w)
            result.quantized[n] = wq
            for part, x in _sample_parts(cal, ev, n):
                b16 = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float16).astype(np.float64)
                reference = fp16_output(x, w) + b16
                product = llm_int8_matmul(x, w, threshold, wq, str(opts["outlier_weights"]),
                                          str(opts["token_absmax"]))
                mixed = product.output + b16
                plain = llm_int8_matmul(x, w, math.inf, wq).output + b16
                setattr(record, f"{part}output_error", relative_error(reference, mixed))
                setattr(record, f"rtn_{part}output_error", relative_error(reference, plain))
                record.details[f"{part}outlier_columns"] = int(product.outlier_columns.size)
                if not part:
                    fp32 = x.astype(np.float64) @ w.astype(np.float64).T + (0.0 if bias is None else bias)
                    record.details["fp32_output_error"] = relative_error(fp32, mixed)
        record.seconds, record.peak_mb, record.tokens = sec.seconds, sec.peak_mb, cal.stats[n].samples.shape[0]
        result.layers.append(record)
        _tick(progress, n, i + 1, len(names))
    return result


# --------------------------------------------------------------------------- kivi
def _kivi(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
          evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
          progress: Progress | None) -> PTQResult:
    """Per attention layer: K/V reconstruction error of KIVI against per-token keys and values at the same
    bits, on the calibration text's cache; with `evaluation` (long texts), the KL of decoding over a KIVI
    cache (see `_kivi_kl`)."""
    torch = require_torch("KIVI")
    from transformers.cache_utils import DynamicCache

    config = kivi_mod.kivi_config(scheme, int(opts["group"]), int(opts["residual"]))
    wanted = sorted({n.rsplit(".", 1)[0] for n in names if n.rsplit(".", 1)[-1] in ("k_proj", "v_proj")})
    result = PTQResult(method, scheme, [])
    sums: dict[int, list[float]] = {}
    tokens = 0
    with meter.section() as sec:
        for batch in calibration:
            ids = batch["input_ids"] if isinstance(batch, dict) else batch
            cache = DynamicCache()
            with torch.no_grad():
                model(input_ids=ids, use_cache=True, **{cache_keyword(model): cache})
            tokens += int(ids.numel())
            for li, layer in enumerate(cache.layers):
                k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
                if k is None or v is None:
                    continue
                k, v = k.float(), v.float()
                k_hat, v_hat = kivi_mod.kivi_quantize(k, v, config)
                k_tok = _per_token_keys(k, config)
                acc = sums.setdefault(li, [0.0] * 5)
                acc[0] += float(((k_hat - k) ** 2).sum())
                acc[1] += float(((v_hat - v) ** 2).sum())
                acc[2] += float(((k_tok - k) ** 2).sum())
                acc[3] += float((k**2).sum())
                acc[4] += float((v**2).sum())
    result.calibration_tokens = tokens
    attention_names = _attention_names(model, len(sums))
    for li, (dk, dv, dk_tok, kk, vv) in sorted(sums.items()):
        name = attention_names[li]
        if wanted and name not in wanted:
            continue
        record = LayerRecord(name, (), seconds=sec.seconds / max(len(sums), 1), peak_mb=sec.peak_mb, tokens=tokens)
        record.output_error = math.sqrt((dk + dv) / (kk + vv))
        record.rtn_output_error = math.sqrt((dk_tok + dv) / (kk + vv))
        record.details = {"key_error": math.sqrt(dk / kk), "value_error": math.sqrt(dv / vv),
                          "per_token_key_error": math.sqrt(dk_tok / kk)}
        result.layers.append(record)
    if evaluation:
        result.summary = _kivi_kl(model, evaluation, int(opts["prefill"]), config, opts["max_kl"])
        result.evaluation_tokens = int(result.summary.pop("tokens"))
    return result


def _kivi_kl(model: Any, evaluation: Sequence[Any], prefill: int, config: kivi_mod.KIVIConfig,
             max_kl: float | None) -> dict[str, Any]:
    """KL(reference || KIVI) per decoded token over the evaluation texts (each: prefill, then decode), its
    interval resampling texts (eval.stats.bootstrap_ratio), and a verdict against max_kl when given."""
    from precisionlab.eval.stats import bootstrap_ratio

    sums, counts, agree, tokens = [], [], [], 0
    total = None
    for batch in evaluation:
        ids = batch["input_ids"] if isinstance(batch, dict) else batch
        if ids.shape[1] < prefill + 2:
            raise ValueError(f"KIVI's KL needs evaluation texts longer than prefill + 1 = {prefill + 1} tokens; one "
                             f"has {ids.shape[1]} (lower the prefill option or give longer texts)")
        kl = kivi_mod.kivi_kl(model, ids[:1], prefill, config)
        sums.append(float(kl.kl.sum()))
        counts.append(kl.positions)
        agree.append(kl.top1_agreement * kl.positions)
        tokens += int(ids.shape[1])
        total = kl.bytes
    assert total is not None
    out: dict[str, Any] = {"kl_mean": sum(sums) / sum(counts), "top1_agreement": sum(agree) / sum(counts),
                           "decoded_positions": int(sum(counts)), "texts": len(sums),
                           "cache_bytes": total.total, "fp16_cache_bytes": total.fp16, "tokens": tokens}
    if len(sums) >= 2:
        interval = bootstrap_ratio(np.array(sums), np.array(counts, dtype=np.float64))
        out["kl_ci_low"], out["kl_ci_high"] = interval.low, interval.high
        if max_kl is not None:
            out["max_kl"] = float(max_kl)
            out["kl_verdict"] = ("pass" if interval.high < max_kl else "fail" if interval.low > max_kl
                                 else "inconclusive")
    elif max_kl is not None:
        out["max_kl"] = float(max_kl)
        out["kl_verdict"] = "inconclusive"  # one text: no interval, so no verdict
    return out


def _per_token_keys(keys: Any, config: kivi_mod.KIVIConfig) -> Any:
    """Keys quantized like values (per token, groups along head_dim), the same tokens as KIVI's keys:
    the baseline KIVI's per-channel keys improve on."""
    nk = config.key_tokens(keys.shape[2])
    out = keys.half().float()
    if nk:
        out[:, :, :nk] = kivi_mod.quantize_groups(keys[:, :, :nk], config.bits, config.group, axis=3)
    return out


def _attention_names(model: Any, count: int) -> list[str]:
    """Names of the attention modules of the first `count` blocks (the cache's layer order)."""
    names = [n for n, m in model.named_modules() if n.endswith(("self_attn", "attention")) and hasattr(m, "forward")]
    return names[:count] if len(names) >= count else [f"layer.{i}" for i in range(count)]
