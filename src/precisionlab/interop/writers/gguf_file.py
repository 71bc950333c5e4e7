"""A GGUF file written through the gguf package's `GGUFWriter`, whole: into a temporary sibling, then renamed.

    write_gguf(path, "llama", pairs, tensors)

`pairs` are (key, value, value type, array item type) as `GGUFWriter.add_key_value` takes them (the
architecture is the writer's own general.architecture); `tensors` are `GGUFTensor`s: a name, the array
GGUFWriter.add_tensor stores (float32 / float16 values, BF16 bit patterns as uint16, or a quantized type's
block bytes as (rows, bytes per row) uint8) and its GGML type name. `copy_pairs(reader)` gives a GGUF file's own
key-value pairs in that form (the bookkeeping keys GGUF.* and general.architecture left out).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab._atomic import atomic_path

OWN_KEYS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture")
"""Keys a GGUF writer writes itself: never copied from a source file."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    data: np.ndarray
    kind: str
    """The GGML type name (F32, F16, BF16, Q4_0, ...)."""

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


Pair = tuple[str, Any, Any, Any]


def gguf_module() -> Any:
    try:
        import gguf
    except ImportError:
        raise ModuleNotFoundError("writing GGUF files needs the gguf package: pip install gguf") from None
    return gguf


def copy_pairs(reader: Any, skip: Iterable[str] = ()) -> list[Pair]:
    """Every key-value pair of a GGUFReader's file, in order, as (key, value, type, item type)."""
    gguf = gguf_module()
    left_out = set(OWN_KEYS) | set(skip)
    pairs: list[Pair] = []
    for name, field in reader.fields.items():
        if name in left_out or not field.types:
            continue
        kind = field.types[0]
        item = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        if kind == gguf.GGUFValueType.ARRAY and len(field.types) > 2:
            raise ValueError(f"GGUF key {name}: nested arrays are not copied")
        pairs.append((name, field.contents(), kind, item))
    return pairs


def write_gguf(path: str | Path, arch: str, pairs: Sequence[Pair], tensors: Sequence[GGUFTensor]) -> Path:
    """Write the file whole (see the module docstring); returns its path."""
    gguf = gguf_module()
    target = Path(path)
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("two tensors of the GGUF file share a name")
    with atomic_path(target, suffix=".gguf") as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        try:
            for key, value, kind, item in pairs:
                writer.add_key_value(key, value, kind, sub_type=item)
            for t in tensors:
                raw = getattr(gguf.GGMLQuantizationType, t.kind)
                writer.add_tensor(t.name, t.data, raw_dtype=raw)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return target
