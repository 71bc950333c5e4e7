"""`--from`: what a saved result says to ship, read into one `Recipe`.

Each kind of saved result is one reader function, registered with `result_reader`:

    @result_reader("ptq", detect=lambda data: data.get("lab") == "ptq")
    def _ptq(path, data, step) -> Recipe: ...

`read_result(path, step)` opens the file (JSON, or a .safetensors file of quantized weights), asks each
reader's `detect` in turn, and calls the first that claims it. A new result type (a QAT result, another
search's output) plugs in with one such function; nothing else changes.

Kinds read today:

    ptq      ptq.json of `precisionlab ptq --out DIR --save W.safetensors` (rtn, gptq, awq): the saved
             codes themselves (params.save names the file), AWQ's folded scales with them
    weights  that .safetensors file given directly (`--from W.safetensors`)
    qat      qat.json of `precisionlab qat --out DIR`: the trained codes (params.save, beside it), an AWQ
             start's folded scales with them
    ladder   ladder.json of `precisionlab ladder --out DIR`, with --step N: the step's scheme on the step's
             layers (ladder.steps.N.include / .exclude); a GPTQ / AWQ step's saved codes
             (ladder.steps.N.weights); the outlier-column step is refused (no format holds fp16 columns
             inside a quantized matrix)
    recipe   recipe.json (search.recipe_file: the format, its reading and writing): each named layer
             round-to-nearest under its own scheme, every other layer kept in float; any other key is
             metadata, carried into the export's record (docs/export.md)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precisionlab.json_input import json_object
from precisionlab.search.recipe_file import RECIPE_FORMAT, RECIPE_VERSION, is_recipe, parse_recipe, write_recipe


@dataclass
class Recipe:
    """What to export: per-layer schemes to apply (round to nearest), or stored codes, plus folds."""

    kind: str
    description: str
    scheme: str | None = None
    """One scheme for every selected layer (with include / exclude), or None when `layers` says."""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] | None = None
    layers: dict[str, str] = field(default_factory=dict)
    """Layer -> scheme (a recipe.json), quantized round-to-nearest from the model's weight."""
    stored: dict[str, Any] = field(default_factory=dict)
    """Layer -> QuantizedTensor read from a saved result: shipped as they are, never re-quantized."""
    folds: list[tuple[str, Any]] = field(default_factory=list)
    """(previous op, scales) folded into the model before the stored codes are written (AWQ)."""
    method: str = "rtn"
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


Reader = Callable[[Path, dict[str, Any], "int | None"], Recipe]
Detect = Callable[[dict[str, Any]], bool]
READERS: list[tuple[str, Detect, Reader]] = []


def result_reader(kind: str, detect: Detect) -> Callable[[Reader], Reader]:
    """Register `reader` for the saved results `detect(json data)` claims (see the module docstring)."""

    def register(reader: Reader) -> Reader:
        READERS.append((kind, detect, reader))
        return reader

    return register


def read_result(path: str | Path, step: int | None = None) -> Recipe:
    """The Recipe a saved result describes; ValueError (one line, naming the file) when it cannot be shipped."""
    where = Path(path).expanduser()
    if not where.is_file():
        raise ValueError(f"--from {path}: no such file")
    if where.suffix == ".safetensors":
        if step is not None:
            raise ValueError("--step selects a ladder step; a weights file holds one result")
        return weights_recipe(where)
    try:
        data = json_object(where.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"--from {where}: not a saved result (JSON): {exc}") from None
    for _, detect, reader in READERS:
        if detect(data):
            recipe = reader(where, data, step)
            recipe.source = str(where)
            return recipe
    raise ValueError(f"--from {where}: not a result export reads ({', '.join(k for k, _, _ in READERS)}; a "
                     "precisionlab ptq or ladder --out JSON, a recipe.json, or a ptq --save .safetensors file)")


# --------------------------------------------------------------------------- weights files (ptq --save)
def weights_recipe(path: Path, method: str = "ptq", description: str = "") -> Recipe:
    """The quantized layers of a tagged precisionlab .safetensors file, with AWQ's folded scales (passthrough
    tensors '<prev>.awq_scales')."""
    from precisionlab.quant.safetensors_io import load_passthrough, load_quantized

    try:
        stored = load_quantized(path)
        passthrough = load_passthrough(path)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"--from {path}: {exc}") from None
    if not stored:
        raise ValueError(f"--from {path}: the file holds no quantized layer")
    folds = [(name[: -len(".awq_scales")], p.array) for name, p in passthrough.items() if name.endswith(".awq_scales")]
    schemes = sorted({str(q.scheme) for q in stored.values()})
    text = description or f"{len(stored)} saved layers ({', '.join(schemes)}) from {path.name}"
    return Recipe("weights", text, scheme=schemes[0] if len(schemes) == 1 else None, stored=stored, folds=folds,
                  method="awq" if folds else method, source=str(path))


def _is_lab(name: str) -> Detect:
    return lambda data: data.get("lab") == name


