"""Put the evaluated weights into the loaded model and keep the stored form of every quantized layer.

    prepared = prepare(loaded, recipe)
    prepared.quantized       layer -> QuantizedTensor: the codes, scales and zero points to write
    prepared.report          the models.weights.QuantizationReport of what was installed (restore() undoes it)
    prepared.state()         parameter name -> float32 values the model now computes with

A float recipe (kind FLOAT, `export --scheme none`) installs nothing: the model's own values, each tensor
written at --float-dtype. The weights are installed the way the evaluation installs them, so the model
afterwards holds exactly what was evaluated: a scheme (--scheme, a ladder step) rounded to nearest per layer,
each weight once, through `ptq.install.install` (the values of `models.weights.quantize_weights`, eval's plain
candidates); saved codes (a ptq --save file, a GPTQ / AWQ ladder step) through `ptq.install.install_result`
(eval's PTQ candidates: AWQ's folds first, then each layer's dequantized codes); a recipe.json's per-layer
schemes through `ptq.install.install`, each layer rounded to nearest under its own scheme.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.export.results import Recipe


@dataclass
class Prepared:
    loaded: Any
    recipe: Recipe
    report: Any
    quantized: dict[str, Any]
    """Layer (module) name -> QuantizedTensor."""
    tied: dict[str, str] = field(default_factory=dict)
    """Parameter name -> the name of the parameter it is tied to (written once)."""

    def state(self) -> dict[str, np.ndarray]:
        """Every parameter (each tensor once: a tied one under its first name) as float32 numpy."""
        out: dict[str, np.ndarray] = {}
        seen: dict[int, str] = {}
        for name, p in self.loaded.model.named_parameters(remove_duplicate=False):
            key = id(p)
            if key in seen:
                self.tied[name] = seen[key]
                continue
            seen[key] = name
            out[name] = p.detach().float().numpy()
        return out

    def restore(self) -> None:
        self.report.restore()


def check_layers(model: Any, recipe: Recipe) -> dict[str, Any]:
    """The modules the recipe quantizes (ValueError before any work for a name that is not a weight layer or a
    kind no export format holds)."""
    from precisionlab.models.weights import CONV1D, layer_kind, linear_layers

    modules = dict(model.named_modules())
    if recipe.scheme is not None and not recipe.stored and not recipe.layers:
        chosen = linear_layers(model, recipe.include, recipe.exclude)
    else:
        names = list(recipe.stored or recipe.layers)
        missing = [n for n in names if n not in modules or getattr(modules[n], "weight", None) is None]
        if missing:
            raise ValueError(f"the model has no weight layer {missing[0]!r} (the saved result was made on another "
                             "model?)")
        chosen = {n: modules[n] for n in names}
    for name, module in chosen.items():
        if layer_kind(module) == CONV1D:
            raise ValueError(f"{name} is a Conv1D (GPT-2's transposed linear); export writes Linear and Embedding "
                             "weights")
    for name, q in recipe.stored.items():
        shape = tuple(int(d) for d in modules[name].weight.shape)
        if tuple(q.shape) != shape:
            raise ValueError(f"saved layer {name} has shape {tuple(q.shape)}, the model's weight {shape}")
    return chosen


FLOAT = "float"
"""Recipe.kind of a float export (`export --scheme none`): no layer quantized, every tensor at --float-dtype (the
runtime evaluation's reference, docs/eval.md)."""


class _Unchanged:
    """The report of a float export: nothing was installed, so nothing is restored."""

    replaced: tuple[Any, ...] = ()

    def restore(self) -> None:
        return None


def prepare(loaded: Any, recipe: Recipe, keep_codes: bool = True) -> Prepared:
    """Install the recipe into loaded.model (see the module docstring). `keep_codes=False` (an evaluation
    candidate, which needs only the values): a recipe's or a scheme's codes are made one layer at a time and
    dropped once installed, so `Prepared.quantized` stays empty."""
    from precisionlab.quant import quantize

    model = loaded.model
    if recipe.kind == FLOAT:
        return Prepared(loaded, recipe, _Unchanged(), {})
    chosen = check_layers(model, recipe)
    if recipe.stored:
        return _install_stored(loaded, recipe)
    if recipe.layers:
        floats = float_layers(model, recipe)
        codes = ((n, quantize(chosen[n].weight.detach().float().numpy(), s)) for n, s in recipe.layers.items())
        return _install_codes(loaded, recipe, codes, floats, keep_codes)
    assert recipe.scheme is not None
    scheme = recipe.scheme

    def scheme_codes() -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        for name, module in chosen.items():  # each weight once (a tied one under its first name), as quantize_weights
            if id(module.weight) in seen:
                continue
            seen.add(id(module.weight))
            try:
                q = quantize(module.weight.detach().float().numpy(), scheme)
            except ValueError as exc:
                raise ValueError(f"{scheme} cannot quantize {name}: {exc}") from None
            yield name, q

    return _install_codes(loaded, recipe, scheme_codes(), keep=keep_codes)


FLOAT_WIDTHS = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2)}
"""A recipe.json's "float_layers" widths (what `precisionlab search` keeps in float): torch dtype, bytes each."""


