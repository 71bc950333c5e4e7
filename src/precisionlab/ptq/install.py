"""Install a method's weights into a model for evaluation, reversibly, with honest byte accounting.

    report = install(model, change, stored_bytes, label)
    ...                      # the model now computes with the new weights
    report.restore()         # every changed parameter back, bit for bit

    apply_result(model, result)    # a weight-only PTQResult written into the model for good
    write_weights(model, result)   # the weight part of any PTQResult (its folds, its dequantized weights)
    result_weights(model, result)  # the same values, (name, tensor) one at a time, nothing written

`change` gives the new values, name -> tensor (a PTQResult's dequantized weights and AWQ's folds:
`result_weights`; the ladder's outlier-column weights), written by `models.weights.replace_weights`: only the
weights it names are snapshotted (in memory up to its SPILL_ABOVE, spilled to disk past it), none other is
copied, and restore() puts them back bit for bit. The report is a `models.weights.QuantizationReport`, the
record the evaluation reads for any candidate: one record per layer named in `stored_bytes`
(its bytes as stored: codes, scales, zero points, padding and kept fp16 columns), errors of the
new weight against the original, and `unchanged` when the new weight equals it bit for bit
(the grid caveat: the scheme's grid already held the source's values). `model_bytes` counts
every other parameter at its stored width, each tensor once.

    candidate = ptq_candidate(result)    # an eval Candidate that installs a PTQResult

A method that changes the forward computation installs that too, as `forward(model)`, a context
manager entered after the weights are written and exited by `restore()` before they go back (an
undo step of the report's `models.weights.Undo`):

    rtn, gptq, awq   weights only (and AWQ's folds into the norms)
    smoothquant      the smoothing scales folded into the norms, the W8A8 weights (in the folded
                     coordinates), and per-token dynamic activation quantization of each selected
                     linear's input (models.hooks.activation_quantization, the result's act_scheme)
    llm_int8         the int8 row-wise weights, and each selected linear's forward replaced by the
                     int8 + fp16-outlier decomposition (ptq.llm_int8.llm_int8_matmul, outliers found
                     per call at the result's threshold)
    kivi             no weight changes; the attention runs as decoding over a KIVI cache would
                     (ptq.kivi.kivi_attention with prefill 1: the first token, the BOS / prefix
                     every perplexity sequence starts with, is the prefill; every later position
                     t attends to tokens 0..t as KIVI's cache holds them when t is decoded), for
                     forward passes over whole texts without a cache (the perplexity task); a
                     forward that uses a cache (choice, generate) is refused by that attention
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.models.weights import LayerRecord, QuantizationReport, Undo, layer_errors

Forward = Callable[[Any], AbstractContextManager[Any]]
NewWeights = Mapping[str, Any] | Iterable[tuple[str, Any]]
Change = NewWeights | Callable[[Any], NewWeights]
"""What `install` writes: name -> values, or a function of the model that returns them (models.replace's names)."""
KIVI_PREFILL = 1
"""Tokens prefilled in full precision before KIVI's decoding starts: the sequence's first (BOS / prefix) token."""


def install(model: Any, new: Change, stored_bytes: Mapping[str, int], label: str,
            forward: Forward | None = None, *, spill_above: int | None = None,
            spill_dir: str | Path | None = None) -> Any:
    """Write `new` into the model (models.weights.replace_weights: only the replaced weights' originals are kept),
    enter `forward(model)` when given, and return a QuantizationReport that undoes both (module docstring).

    `new` is name -> values (a Mapping, or an iterable of pairs read one at a time), or `new(model)` returning one;
    `stored_bytes` (layer name -> bytes as stored) is read once the values are written, so a generator may fill
    it as it goes. The errors of a record compare the layer's new weight (at its dtype) with its original."""
    torch = peers.torch("installing weights")
    from precisionlab.models.loading import unique_parameters
    from precisionlab.models.weights import layer_kind, replace_weights

    start = time.perf_counter()
    values = new(model) if callable(new) else new
    if values is None:
        raise TypeError("install needs the new weights (name -> values), not a function that writes them in place")
    modules = dict(model.named_modules())
    params = dict(model.named_parameters(remove_duplicate=False))
    kinds = {id(m.weight): kind for n, m in modules.items() if n and (kind := layer_kind(m)) is not None}
    measured: dict[int, LayerRecord] = {}

    def measuring() -> Iterator[tuple[str, Any]]:
        items = values.items() if isinstance(values, Mapping) else values
        for name, value in items:
            param = params.get(name, getattr(modules.get(name), "weight", None))
            if param is not None and id(param) in kinds and id(param) not in measured:
                after = torch.as_tensor(value).detach().to(param.dtype)
                measured[id(param)] = _record(name, kinds[id(param)], param.detach(), after, 0)
            yield name, value

    replaced = replace_weights(model, measuring(), spill_above=spill_above, spill_dir=spill_dir)
    try:
        records = []
        bytes_by_param: dict[int, int] = {}
        for name, nbytes in stored_bytes.items():
            module = modules.get(name)
            if module is None or getattr(module, "weight", None) is None:
                raise ValueError(f"the model has no layer named {name!r}")
            weight = module.weight
            record = measured.get(id(weight))
            if record is None:  # a layer the change left as it was
                record = _record(name, layer_kind(module) or "linear", weight.detach(), weight.detach(), 0)
            records.append(dataclasses.replace(record, name=name, nbytes=int(nbytes)))
            bytes_by_param[id(weight)] = int(nbytes)
    except BaseException:
        replaced.restore()
        raise
    parameters = unique_parameters(model)
    reference = sum(p.numel() * p.element_size() for p in parameters)
    model_bytes = sum(bytes_by_param.get(id(p), p.numel() * p.element_size()) for p in parameters)
    undo = Undo(replaced)
    report = QuantizationReport(label, records, model_bytes, reference, time.perf_counter() - start, undo)
    if forward is not None:
        behaviour = contextlib.ExitStack()
        undo.first(behaviour.close)
        try:
            behaviour.enter_context(forward(model))
        except BaseException:
            report.restore()
            raise
    return report


def _record(name: str, kind: str, old: Any, new: Any, nbytes: int) -> LayerRecord:
    """The layer's record: its errors against the original (`models.weights.layer_errors`), stored bytes."""
    reference = old.float().numpy()
    values = new.float().numpy()
    rel, sqnr, signal, noise = layer_errors(reference, values)
    return LayerRecord(name, kind, tuple(int(d) for d in old.shape), old.numel() * old.element_size(), nbytes, True,
                       rel, sqnr, signal, noise, unchanged=bool(noise == 0 and np.array_equal(values, reference)))


def ptq_candidate(result: Any, label: str | None = None) -> Any:
    """An eval Candidate that installs `result` (any method's PTQResult) with its stored bytes and, for
    smoothquant / llm_int8 / kivi, its forward-time behaviour (see the module docstring).

    The include / exclude patterns of the evaluation do not apply: the result's own layers are what change."""
    from precisionlab.eval.candidates import Candidate

    name = label or f"{result.method}:{result.scheme}"
    forward = forward_behaviour(result)
    change: Change | None = {} if result.method == "kivi" else None  # None: result_weights

    def prepare(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
        behaviour = forward
        if result.method == "llm_int8" and result.options.get("outlier_weights") == "fp16":
            modules = dict(model.named_modules())  # the original weights, before the int8 ones are written
            sources = {n: modules[n].weight.detach().float().numpy().copy() for n in result.quantized}
            behaviour = lambda m: llm_int8_forward(m, result, sources)  # noqa: E731
        return install_result(model, result, change, label or f"{result.method} {result.scheme}", behaviour)

    return Candidate(result.scheme, name=name, prepare=prepare)


def install_result(model: Any, result: Any, change: Change | None = None, label: str | None = None,
                   forward: Forward | None = None, stored_bytes: Mapping[str, int] | None = None) -> Any:
    """`install` of a PTQResult: `change` (by default `result_weights`: its folds, then its dequantized layers),
    its layers at their stored bytes (`stored_bytes`, by default every quantized layer's `nbytes`), with the
    references a folded result's layer-output errors need (`folded_references`, taken before anything is
    written)."""
    references, output_scales = folded_references(model, result)
    stored = stored_bytes if stored_bytes is not None else {n: q.nbytes for n, q in result.quantized.items()}
    new = change if change is not None else (lambda m: result_weights(m, result))
    report = install(model, new, stored, label or f"{result.method} {result.scheme}", forward)
    report.references.update(references)
    report.output_scales.update(output_scales)
    return report


def apply_result(model: Any, result: Any) -> None:
    """Write a weight-only result (rtn, gptq, awq) into the model in place, for good: AWQ's folds, then every
    quantized layer's dequantized weight (what a kernel reading the stored weight computes with).

    The other methods also quantize activations or the KV cache at run time, which this does not install:
    ValueError (`ptq_candidate` installs both, reversibly)."""
    from precisionlab.ptq.support import WEIGHT_ONLY

    if result.method not in WEIGHT_ONLY:
        raise ValueError(f"apply writes weights; {result.method} also quantizes activations or the KV cache at run "
                         "time, which needs the model's activation / KV-cache hooks (ptq.install.ptq_candidate "
                         "installs both)")
    write_weights(model, result)


def write_weights(model: Any, result: Any) -> None:
    """The weight part of any method's result, in place and for good (`result_weights`' values copied into the
    weights). For smoothquant and llm_int8 the model is then only half installed: their activation quantization
    runs at forward time (`forward_behaviour`); kivi changes no weight."""
    torch = peers.torch("apply")
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, value in result_weights(model, result):
            param = params[name] if name in params else modules[name].weight
            param.copy_(torch.as_tensor(value).to(param.dtype))


def result_weights(model: Any, result: Any) -> Iterator[tuple[str, Any]]:
    """(name, new values) of a result, one at a time, nothing written: its folds (AWQ's, SmoothQuant's:
    `ptq.structure.fold_values`, the parameters they touch that no quantized layer overwrites), then every
    quantized layer's dequantized weight (what a kernel reading the stored weight computes with)."""
    torch = peers.torch("apply")
    from precisionlab.ptq.structure import fold_values

    modules = dict(model.named_modules())
    if result.folds:
        overwritten = {id(modules[n].weight) for n in result.quantized}
        yield from fold_values(model, result.folds, skip=overwritten).items()
    for name, q in result.quantized.items():
        yield name, torch.from_numpy(q.dequantize())


def folded_references(model: Any, result: Any) -> tuple[dict[int, Any], dict[int, Any]]:
    """For every layer `result`'s folds touch (computed before anything is written):
    id(weight) -> W' = diag(1/r) W diag(c), its original weight in the folded coordinates (c: the scales of
    the fold whose layers it is in, on its input columns; r: those of the fold it is the previous linear of,
    on its output rows), and id(weight) -> r where there is one. The folded layer computes y' = y diag(1/r)
    from x' = x diag(1/c), so x' W'^T + b/r is its reference and r turns both back into y's coordinates."""
    torch = peers.torch("installing weights")
    modules = dict(model.named_modules())
    columns: dict[str, Any] = {}
    rows: dict[str, Any] = {}
    for group, scales in result.folds:
        s = torch.as_tensor(scales, dtype=torch.float64)
        for name in group.layers:
            columns[name] = s
        if isinstance(modules[group.prev], torch.nn.Linear):
            rows[group.prev] = s
    references: dict[int, Any] = {}
    output_scales: dict[int, Any] = {}
    for name in set(columns) | set(rows):
        weight = modules[name].weight
        folded = weight.detach().double()
        if name in columns:
            folded = folded * columns[name][None, :]
        if name in rows:
            folded = folded / rows[name][:, None]
            output_scales[id(weight)] = rows[name]
        references[id(weight)] = folded.to(weight.dtype)
    return references, output_scales


def forward_behaviour(result: Any) -> Forward | None:
    """The context manager factory that installs what `result`'s method does at forward time (None: weights only)."""
    if result.method in ("rtn", "gptq", "awq"):
        return None
    if result.method == "smoothquant":
        return lambda model: smoothquant_activations(model, result)
    if result.method == "llm_int8":
        return lambda model: llm_int8_forward(model, result)
    if result.method == "kivi":
        return lambda model: kivi_forward(model, result)
    raise ValueError(f"no evaluation candidate for PTQ method {result.method!r}")


@contextlib.contextmanager
def smoothquant_activations(model: Any, result: Any) -> Iterator[list[str]]:
    """Per-token (the result's act_scheme) dynamic quantization of each of the result's layers' inputs."""
    from precisionlab.models.hooks import activation_quantization

    names = sorted(result.quantized)
    if not names:
        raise ValueError("the SmoothQuant result quantized no layer")
    with activation_quantization(model, str(result.options["act_scheme"]), names, ()) as layers:
        yield layers


@contextlib.contextmanager
def llm_int8_forward(model: Any, result: Any, sources: Mapping[str, np.ndarray] | None = None) -> Iterator[list[str]]:
    """Each of the result's layers computes Y = llm_int8_matmul(X, W, threshold, its int8 weight) + b.

    The fp16 outlier columns multiply the int8 weight dequantized (the default) or, with
    outlier_weights="fp16", `sources[name]`: the original weight (ptq_candidate takes it before the int8
    weights are written)."""
    torch = peers.torch("LLM.int8()")
    from precisionlab.ptq.llm_int8 import THRESHOLD, llm_int8_matmul

    threshold = float(result.options.get("threshold", THRESHOLD))
    outlier_weights = str(result.options.get("outlier_weights", "int8"))
    token_absmax = str(result.options.get("token_absmax", "columns"))
    modules = dict(model.named_modules())
    replaced: list[Any] = []

    def make(module: Any, weight_q: Any, source: np.ndarray) -> Callable[..., Any]:
        def forward(self: Any, x: Any) -> Any:
            flat = x.detach().reshape(-1, x.shape[-1]).float().cpu().numpy()
            y = llm_int8_matmul(flat, source, threshold, weight_q, outlier_weights, token_absmax).output
            out = torch.from_numpy(y).to(device=x.device, dtype=x.dtype).reshape(*x.shape[:-1], y.shape[-1])
            return out if self.bias is None else out + self.bias

        return forward

    try:
        for name, weight_q in result.quantized.items():
            module = modules[name]
            if "forward" in vars(module):
                raise ValueError(f"{name} already has its forward replaced; refusing to replace it again")
            if outlier_weights == "fp16" and (sources is None or name not in sources):
                raise ValueError(f"outlier_weights='fp16' needs the original weight of {name}")
            source = sources[name] if sources is not None and name in sources else weight_q.dequantize()
            module.forward = types.MethodType(make(module, weight_q, np.asarray(source, dtype=np.float32)), module)
            replaced.append(module)
        yield list(result.quantized)
    finally:
        for module in replaced:
            del module.forward


@contextlib.contextmanager
def kivi_forward(model: Any, result: Any) -> Iterator[None]:
    """The attention of decoding over a KIVI cache (result's bits, group, residual) after a one-token prefill, in
    the result's attention layers (the selected blocks'); the others attend in full precision."""
    from precisionlab.ptq.kivi import kivi_attention, kivi_config

    options = result.options
    config = kivi_config(result.scheme, int(options.get("group", 32)), int(options.get("residual", 32)))
    with kivi_attention(model, config, prefill=KIVI_PREFILL, modules=[r.name for r in result.layers]):
        yield