@result_reader("ptq", detect=_is_lab("ptq"))
def _ptq(path: Path, data: dict[str, Any], step: int | None) -> Recipe:
    if step is not None:
        raise ValueError(f"--from {path}: --step selects a ladder step; a ptq result has none")
    params = data.get("params") or {}
    method = str(params.get("method", ""))
    if method not in ("rtn", "gptq", "awq"):
        raise ValueError(f"--from {path}: a {method or 'ptq'} result also quantizes activations or the KV cache at "
                         "run time; the formats exported here hold weights (rtn, gptq, awq)")
    saved = params.get("save")
    if not saved:
        raise ValueError(f"--from {path}: the ptq run saved no weights; run it again with --save FILE.safetensors "
                         "(export ships the codes the evaluation used, it does not re-run the method)")
    weights = _beside(path, str(saved))
    recipe = weights_recipe(weights, method, f"ptq {method} {params.get('scheme', '')} from {path.name} "
                                             f"(weights {weights.name})")
    recipe.kind = "ptq"
    recipe.method = method
    recipe.metadata = {"model": params.get("model"), "command": params.get("command")}
    return recipe


@result_reader("qat", detect=_is_lab("qat"))
def _qat(path: Path, data: dict[str, Any], step: int | None) -> Recipe:
    if step is not None:
        raise ValueError(f"--from {path}: --step selects a ladder step; a qat result has none")
    params = data.get("params") or {}
    saved = params.get("save")
    if not saved:
        raise ValueError(f"--from {path}: the qat result names no weights file (its --out folder holds "
                         "qat.safetensors)")
    weights = _beside(path, str(saved))
    text = (f"qat {params.get('scheme', '')} from {params.get('start', 'rtn')}, {params.get('steps', '?')} steps, "
            f"from {path.name} (weights {weights.name})")
    recipe = weights_recipe(weights, "qat", text)
    recipe.kind = "qat"
    recipe.metadata = {"model": params.get("model"), "command": params.get("command")}
    return recipe


def _beside(path: Path, name: str) -> Path:
    """A file a saved result names: as written, else beside the result."""
    candidate = Path(name).expanduser()
    if candidate.is_file():
        return candidate
    near = path.parent / candidate.name
    if near.is_file():
        return near
    raise ValueError(f"--from {path}: the weights it names, {name}, are not there (nor beside it)")


@result_reader("ladder", detect=_is_lab("ladder"))
def _ladder(path: Path, data: dict[str, Any], step: int | None) -> Recipe:
    findings = data.get("findings") or {}
    tried = int(findings.get("ladder.steps_tried", 0) or 0)
    if step is None:
        stopped = findings.get("ladder.stopped_at")
        raise ValueError(f"--from {path}: a ladder result needs --step N (0..{tried - 1}; it stopped at "
                         f"{stopped})")
    base = f"ladder.steps.{step}"
    if f"{base}.scheme" not in findings:
        raise ValueError(f"--from {path}: the ladder has no step {step} (steps 0..{tried - 1} were tried)")
    name, scheme, method = findings[f"{base}.name"], str(findings[f"{base}.scheme"]), findings.get(f"{base}.method")
    if f"{base}.include" not in findings:
        raise ValueError(f"--from {path}: the ladder result does not record which layers step {step} quantized "
                         "(saved before ladder.steps.N.include was added); run the ladder again")
    include = tuple(_patterns(findings[f"{base}.include"]))
    exclude = tuple(_patterns(findings.get(f"{base}.exclude", "")))
    text = f"ladder step {step} {name} ({scheme}, {method}; verdict {findings.get(f'{base}.verdict')})"
    if method == "outliers":
        raise ValueError(f"--from {path}: step {step} ({name}) keeps fp16 input columns inside quantized matrices; "
                         "neither GGUF nor compressed-tensors stores that layout")
    if method in ("gptq", "awq", "qat"):
        weights = findings.get(f"{base}.weights")
        if not weights:
            raise ValueError(f"--from {path}: step {step} ({method}) saved no weights")
        recipe = weights_recipe(_beside(path, str(weights)), str(method), text)
        recipe.kind = "ladder"
        recipe.method = str(method)
        return recipe
    if method != "rtn":
        raise ValueError(f"--from {path}: step {step} uses method {method!r}, which export does not know")
    return Recipe("ladder", text, scheme=scheme, include=include, exclude=exclude,
                  metadata={"step": step, "name": name, "verdict": findings.get(f"{base}.verdict")})


def _patterns(text: Any) -> list[str]:
    return [p for p in str(text or "").split(",") if p]


@result_reader("recipe", detect=is_recipe)
def _recipe(path: Path, data: dict[str, Any], step: int | None) -> Recipe:
    if step is not None:
        raise ValueError(f"--from {path}: --step selects a ladder step; a recipe has none")
    layers, metadata = parse_recipe(data, f"--from {path}")
    schemes = sorted(set(layers.values()))
    return Recipe("recipe", f"recipe {path.name}: {len(layers)} layers ({', '.join(schemes)})", layers=layers,
                  metadata=metadata)


__all__ = ["READERS", "RECIPE_FORMAT", "RECIPE_VERSION", "Recipe", "read_result", "result_reader", "weights_recipe",
           "write_recipe"]
