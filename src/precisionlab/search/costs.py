"""What each layer costs in each format: exact bytes from the quant library's accounting.

    fmts = parse_formats(["int4:g128,int8:row,bf16"])      # canonical names, in order
    format_bytes("int4:g128", (576, 576))                 # 190080: codes with padding, plus the scales
    format_bytes("bf16", (576, 576))                      # 663552: two bytes a weight, nothing else

A format is a quant scheme (any string of `precisionlab.quant`: int4:g128, nvfp4, mxfp4, e4m3:row, int8:row ...)
or a float width kept as it is (`FLOAT_FORMATS`: bf16, fp16; the weight rounded to nearest even once, two bytes
a weight). A scheme's bytes are `quant.stored_bytes` of the weight's (out, in) shape: codes, scales, zero points,
minimums and the padding of a row the group does not divide, the same count as `QuantizedTensor.nbytes` and
the evaluation's `model_bytes` (models.weights). A scheme that cannot hold a shape (`stored_bytes` raises) is
no option for that layer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

FLOAT_FORMATS = {"bf16": 2, "fp16": 2}
"""Float widths a layer may be kept at, with their bytes per weight (no scale)."""
_FLOAT_ALIASES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "f16": "fp16"}


def canonical_format(text: str) -> str:
    """The canonical name of one format (a float width, or `str(parse_scheme(text))`); ValueError naming it."""
    from precisionlab.quant import parse_scheme

    name = text.strip()
    if not name:
        raise ValueError("--formats: an empty format name")
    if name.lower() in _FLOAT_ALIASES:
        return _FLOAT_ALIASES[name.lower()]
    try:
        return str(parse_scheme(name))
    except ValueError as exc:
        raise ValueError(f"--formats: unknown format {name!r} (a quant scheme such as int4:g128, nvfp4, "
                         f"e4m3:row, int8:row, or a float width: {', '.join(FLOAT_FORMATS)}): {exc}") from None


def parse_formats(specs: Iterable[str]) -> list[str]:
    """Comma-separated and repeated format specs, canonical, in order, without repeats; ValueError when fewer
    than one remain."""
    out: list[str] = []
    for spec in specs:
        for part in str(spec).split(","):
            if part.strip():
                name = canonical_format(part)
                if name not in out:
                    out.append(name)
    if not out:
        raise ValueError("--formats: give at least one format, e.g. int4:g128,int8:row,bf16")
    return out


def is_float_format(fmt: str) -> bool:
    return fmt in FLOAT_FORMATS


def format_bytes(fmt: str, shape: Sequence[int]) -> int:
    """Stored bytes of one weight of `shape` ((out, in) for a linear) in `fmt` (module docstring); ValueError when
    the scheme cannot hold the shape."""
    from precisionlab.quant import stored_bytes

    dims = tuple(int(d) for d in shape)
    if is_float_format(fmt):
        return FLOAT_FORMATS[fmt] * math.prod(dims)
    return int(sum(stored_bytes(fmt, dims).values()))


def layer_values(weight: Any, fmt: str) -> tuple[Any, int]:
    """(values the model computes with, stored bytes) of one weight (a float32 numpy array) in `fmt`: a scheme's
    exact dequantized values (`quant.quantize(...).dequantize()`), or the weight rounded to nearest even at a
    float width (one rounding from float32, torch's cast: round to nearest even, the value `round_to` gives)."""
    import numpy as np

    w = np.asarray(weight, dtype=np.float32)
    if is_float_format(fmt):
        from precisionlab import peers

        torch = peers.torch()
        target = torch.bfloat16 if fmt == "bf16" else torch.float16
        values = torch.from_numpy(np.ascontiguousarray(w)).to(target).to(torch.float32).numpy()
        return values, format_bytes(fmt, w.shape)
    from precisionlab.quant import quantize

    q = quantize(w, fmt)
    return np.asarray(q.dequantize(), dtype=np.float32), int(q.nbytes)
