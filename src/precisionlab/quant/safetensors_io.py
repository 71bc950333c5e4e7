"""Read and write the safetensors file format (no dependency), and tagged quantized tensors.

File layout (safetensors): 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian tensor bytes; offsets are relative to the end of the header
and the tensors tile the data section without gaps.

A quantized tensor `w` is stored as the entries w.codes (U8, packed), w.scales (in the
scale format: F32 / F16 / BF16 / F8_E4M3, ue8m0 as U8 biased exponents), w.zero_points
(U8, packed at the element width), w.outlier_rows (F16), w.outlier_index (I32),
w.tensor_scale (F32, shape [1]); the metadata key "precisionlab.quant" = "1" tags the
file and "w" holds a JSON record (scheme, element format with its encoding, scale
format, shape, dtype). Loading an untagged file, or one whose record disagrees with its
entries, is an error. Files are written to a temporary name and renamed, so a failed
write leaves nothing behind.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab._atomic import atomic_write_bytes
from precisionlab.formats import FloatFormat, get_format
from precisionlab.quant.blocks import canonical_view
from precisionlab.quant.packing import pack, packed_nbytes, unpack
from precisionlab.quant.scheme import parse_scheme
from precisionlab.quant.tensor import QuantizedTensor
from precisionlab.rounding import decode, encode

TAG_KEY = "precisionlab.quant"
TAG_VERSION = "1"
MAX_HEADER = 100 * 2**20
SOURCE_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")

DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("u1", 1),
    "F8_E4M3": ("u1", 1), "F8_E5M2": ("u1", 1),
}
"""safetensors dtype -> (numpy dtype of the raw bytes, item size). BF16 and F8 are read as bits."""


@dataclass
class Entry:
    """One tensor of a safetensors file: its dtype string, shape and raw data (a memory map)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    raw: np.ndarray

    def to_float32(self) -> np.ndarray:
        """Values as floats: BF16 and F8 decoded exactly to float32, F16 / F32 / F64 as stored (a
        memory map, no copy); integer tensors are refused."""
        if self.dtype == "BF16":
            return (self.raw.astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(self.shape)
        if self.dtype in ("F8_E4M3", "F8_E5M2"):
            fmt = "e4m3" if self.dtype == "F8_E4M3" else "e5m2"
            return np.asarray(decode(self.raw, fmt), dtype=np.float32).reshape(self.shape)
        if self.dtype in ("F16", "F32", "F64"):
            return np.asarray(self.raw).reshape(self.shape)
        raise TypeError(f"tensor {self.name!r} holds {self.dtype} integers, not floats")


# --------------------------------------------------------------------------- reading
def read_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """(header dict, data start offset); a clear ValueError for anything that is not safetensors."""
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{p}: not a safetensors file (shorter than its 8-byte header length)")
        (length,) = struct.unpack("<Q", head)
        if length == 0 or length > MAX_HEADER or 8 + length > size:
            raise ValueError(f"{p}: not a safetensors file (header length {length} does not fit a {size}-byte file)")
        text = fh.read(length)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: corrupt safetensors header ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{p}: corrupt safetensors header (not a JSON object)")
    _check_entries(p, header, size - 8 - length)
    return header, 8 + length


def _check_entries(p: Path, header: dict[str, Any], data_size: int) -> None:
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ValueError(f"{p}: corrupt safetensors metadata (must map strings to strings)")
            continue
        if not isinstance(info, dict) or {"dtype", "shape", "data_offsets"} - set(info):
            raise ValueError(f"{p}: corrupt safetensors entry {name!r}")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            raise ValueError(f"{p}: tensor {name!r} has unsupported dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)):
            raise ValueError(f"{p}: corrupt safetensors entry {name!r} (shape or offsets)")
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise ValueError(f"{p}: tensor {name!r} lies outside the file (truncated or corrupt)")
        if end - begin != math.prod(shape) * DTYPES[dtype][1]:
            raise ValueError(f"{p}: tensor {name!r} has {end - begin} bytes for shape {shape} of {dtype}")
        spans.append((begin, end))
    spans.sort()
    for (_, end), (begin, _) in itertools.pairwise(spans):
        if begin < end:
            raise ValueError(f"{p}: corrupt safetensors file (tensors overlap)")


def read_safetensors(path: str | Path) -> tuple[dict[str, Entry], dict[str, str]]:
    """Every tensor of a safetensors file, memory-mapped, and the metadata."""
    header, start = read_header(path)
    metadata = header.pop("__metadata__", {}) or {}
    entries: dict[str, Entry] = {}
    for name, info in header.items():
        begin = info["data_offsets"][0]
        raw_dtype, _ = DTYPES[info["dtype"]]
        count = math.prod(info["shape"])
        if count == 0:
            raw = np.zeros(0, dtype=raw_dtype)
        else:
            raw = np.memmap(path, dtype=raw_dtype, mode="r", offset=start + begin, shape=(count,))
        entries[name] = Entry(name, info["dtype"], tuple(info["shape"]), raw)
    return entries, metadata


# --------------------------------------------------------------------------- writing
def write_safetensors(path: str | Path, tensors: dict[str, tuple[str, np.ndarray]],
                      metadata: dict[str, str] | None = None) -> None:
    """Write {name: (dtype string, array of raw values)} atomically (temp file, then rename)."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, (dtype, arr) in tensors.items():
        raw_dtype, _ = DTYPES[dtype]
        data = np.ascontiguousarray(arr, dtype=np.dtype(raw_dtype)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    atomic_write_bytes(path, [struct.pack("<Q", len(text)), text, *blobs])


# --------------------------------------------------------------------------- quantized tensors
def _element_description(scheme_element: str) -> str:
    if scheme_element == "nf4":
        return "nf4 (codebook)"
    fmt = get_format(scheme_element)
    if isinstance(fmt, FloatFormat):
        return f"{fmt.name} ({fmt.encoding.value}{', extended' if fmt.extended else ''}, max {fmt.max_finite:g})"
    return f"{fmt.name} ({'signed' if fmt.signed else 'unsigned'} integer)"


def _scale_entry(q: QuantizedTensor) -> tuple[str, np.ndarray]:
    fmt = q.scheme.scale
    values = q.scale_values
    if fmt == "fp32":
        return "F32", values.astype(np.float32)
    if fmt == "fp16":
        return "F16", values.astype(np.float16)
    if fmt == "bf16":
        return "BF16", np.asarray(encode(values, "bf16"), dtype=np.uint16)
    if fmt == "e4m3":
        return "F8_E4M3", np.asarray(encode(values, "e4m3"), dtype=np.uint8)
    return "U8", np.asarray(encode(values, "ue8m0", overflow="saturate"), dtype=np.uint8)


def _scale_values(dtype: str, raw: np.ndarray, scale_format: str, shape: tuple[int, ...]) -> np.ndarray:
    expected = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "e4m3": "F8_E4M3", "ue8m0": "U8"}[scale_format]
    if dtype != expected:
        raise ValueError(f"scales stored as {dtype} but the scheme's scale format {scale_format} needs {expected}")
    if dtype in ("F32", "F16"):
        return np.asarray(raw, dtype=np.float32).reshape(shape)
    return np.asarray(decode(np.asarray(raw), scale_format), dtype=np.float32).reshape(shape)


def save_quantized(path: str | Path, tensors: dict[str, QuantizedTensor] | QuantizedTensor) -> None:
    """Write quantized tensors (a dict, or one tensor under the name 'tensor') to a tagged file."""
    items = {"tensor": tensors} if isinstance(tensors, QuantizedTensor) else dict(tensors)
    entries: dict[str, tuple[str, np.ndarray]] = {}
    metadata = {TAG_KEY: TAG_VERSION}
    for name, q in items.items():
        # entry keys are NAME.<part> with dot-free parts, so dotted names (model.layers.0.w) cannot collide
        if not isinstance(name, str) or not name or name in ("__metadata__", TAG_KEY):
            raise ValueError(f"tensor name {name!r} is empty or reserved")
        if not isinstance(q, QuantizedTensor):
            raise TypeError(f"tensor {name!r} is a {type(q).__name__}, not a QuantizedTensor: quantize it first")
        entries[f"{name}.codes"] = ("U8", q.packed)
        entries[f"{name}.scales"] = _scale_entry(q)
        if q.zero_points is not None:
            bits = q.element_bits
            zp = (q.zero_points.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
            entries[f"{name}.zero_points"] = ("U8", pack(zp, bits))
        if q.outlier_rows is not None and q.outlier_index is not None:
            entries[f"{name}.outlier_rows"] = ("F16", q.outlier_rows)
            entries[f"{name}.outlier_index"] = ("I32", q.outlier_index)
        if q.tensor_scale is not None:
            entries[f"{name}.tensor_scale"] = ("F32", np.asarray([q.tensor_scale], dtype=np.float32))
        metadata[name] = json.dumps({
            "scheme": str(q.scheme), "element": _element_description(q.scheme.element),
            "scale_format": q.scheme.scale, "shape": list(q.shape), "dtype": q.dtype,
        })
    write_safetensors(path, entries, metadata)


def load_quantized(path: str | Path) -> dict[str, QuantizedTensor]:
    """Read every quantized tensor of a tagged file; untagged or inconsistent files are errors.

    Every metadata value that is a JSON object is a tensor record; other values (plain strings a
    tool added, such as format = pt) are left alone."""
    entries, metadata = read_safetensors(path)
    if metadata.get(TAG_KEY) != TAG_VERSION:
        raise ValueError(f"{path}: not a precisionlab quantized file (no '{TAG_KEY}' tag in its metadata); "
                         "plain tensors are read by `quant compare`, not loaded as quantized tensors")
    out: dict[str, QuantizedTensor] = {}
    for name, text in metadata.items():
        if name == TAG_KEY or not text.lstrip().startswith("{"):
            continue  # a tool's own metadata (safetensors writers add e.g. format = pt): records are JSON objects
        try:
            record = json.loads(text)
            scheme = parse_scheme(record["scheme"])
            dims = record["shape"]
            if not isinstance(dims, list) or not all(type(d) is int for d in dims):  # no 33.5 -> 33, "4" -> 4
                raise ValueError(f"shape {dims!r} is not a list of integers")
            shape = tuple(dims)
            if not shape or any(d <= 0 for d in shape) or record.get("dtype") not in SOURCE_DTYPES:
                raise ValueError(f"shape {list(shape)} / dtype {record.get('dtype')!r}")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad record for tensor {name!r}: {exc}") from None
        if record.get("element") != _element_description(scheme.element) or record.get("scale_format") != scheme.scale:
            raise ValueError(f"{path}: tensor {name!r} is tagged {record.get('element')!r} / "
                             f"{record.get('scale_format')!r}, which does not match its scheme {scheme}")
        out[name] = _rebuild(path, name, entries, scheme, shape, str(record["dtype"]))
    return out


def _rebuild(path: str | Path, name: str, entries: dict[str, Entry], scheme: Any, shape: tuple[int, ...],
             dtype: str) -> QuantizedTensor:
    def need(suffix: str) -> Entry:
        key = f"{name}.{suffix}"
        if key not in entries:
            raise ValueError(f"{path}: tensor {name!r} lacks its entry {key!r}")
        return entries[key]

    def check(entry: Entry, dtype: str, count: int) -> np.ndarray:
        if entry.dtype != dtype or entry.raw.size != count:
            raise ValueError(f"{path}: entry {entry.name!r} holds {entry.raw.size} {entry.dtype} values; scheme "
                             f"{scheme} on shape {list(shape)} needs {count} {dtype}")
        return np.asarray(entry.raw).copy()

    try:
        _, _, view = canonical_view(shape, scheme)
    except ValueError as exc:
        raise ValueError(f"{path}: tensor {name!r}: {exc}") from None
    probe = QuantizedTensor(scheme, shape, dtype, np.zeros(0, np.uint8), np.zeros((1, 1, 1), np.float32))
    rows = index = None
    if scheme.outliers:
        k = scheme.outliers
        index = check(need("outlier_index"), "I32", k).astype(np.int32)
        if k >= view[1] or index.min() < 0 or index.max() >= view[1] or (np.diff(index) <= 0).any():
            raise ValueError(f"{path}: tensor {name!r} outlier row indices are not {k} ascending rows of {view[1]}")
        rows = check(need("outlier_rows"), "F16", k * view[2]).view(np.float16).reshape(k, view[2])
        probe.outlier_index = index
    lay = probe.layout
    bits = probe.element_bits
    codes = need("codes")
    if codes.dtype != "U8" or codes.raw.size != packed_nbytes(lay.n_stored, bits):
        raise ValueError(f"{path}: tensor {name!r} codes hold {codes.raw.size} bytes; scheme {scheme} on shape "
                         f"{shape} needs {packed_nbytes(lay.n_stored, bits)}")
    scales_entry = need("scales")
    if math.prod(scales_entry.shape) != lay.n_blocks:
        raise ValueError(f"{path}: tensor {name!r} has {math.prod(scales_entry.shape)} scales; needs {lay.n_blocks}")
    try:
        scales = _scale_values(scales_entry.dtype, scales_entry.raw, scheme.scale, lay.grid)
    except ValueError as exc:
        raise ValueError(f"{path}: tensor {name!r}: {exc}") from None
    zero_points = None
    if not scheme.symmetric:
        zp = unpack(check(need("zero_points"), "U8", packed_nbytes(lay.n_blocks, bits)), bits, lay.n_blocks)
        zp = zp.astype(np.int64)
        from precisionlab.quant.core import make_codec

        fmt = make_codec(scheme).fmt
        if getattr(fmt, "signed", False):
            zp = np.where(zp >= 1 << (bits - 1), zp - (1 << bits), zp)
        zero_points = zp.astype(np.float32).reshape(lay.grid)
    tensor_scale = None
    if scheme.tensor_scale:
        tensor_scale = float(check(need("tensor_scale"), "F32", 1)[0])
        if not (math.isfinite(tensor_scale) and tensor_scale > 0):
            raise ValueError(f"{path}: tensor {name!r} has tensor scale {tensor_scale}; it must be finite and > 0")
    return QuantizedTensor(scheme, shape, dtype, np.asarray(codes.raw).copy(), scales, zero_points, tensor_scale,
                           rows, index)
