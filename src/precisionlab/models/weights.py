"""Weight-only fake quantization: each selected weight replaced once by the values a kernel would see.

    with quantized_weights(model, "int4:g128") as report:     # weights restored on exit
        ...                                                   # the forward costs what it did before
    report.model_bytes, report.bits_per_weight, report.rel_err, report.layers

Selection. The candidates are the model's weight matrices: nn.Linear, transformers' Conv1D
(GPT-2; its (in, out) weight is quantized transposed, so groups run along the inputs as for
a Linear) and nn.Embedding (an embedding table is the linear map of one-hot inputs). A layer
is selected when its module name matches one of the `include` glob patterns (default: every
layer) and none of the `exclude` patterns (default: DEFAULT_EXCLUDE, the output head and the
embeddings, which most deployments keep in high precision; pass `exclude=()` to quantize
them too). A weight tied to another (SmolLM2's output head is its token embedding) is one
tensor: quantizing it quantizes both uses, and it is counted once.

Values. A selected weight W becomes `quant.quantize(W, scheme).dequantize()`, the exact
dequantized values (float32, cast back to the weight's dtype, which for float32 is exact),
written into the same parameter: no hook, no per-call work, the forward pass is unchanged.
Groups run along the last axis of the (out, in) weight, i.e. along the input features, as in
GPTQ / AWQ / llama.cpp kernels; a row length the group does not divide is padded with zeros,
which are stored and counted in the bytes (noted per layer). A scheme that cannot apply to a
layer's shape (the quant library raises ValueError: outliers= larger than the rows, an axis=
out of range, a non-finite weight under nonfinite=error) leaves that layer untouched, with
the reason in its note.

Bytes (`model_bytes`): each quantized tensor's `QuantizedTensor.nbytes` (codes, scales, zero
points, padding) plus every other parameter at its stored width (element_size), each tensor
once. Buffers (rotary tables, position ids) are not weights and are not counted.

Memory. The weights are substituted by `replace_weights` (models.replace, the one substitution
every command uses): only the selected weights' originals are kept, in memory up to SPILL_ABOVE
bytes, on disk past it (one safetensors file per weight); a spilled weight takes the dequantized
values in its own storage, so the model is held once. With `spill_dir`, every original is written
there (the eval runner's plain candidates); `restore()` reads the files back into place, and
`report.original(parameter)` reads one when it is needed (the eval runner's layer-output error).
A weight memory-mapped from a checkpoint (private and copy-on-write) trades its file pages for
the written ones.

Errors per layer (`layer_errors`, sums in float64): rel_err = ||W_hat - W|| / ||W||,
SQNR = 10 log10(sum W^2 / sum (W_hat - W)^2); the report's totals pool the sums over the quantized
layers. `unchanged` marks a layer the scheme reproduced bit for bit: its grid already holds the weights
(see models.loading's grid caveat).

Undoing (`Undo`). A report carries what it replaced (the `replace_weights` handle: each weight with its
original, a tensor or the Path of its spill file), and the steps to run before the weights go back (another installer's
forward-time behaviour: ptq.install). `restore()` runs them. A report built by another installer passes
its own `Undo` (and, where a layer-output error must not compare against the original, `references`
and `output_scales`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.models.loading import unique_parameters
from precisionlab.models.replace import SPILL_ABOVE, ReplacedWeights, replace_weights, spilling_to
from precisionlab.quant import parse_scheme, quantize

DEFAULT_EXCLUDE = ("lm_head", "*embed*")
"""Left in high precision unless the caller says otherwise: output heads and embedding tables."""

LINEAR, EMBEDDING, CONV1D = "linear", "embedding", "conv1d"

__all__ = ["CONV1D", "DEFAULT_EXCLUDE", "EMBEDDING", "LINEAR", "SPILL_ABOVE", "LayerRecord", "QuantizationReport",
           "ReplacedWeights", "Undo", "layer_errors", "layer_kind", "linear_layers", "quantize_weights",
           "quantized_weights", "replace_weights", "spilling_to"]


@dataclass
class LayerRecord:
    """One selected layer under one scheme."""

    name: str
    kind: str
    """"linear", "embedding" or "conv1d"."""
    shape: tuple[int, ...]
    """The weight's shape as quantized ((out, in) for a Linear)."""
    source_bytes: int
    """The weight's bytes at its stored width."""
    nbytes: int
    """Its bytes after quantization (source_bytes when skipped)."""
    quantized: bool
    rel_err: float = 0.0
    sqnr_db: float = math.inf
    signal: float = 0.0
    """sum W^2 (float64), for pooling errors over layers."""
    noise: float = 0.0
    """sum (W_hat - W)^2 (float64)."""
    unchanged: bool = False
    padded: int = 0
    """Zero elements added to fill the last group of each row (stored and counted)."""
    tied: tuple[str, ...] = ()
    """Other module names that share this weight."""
    note: str = ""

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.elements


