"""recipe.json, the per-layer recipe as a file: what `search --out` writes and `export --from`, `eval --from` and
`ladder --recipe` read. It lives with the search that writes it, below export (which reads it as one kind of
saved result: export.results).

    {"format": "precisionlab.recipe", "version": 1, <metadata>..., "layers": {name: scheme, ...}}

Each named layer is quantized round-to-nearest under its own scheme, every other layer is kept in float; every
other key is metadata (the search writes its budget, the model and `float_layers`: layers it kept at bf16 / fp16).

    write_recipe(path, layers, **metadata)      the file, written whole (atomically)
    is_recipe(data)                             whether parsed JSON is a recipe (it has "layers" and no "lab")
    parse_recipe(data, where)                   (layer -> canonical scheme, metadata), ValueError naming `where`
    read_recipe(path)                           the same from a file
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from precisionlab.json_input import json_object

RECIPE_FORMAT = "precisionlab.recipe"
RECIPE_VERSION = 1


def write_recipe(path: str | Path, layers: dict[str, str], **metadata: Any) -> Path:
    """A recipe.json (the format `parse_recipe` reads), written whole."""
    from precisionlab._atomic import atomic_write_with

    body = {"format": RECIPE_FORMAT, "version": RECIPE_VERSION, **metadata, "layers": dict(layers)}
    text = json.dumps(body, indent=2, sort_keys=False) + "\n"
    return atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def is_recipe(data: dict[str, Any]) -> bool:
    """A recipe names its layers and is no lab's saved result."""
    return "layers" in data and data.get("lab") is None


def parse_recipe(data: dict[str, Any], where: str) -> tuple[dict[str, str], dict[str, Any]]:
    """(layer -> canonical scheme, metadata) of a parsed recipe; ValueError starting with `where` when its format,
    version, layers or a scheme is not one this precisionlab reads."""
    from precisionlab.quant import parse_scheme

    fmt, version = data.get("format", RECIPE_FORMAT), data.get("version", RECIPE_VERSION)
    if fmt != RECIPE_FORMAT or version != RECIPE_VERSION:
        raise ValueError(f"{where}: format {fmt!r} version {version!r}; this precisionlab reads "
                         f"{RECIPE_FORMAT!r} version {RECIPE_VERSION}")
    layers = data["layers"]
    if not isinstance(layers, dict) or not layers:
        raise ValueError(f"{where}: \"layers\" must map layer names to schemes")
    out: dict[str, str] = {}
    for name, scheme in layers.items():
        if not isinstance(scheme, str):
            raise ValueError(f"{where}: layer {name!r}: the scheme must be a string, got {scheme!r}")
        try:
            out[str(name)] = str(parse_scheme(scheme))
        except ValueError as exc:
            raise ValueError(f"{where}: layer {name!r}: {exc}") from None
    return out, {k: v for k, v in data.items() if k != "layers"}


def read_recipe(path: str | Path) -> tuple[dict[str, str], dict[str, Any]]:
    """parse_recipe of the file at `path`; ValueError (one line, naming the file) for a missing file, one that is
    not JSON, or a saved result that is not a recipe."""
    where = Path(path).expanduser()
    if not where.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        data = json_object(where.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{where}: not a recipe.json (JSON): {exc}") from None
    if not is_recipe(data):
        what = f"a saved {data['lab']} result" if data.get("lab") else "no \"layers\""
        raise ValueError(f"{where}: {what}, not a recipe.json (the file `precisionlab search --out DIR` writes)")
    return parse_recipe(data, str(where))
