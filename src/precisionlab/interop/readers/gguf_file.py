"""GGUF files (llama.cpp), through the `gguf` package's GGUFReader for the file structure.

GGUF stores a tensor's dimensions as ggml's ne[0], ne[1], ... with ne[0] the contiguous (fastest)
dimension, so the numpy shape is ne reversed: a 576 x 49152 (ne) embedding is a (49152, 576)
array whose rows are 576 contiguous values. Quantized types tile each row with blocks
(`gguf_blocks`); the tensor's bytes are located by offset and memory-mapped when decoded, so an
indexed file holds no tensor data in memory.

Layouts are "gguf:<TYPE>" (gguf:Q4_1, gguf:F32, ...); F32 / F16 / BF16 decode to their exact float32
values (scheme None). Each quantized type reports its precisionlab preset as the scheme (gguf_q4_1, ...;
`quant.scheme.GGUF_PRESETS`), and `quantized(tensor)` gives its blocks as a QuantizedTensor under that
preset, so `quantize(tensor.dequantize(), tensor.scheme)` can be compared with the file's own blocks.
Other GGML types (Q2_K, Q3_K, Q5_K, the IQ and TQ families, MXFP4) are kept with layout
"unknown" and a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import UNKNOWN, Checkpoint, CheckpointTensor, PartRef
from precisionlab.interop.readers.gguf_blocks import BLOCK_FORMATS, dequantize_blocks, quantized_tensor
from precisionlab.quant.tensor import QuantizedTensor
from precisionlab.rounding.bf16 import bf16_to_float32

GGUF_MAGIC = b"GGUF"
FLOAT_TYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
MAX_LISTED = 64
"""Metadata arrays longer than this (a vocabulary) are summarised, not copied."""


def has_gguf_magic(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _gguf() -> Any:
    try:
        import gguf
    except ImportError:
        raise ImportError("reading GGUF files needs the gguf package: pip install gguf") from None
    return gguf


def _metadata(reader: Any) -> dict[str, Any]:
    gguf = _gguf()
    out: dict[str, Any] = {"format": "gguf"}
    for name, fld in reader.fields.items():
        if not fld.types:
            continue
        try:
            if fld.types[0] == gguf.GGUFValueType.ARRAY:
                count = len(fld.data)
                out[name] = fld.contents() if count <= MAX_LISTED else f"<array of {count} {fld.types[-1].name}>"
            else:
                value = fld.contents()
                out[name] = value.item() if isinstance(value, np.generic) else value
        except (ValueError, IndexError, UnicodeDecodeError):
            out[name] = "<unreadable>"
    return out


def read_gguf(path: Path) -> Checkpoint:
    """Index every tensor of a GGUF file; ValueError naming the file when it is not readable GGUF."""
    gguf = _gguf()
    try:
        size = path.stat().st_size
        reader = gguf.GGUFReader(path)
    except PermissionError:
        raise PermissionError(f"{path}: permission denied") from None
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable GGUF file, truncated or corrupt ({exc})") from None
    if reader.byte_order == "S":
        raise ValueError(f"{path}: a byte-swapped (big-endian) GGUF file; this reader handles little-endian files")
    notes: list[str] = []
    tensors: list[CheckpointTensor] = []
    for t in reader.tensors:
        ne = [int(d) for d in t.shape]
        shape = tuple(reversed(ne))
        type_name = t.tensor_type.name
        offset, nbytes = int(t.data_offset), int(t.n_bytes)
        if offset + nbytes > size:
            raise ValueError(f"{path}: truncated: tensor {t.name} needs bytes up to {offset + nbytes}, the file holds "
                             f"{size}")
        details: dict[str, Any] = {"ggml_type": type_name, "ne": ne}
        if type_name in FLOAT_TYPES:
            ref = PartRef(str(path), offset, nbytes, FLOAT_TYPES[type_name], shape, type_name)
            tensors.append(CheckpointTensor(t.name, f"gguf:{type_name}", None, shape, str(path), {"data": ref},
                                            decode, details))
            continue
        fmt = BLOCK_FORMATS.get(type_name)
        if fmt is None or ne[0] % fmt.block_size or nbytes != t.n_elements // fmt.block_size * fmt.type_size:
            why = (f"GGML type {type_name} is not one this reader decodes" if fmt is None
                   else f"{type_name} row of {ne[0]} is not whole blocks of {fmt.block_size}")
            notes.append(f"{t.name}: {why}")
            ref = PartRef(str(path), offset, nbytes, "u1", (nbytes,), type_name)
            tensors.append(CheckpointTensor(t.name, UNKNOWN, None, shape, str(path), {"blocks": ref}, None, details,
                                            why))
            continue
        details.update(block_size=fmt.block_size, block_bytes=fmt.type_size)
        ref = PartRef(str(path), offset, nbytes, "u1", (nbytes,), type_name)
        tensors.append(CheckpointTensor(t.name, f"gguf:{type_name}", fmt.scheme, shape, str(path), {"blocks": ref},
                                        decode, details))
    return Checkpoint(str(path), tensors, [str(path)], _metadata(reader), notes)


def decode(tensor: CheckpointTensor) -> np.ndarray:
    """A GGUF tensor's float32 values in numpy order (ne reversed)."""
    type_name = tensor.details["ggml_type"]
    if type_name in FLOAT_TYPES:
        raw = tensor.refs["data"].load()
        if type_name == "BF16":
            return bf16_to_float32(raw).reshape(tensor.shape)
        return np.array(raw, dtype=np.float32).reshape(tensor.shape)
    values = dequantize_blocks(tensor.refs["blocks"].load(), BLOCK_FORMATS[type_name])
    return values.reshape(tensor.shape)


def quantized(tensor: CheckpointTensor) -> QuantizedTensor:
    """A GGUF block tensor as a QuantizedTensor under its gguf_* preset: the stored codes, scales and mins."""
    type_name = tensor.details.get("ggml_type")
    if tensor.decoder is not decode or type_name not in BLOCK_FORMATS:
        raise ValueError(f"{tensor.name}: not a GGUF block tensor this reader decodes (layout {tensor.layout})")
    return quantized_tensor(tensor.refs["blocks"].load(), type_name, tensor.shape)
