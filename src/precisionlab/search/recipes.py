"""A per-layer recipe (layer -> format) as an evaluation candidate, and as the recipe.json export reads.

    candidate = recipe_candidate({"model.layers.1.mlp.down_proj": "int8:row", ...}, name="search@5")
    evaluate(loaded, [candidate], tasks, max_drop)           # eval.runner: paired against the float model
    save_recipe(path, assignment, model="smollm2-135m", budget=5.0)   # recipe.json (recipe_file.write_recipe)
    assignment = load_recipe(path)                           # layer -> format, read back

The candidate installs each layer's values in its format (`costs.layer_values`: a scheme's dequantized codes, a
float width's rounding) through `ptq.install.install` (models.weights.replace_weights: only
those layers' originals are kept), with the bytes the solver counted, so the evaluation's
bits per weight and model bytes are the search's. A recipe.json holds, under "layers", the layers in a quant
scheme, the form `precisionlab export --from recipe.json` ships unchanged (each layer round to nearest under its
scheme); a layer kept at a float width (bf16) is no quant scheme and sits under "float_layers" (layer -> bf16 /
fp16), which export leaves in float: give `--float-dtype bf16` to store it as the search counted it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from precisionlab.search.costs import canonical_format, is_float_format, layer_values

FLOAT_LAYERS = "float_layers"
"""recipe.json key of the layers kept at a float width (layer -> bf16 / fp16)."""


def recipe_prepare(assignment: Mapping[str, str], label: str) -> Any:
    """prepare(model, include, exclude) -> QuantizationReport (eval.candidates' prepared form): the layers of
    `assignment` in their formats (the evaluation's include / exclude do not apply: the recipe names its layers)."""
    chosen = dict(assignment)

    def prepare(model: Any, include: Sequence[str] = (), exclude: Sequence[str] | None = None) -> Any:
        from precisionlab.ptq.install import install

        modules = dict(model.named_modules())
        missing = [n for n in chosen if n not in modules or getattr(modules[n], "weight", None) is None]
        if missing:
            raise ValueError(f"the model has no weight layer {missing[0]!r} (a recipe made on another model?)")
        stored: dict[str, int] = {}

        def values() -> Iterator[tuple[str, Any]]:  # one layer's new values at a time
            for name, fmt in chosen.items():
                value, stored[name] = layer_values(modules[name].weight.detach().float().numpy(), fmt)
                yield name, value

        return install(model, values(), stored, label)

    return prepare


def recipe_candidate(assignment: Mapping[str, str], name: str) -> Any:
    """An eval Candidate that installs the recipe (see `recipe_prepare`)."""
    from precisionlab.eval.candidates import Candidate

    return Candidate("recipe", name=name, prepare=recipe_prepare(assignment, name))


def save_recipe(path: str | Path, assignment: Mapping[str, str], **metadata: Any) -> Path:
    """recipe.json (module docstring) through recipe_file.write_recipe."""
    from precisionlab.search.recipe_file import write_recipe

    schemes = {n: f for n, f in assignment.items() if not is_float_format(f)}
    floats = {n: f for n, f in assignment.items() if is_float_format(f)}
    if not schemes:
        raise ValueError("the recipe keeps every layer at a float width; export reads a recipe with at least one "
                         "quantized layer")
    return write_recipe(path, schemes, **metadata, **{FLOAT_LAYERS: floats})


def load_recipe(path: str | Path) -> dict[str, str]:
    """layer -> format of a recipe.json (its "layers" and its "float_layers"); ValueError (one line) otherwise."""
    from precisionlab.search.recipe_file import read_recipe

    layers, metadata = read_recipe(path)
    out = dict(layers)
    floats = metadata.get(FLOAT_LAYERS) or {}
    if not isinstance(floats, dict):
        raise ValueError(f"{path}: \"{FLOAT_LAYERS}\" must map layer names to bf16 or fp16")
    for name, fmt in floats.items():
        canonical = canonical_format(str(fmt))
        if not is_float_format(canonical):
            raise ValueError(f"{path}: {FLOAT_LAYERS} {name!r}: {fmt!r} is not a float width (bf16, fp16)")
        out[str(name)] = canonical
    return out
