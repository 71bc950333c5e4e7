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

import struct
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


HEADER = struct.Struct("<4sIQQ")
"""A GGUF file's first 24 bytes: the magic, the version, the tensor count and the metadata entry count."""
SMALLEST_ENTRY = 8 + 4 + 1
"""Bytes of the smallest metadata entry: the key's length (u64, the key may be empty), the value type, a u8."""
SMALLEST_TENSOR = 8 + 4 + 8 + 4 + 8
"""Bytes of the smallest tensor description: name length, dimension count, one dimension, type, offset."""
READ_ERRORS = (ValueError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError, struct.error, EOFError,
               RuntimeError, OSError)
"""What gguf's reader raises on a damaged file (numpy's reshape and view, struct, mmap: their own wording)."""


def open_reader(path: str | Path) -> Any:
    """gguf's GGUFReader over `path`. A missing or unreadable file is FileNotFoundError / PermissionError; a file gguf
    cannot read is one ValueError naming it and what is wrong (`damage`), never numpy's or mmap's own wording (the
    original error stays chained, for --debug)."""
    gguf = _gguf()
    where = Path(path)
    try:
        return gguf.GGUFReader(where)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except PermissionError:
        raise PermissionError(f"{where}: permission denied") from None
    except READ_ERRORS as exc:
        raise ValueError(f"{where}: not a readable GGUF file: {damage(where)}") from exc


def damage(path: Path) -> str:
    """What is wrong with a GGUF file that gguf's reader could not read, told from its size and its 24-byte header:
    not GGUF at all, truncated (fewer bytes than its header's counts need at the least), or damaged past that."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(HEADER.size)
    except OSError as exc:
        return f"not readable ({exc.strerror or exc})"
    if not size:
        return "the file is empty"
    if head[:4] != GGUF_MAGIC:
        return "it does not begin with the 4 bytes 'GGUF' (not a GGUF file at all)"
    if len(head) < HEADER.size:
        return f"truncated: {size} bytes, fewer than the {HEADER.size} of its header"
    _, version, tensors, entries = HEADER.unpack(head)
    if version > 0xFFFF:  # a big-endian file
        _, version, tensors, entries = struct.unpack(">4sIQQ", head)
    if version not in (1, 2, 3):
        return f"GGUF version {version}, not one the gguf reader knows (1-3): damaged, or from a newer writer"
    least = HEADER.size + entries * SMALLEST_ENTRY + tensors * SMALLEST_TENSOR
    counts = f"its header announces {tensors} tensors and {entries} metadata entries"
    if size < least:
        return f"truncated: {size:,} bytes, while {counts}, which take at least {least:,}"
    return f"truncated or corrupt: {size:,} bytes; {counts}, and they cannot all be read from it"


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
    """Index every tensor of a GGUF file; ValueError naming the file when it is not readable GGUF (open_reader)."""
    size = path.stat().st_size
    reader = open_reader(path)
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