def float_layers(model: Any, recipe: Recipe) -> dict[str, str]:
    """The recipe's layers kept at a float width (layer -> bf16 / fp16, its "float_layers"); ValueError for a
    width or a layer it cannot be."""
    floats = recipe.metadata.get("float_layers") or {}
    if not isinstance(floats, dict):
        raise ValueError(f"{recipe.source or 'the recipe'}: \"float_layers\" must map layer names to bf16 or fp16")
    modules = dict(model.named_modules())
    out: dict[str, str] = {}
    for name, width in floats.items():
        key = str(width).lower()
        if key not in FLOAT_WIDTHS:
            raise ValueError(f"float layer {name!r}: {width!r} is not bf16 or fp16")
        if name not in modules or getattr(modules[name], "weight", None) is None:
            raise ValueError(f"the model has no weight layer {name!r} (the recipe was made on another model?)")
        out[str(name)] = key
    return out


def _install_codes(loaded: Any, recipe: Recipe, codes: Iterable[tuple[str, Any]],
                   floats: dict[str, str] | None = None, keep: bool = True) -> Prepared:
    """Each layer's dequantized codes (`codes`: (layer, QuantizedTensor), read one at a time), and each float layer
    rounded to its width (the values the search evaluated; export then writes them at --float-dtype, so they stay
    exact in any width that holds them). The codes are kept in `Prepared.quantized` when `keep`."""
    from precisionlab.ptq.install import install

    floats = floats or {}
    modules = dict(loaded.model.named_modules())
    quantized: dict[str, Any] = {}
    stored: dict[str, int] = {}

    def values() -> Iterator[tuple[str, Any]]:  # one layer's values at a time
        import torch

        for name, q in codes:
            stored[name] = q.nbytes
            if keep:
                quantized[name] = q
            yield name, q.dequantize()
        for name, width in floats.items():
            weight = modules[name].weight
            stored[name] = weight.numel() * FLOAT_WIDTHS[width][1]
            yield name, weight.detach().to(getattr(torch, FLOAT_WIDTHS[width][0])).to(weight.dtype)

    report = install(loaded.model, values(), stored, recipe.description)
    return Prepared(loaded, recipe, report, quantized)


def _install_stored(loaded: Any, recipe: Recipe) -> Prepared:
    """Saved codes, as the evaluation's PTQ candidate installs them (ptq.install.install_result)."""
    from precisionlab.ptq.install import install_result
    from precisionlab.ptq.run import PTQResult
    from precisionlab.ptq.structure import scale_groups

    model = loaded.model
    folds = []
    if recipe.folds:
        groups = {g.prev: g for g in scale_groups(model, list(recipe.stored))}
        for prev, scales in recipe.folds:
            if prev not in groups:
                raise ValueError(f"the saved AWQ scales fold into {prev}, which is no scale group of this model")
            folds.append((groups[prev], np.asarray(scales, dtype=np.float64)))
    scheme = recipe.scheme or "mixed"
    result = PTQResult(recipe.method if recipe.method in ("rtn", "gptq", "awq") else "rtn", scheme, [],
                       quantized=dict(recipe.stored), folds=folds)
    report = install_result(model, result, label=recipe.description)
    return Prepared(loaded, recipe, report, dict(recipe.stored))