class Undo:
    """What a report replaced and how to put it back.

        undo = Undo(replace_weights(model, new))    the handle of the replaced weights (models.replace)
        undo.first(step)                            a step restore() runs before the weights go back
                                                    (last added, first run)
        undo.replaced / undo.original(parameter) / undo.restore()

    restore() is idempotent: the steps, then the handle's restore() (in-memory originals become the parameters'
    data again, spilled ones are read back into the parameters' storage and their files removed)."""

    def __init__(self, replaced: ReplacedWeights | None = None) -> None:
        self._replaced = replaced
        self._steps: list[Callable[[], Any]] = []

    def first(self, step: Callable[[], Any]) -> None:
        """Run `step()` at restore, before the weights go back (steps run in reverse order of adding)."""
        self._steps.append(step)

    @property
    def weights(self) -> ReplacedWeights | None:
        """The handle of the replaced weights (names, held_bytes, spilled_bytes), None when nothing was replaced."""
        return self._replaced

    @property
    def replaced(self) -> list[Any]:
        return self._replaced.parameters if self._replaced is not None else []

    def original(self, parameter: Any) -> Any:
        """The original tensor of a replaced weight (read from its file when spilled); KeyError otherwise."""
        if self._replaced is None:
            raise KeyError("this parameter was not replaced by the report's scheme")
        try:
            return self._replaced.original(parameter)
        except KeyError:
            raise KeyError("this parameter was not replaced by the report's scheme") from None

    @property
    def originals(self) -> list[tuple[Any, Any]]:
        return [(param, self.original(param)) for param in self.replaced]

    def restore(self) -> None:
        try:
            while self._steps:
                self._steps.pop()()
        finally:
            if self._replaced is not None:
                self._replaced.restore()


@dataclass
class QuantizationReport:
    """What quantize_weights did: per-layer records, honest bytes, pooled errors; `restore()` undoes it."""

    scheme: str
    layers: list[LayerRecord]
    model_bytes: int
    reference_bytes: int
    """Every parameter at its stored width (the model before quantization)."""
    seconds: float
    undo: Undo = field(default_factory=Undo, repr=False)
    """The replaced weights with their originals, and the steps restore() runs first."""
    references: dict[int, Any] = field(default_factory=dict, repr=False)
    """id(parameter) -> the weight a layer-output error compares a replaced one against, where it is not the
    original (a folded layer: its original weight in the folded coordinates; ptq.install.folded_references)."""
    output_scales: dict[int, Any] = field(default_factory=dict, repr=False)
    """id(parameter) -> r, for a layer whose output rows a fold divided by r (`output_scale`)."""

    @property
    def quantized(self) -> list[LayerRecord]:
        return [r for r in self.layers if r.quantized]

    @property
    def skipped(self) -> list[LayerRecord]:
        return [r for r in self.layers if not r.quantized]

    @property
    def bits_per_weight(self) -> float:
        """8 × bytes / elements over the quantized layers (scales, zero points and padding included)."""
        layers = self.quantized
        elements = sum(r.elements for r in layers)
        return 8.0 * sum(r.nbytes for r in layers) / elements if elements else math.nan

    @property
    def rel_err(self) -> float:
        signal = sum(r.signal for r in self.quantized)
        return math.sqrt(sum(r.noise for r in self.quantized) / signal) if signal > 0 else math.nan

    @property
    def sqnr_db(self) -> float:
        noise = sum(r.noise for r in self.quantized)
        signal = sum(r.signal for r in self.quantized)
        if not self.quantized or signal == 0:
            return math.nan
        return math.inf if noise == 0 else 10 * math.log10(signal / noise)

    @property
    def unchanged_layers(self) -> int:
        return sum(1 for r in self.quantized if r.unchanged)

    @property
    def grid_aligned(self) -> bool:
        """True when the scheme reproduced every quantized layer exactly (its comparison measures nothing)."""
        return bool(self.quantized) and self.unchanged_layers == len(self.quantized)

    @property
    def alignment(self) -> str:
        """"aligned", "partly (k/N layers)" or "no": does the scheme's grid already hold the weights?"""
        k, n = self.unchanged_layers, len(self.quantized)
        if n and k == n:
            return "aligned"
        return f"partly ({k}/{n} layers)" if k else "no"

    def notes(self) -> list[str]:
        """One line per skipped layer and one summary of padded layers."""
        lines = [f"{r.name}: skipped, {r.note}" for r in self.skipped]
        padded = [r for r in self.quantized if r.padded]
        if padded:
            lines.append(f"{len(padded)} layer(s) padded to whole groups (zeros stored and counted): "
                         + "; ".join(sorted({r.note for r in padded})))
        return lines

    @property
    def replaced(self) -> list[Any]:
        """Every weight parameter replaced and not yet restored."""
        return self.undo.replaced

    def original(self, parameter: Any) -> Any:
        """What a layer-output error compares a replaced weight against: its `references` entry, else its
        original tensor (read from its file when spilled); KeyError for a weight not replaced."""
        reference = self.references.get(id(parameter))
        return reference if reference is not None else self.undo.original(parameter)

    def output_scale(self, parameter: Any) -> Any:
        """Per output channel, what turns the layer's output back into the original model's coordinates
        (None: it is in them; a plain quantization changes no coordinates)."""
        return self.output_scales.get(id(parameter))

    @property
    def originals(self) -> list[tuple[Any, Any]]:
        """(parameter, its original tensor) for every weight replaced and not yet restored (spilled ones are
        read back: prefer `original(parameter)` one at a time)."""
        return self.undo.originals

    def restore(self) -> None:
        """Undo everything (idempotent): the undo steps first, then the original weights back."""
        self.undo.restore()


# --------------------------------------------------------------------------- selection
def layer_kind(module: Any) -> str | None:
    torch = peers.torch()
    if isinstance(module, torch.nn.Linear):
        return LINEAR
    if isinstance(module, torch.nn.Embedding):
        return EMBEDDING
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None and module.weight.dim() == 2:
        return CONV1D
    return None


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def linear_layers(model: Any, include: Sequence[str] = (), exclude: Sequence[str] | None = None) -> dict[str, Any]:
    """Selected weight layers by module name (see the module docstring for the rule and defaults).

    ValueError when a pattern is given and nothing matches it (a typo must not quantize nothing)."""
    include = tuple(include) or ("*",)
    exclude = DEFAULT_EXCLUDE if exclude is None else tuple(exclude)
    candidates = {name: module for name, module in model.named_modules() if name and layer_kind(module)}
    for pattern in include:
        if pattern != "*" and not any(fnmatch.fnmatchcase(n, pattern) for n in candidates):
            raise ValueError(f"--include {pattern!r} matches no weight layer; layers look like "
                             f"{', '.join(list(candidates)[:3])}")
    return {name: m for name, m in candidates.items() if _matches(name, include) and not _matches(name, exclude)}


def _tied_names(model: Any) -> dict[int, list[str]]:
    """Module names per weight parameter (tied layers hold the same Parameter object)."""
    names: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        if name and layer_kind(module):
            names.setdefault(id(module.weight), []).append(name)
    return names


# --------------------------------------------------------------------------- quantize
def quantize_weights(model: Any, scheme: str, include: Sequence[str] = (),
                     exclude: Sequence[str] | None = None, spill_dir: Path | None = None) -> QuantizationReport:
    """Replace every selected weight in place by its dequantized values; `report.restore()` undoes it.

    `model` is a torch nn.Module or a LoadedModel (its .model is used); `spill_dir` keeps the originals on
    disk instead of in memory (see the module docstring)."""
    torch = peers.torch()
    module_tree = getattr(model, "model", model) if not isinstance(model, torch.nn.Module) else model
    canonical = str(parse_scheme(scheme))
    start = time.perf_counter()
    selected = linear_layers(module_tree, include, exclude)
    tied = _tied_names(module_tree)
    records: list[LayerRecord] = []
    done: dict[int, LayerRecord] = {}
    quantized_bytes: dict[int, int] = {}

    def values() -> Iterator[tuple[str, Any]]:
        for name, module in selected.items():
            weight = module.weight
            key = id(weight)
            if key in done:  # a tied weight already quantized under another name
                continue
            kind = layer_kind(module) or LINEAR
            record, new = _quantize_one(name, kind, weight, canonical)
            record.tied = tuple(n for n in tied.get(key, []) if n != name)
            records.append(record)
            done[key] = record
            if new is not None:
                quantized_bytes[key] = record.nbytes
                yield name, new

    replaced = replace_weights(module_tree, values(), spill_above=0 if spill_dir is not None else None,
                               spill_dir=spill_dir)
    parameters = unique_parameters(module_tree)
    reference = sum(p.numel() * p.element_size() for p in parameters)
    model_bytes = sum(quantized_bytes.get(id(p), p.numel() * p.element_size()) for p in parameters)
    return QuantizationReport(canonical, records, model_bytes, reference, time.perf_counter() - start,
                              Undo(replaced))


def _quantize_one(name: str, kind: str, weight: Any, scheme: str) -> tuple[LayerRecord, Any]:
    """(record, new weight tensor or None when skipped)."""
    torch = peers.torch()
    data = weight.detach()
    matrix = data.t().contiguous() if kind == CONV1D else data
    shape = tuple(int(d) for d in matrix.shape)
    source_bytes = data.numel() * data.element_size()
    try:
        q = quantize(matrix, scheme)
    except ValueError as exc:
        return LayerRecord(name, kind, shape, source_bytes, source_bytes, False, note=str(exc)), None
    values = q.dequantize()
    reference = matrix.float().numpy()
    rel, sqnr, signal, noise = layer_errors(reference, values)
    unchanged = bool(np.array_equal(values, reference))
    new = torch.from_numpy(values)
    if kind == CONV1D:
        new = new.t().contiguous()
    if new.dtype != data.dtype:
        new = new.to(data.dtype)
        unchanged = unchanged and bool(torch.equal(new, data))
    note = ""
    if q.padded_elements:
        width, group = shape[-1], q.layout.block[1]
        note = f"rows of {width} padded to {q.layout.padded[2]} ({width / group:g} groups of {group})"
    record = LayerRecord(name, kind, shape, source_bytes, q.nbytes, True, rel, sqnr, signal, noise,
                         unchanged=unchanged, padded=q.padded_elements, note=note)
    return record, new


def layer_errors(reference: np.ndarray, values: np.ndarray) -> tuple[float, float, float, float]:
    """(rel_err, SQNR in dB, sum W^2, sum (W_hat - W)^2) of a layer's new values against its original ones
    (the sums by `_sums`): rel_err = sqrt(noise / signal) (0 when both are 0, inf for noise over a zero
    weight), SQNR = 10 log10(signal / noise) (inf without noise, -inf for noise over a zero weight)."""
    signal, noise = _sums(reference, values)
    rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return rel, sqnr, signal, noise


def _sums(reference: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(sum W^2, sum (W_hat - W)^2): differences in float32 (relative error <= 2^-24 each, exact when the
    two are within a factor of 2), both sums accumulated in float64 (einsum casts chunk by chunk, so no
    float64 copy of the weight is made)."""
    flat = reference.reshape(-1)
    diff = (values.reshape(-1) - flat).astype(np.float32, copy=False)
    signal = float(np.einsum("i,i->", flat, flat, dtype=np.float64))
    noise = float(np.einsum("i,i->", diff, diff, dtype=np.float64))
    return signal, noise


@contextlib.contextmanager
def quantized_weights(model: Any, scheme: str, include: Sequence[str] = (),
                      exclude: Sequence[str] | None = None, spill_dir: Path | None = None
                      ) -> Iterator[QuantizationReport]:
    """Context manager form of quantize_weights: the original weights are back on exit."""
    report = quantize_weights(model, scheme, include, exclude, spill_dir)
    try:
        yield report
    finally:
        report.restore()
