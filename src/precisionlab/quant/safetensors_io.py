"""Tagged quantized tensors in safetensors files, read and written by the safetensors library.

The file format is the library's (`safetensors.safe_open`, `safetensors.serialize_file`: its parser
validates the header, the offsets and the coverage of the data); this module adds only the tag layer
and two things the library's numpy API lacks: BF16 and F8 tensors, which numpy has no dtype for, are
handed over as their bit patterns (uint16 / uint8) and read back as such from the entry's bytes, and
every write is checked so that no value is silently cast (an array must already hold the declared
dtype: float data declared BF16 or int64 data declared I32 is an error, never bits or a wrapped value).

A quantized tensor `w` is stored as the entries w.codes (U8, packed), w.scales (in the
scale format: F32 / F16 / BF16 / F8_E4M3, ue8m0 as U8 biased exponents), w.zero_points
(U8, packed at the element width), w.mins (min=: the float block offsets in their format, F32 / F16 /
BF16; two-level K-quant tensors are not written here: GGUF is their file), w.outlier_rows (F16),
w.outlier_index (I32),
w.tensor_scale (F32, shape [1]); the metadata key "precisionlab.quant" = "1" tags the
file and "w" holds a JSON record (scheme, element format with its encoding, scale
format, shape, dtype). A tensor written through unchanged (`PassThrough`: a bias, a norm, an
integer table, whatever was not quantized) is stored as itself, under its own name, in its own
dtype, and its record says so: {"passthrough": true, "dtype", "shape", "reason"}; `load_quantized`
returns the quantized tensors, `load_passthrough` the others. Loading an untagged file, or one
whose record disagrees with its entries, is an error. Files are written to a temporary name and renamed, so a failed
write leaves nothing behind. Tensors are read one at a time, when asked for, with the file
open only for that read (a file of any number of tensors holds no file descriptors).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from precisionlab._atomic import atomic_write_with
from precisionlab.formats import FloatFormat, get_format
from precisionlab.json_input import json_object
from precisionlab.quant.blocks import canonical_view
from precisionlab.quant.elements import make_codec
from precisionlab.quant.packing import pack, packed_nbytes, unpack
from precisionlab.quant.scheme import parse_scheme
from precisionlab.quant.tensor import QuantizedTensor
from precisionlab.rounding import decode, encode
from precisionlab.rounding.bf16 import bf16_to_float32

TAG_KEY = "precisionlab.quant"
TAG_VERSION = "1"
SOURCE_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                 "F8_E5M2": "float8_e5m2"}
"""safetensors float dtypes and the name a quantized tensor records as its source dtype (the tag's "dtype")."""

NUMPY_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"),
}
"""safetensors dtypes that numpy holds natively (the library reads them with framework="numpy")."""

BIT_DTYPES: dict[str, tuple[np.dtype, str]] = {
    "BF16": (np.dtype("<u2"), "bfloat16"), "F8_E4M3": (np.dtype("u1"), "float8_e4m3fn"),
    "F8_E5M2": (np.dtype("u1"), "float8_e5m2"),
}
"""safetensors dtypes numpy has no type for: (the bit-pattern dtype they travel as, the library's name)."""

_LIBRARY_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
                  "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
                  "BOOL": "bool"}

INSTALL_HINT = "reading and writing .safetensors files needs the safetensors package: pip install safetensors"


def safetensors_library() -> ModuleType:
    """The safetensors package, imported when first needed (a one-line ModuleNotFoundError without it)."""
    try:
        import safetensors
    except ImportError:
        raise ModuleNotFoundError(INSTALL_HINT) from None
    return safetensors


@dataclass(frozen=True)
class Entry:
    """One tensor of a safetensors file: its dtype string and shape; `raw()` reads its values when asked."""

    path: Path
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def raw(self) -> np.ndarray:
        """The stored values in the entry's shape: numpy dtypes as themselves, BF16 / F8 as their bit
        patterns (uint16 / uint8). Other dtypes (complex, fp4, fnuz fp8, ...) are refused."""
        if self.dtype in NUMPY_DTYPES:
            library = safetensors_library()
            with _opened(self.path, library) as handle:
                return np.asarray(handle.get_tensor(self.name)).reshape(self.shape)
        if self.dtype in BIT_DTYPES:
            return _read_bits(self.path, self.name, BIT_DTYPES[self.dtype][0], self.size).reshape(self.shape)
        raise TypeError(f"{self.path}: tensor {self.name!r} holds {self.dtype}, which precisionlab does not read")

    def to_float32(self) -> np.ndarray:
        """Values as floats: BF16 and F8 decoded exactly to float32, F16 / F32 / F64 as stored; integer
        tensors are refused."""
        if self.dtype == "BF16":
            return bf16_to_float32(self.raw())
        if self.dtype in ("F8_E4M3", "F8_E5M2"):
            fmt = "e4m3" if self.dtype == "F8_E4M3" else "e5m2"
            return np.asarray(decode(self.raw(), fmt), dtype=np.float32).reshape(self.shape)
        if self.dtype in ("F16", "F32", "F64"):
            return self.raw()
        raise TypeError(f"tensor {self.name!r} holds {self.dtype} values, not floats")


class _opened:
    """safe_open(path, framework="numpy") with the library's errors as one-line ValueErrors."""

    def __init__(self, path: Path, library: ModuleType) -> None:
        self.path, self.library = path, library

    def __enter__(self) -> Any:
        try:
            self.handle = self.library.safe_open(str(self.path), framework="numpy")
            return self.handle.__enter__()
        except self.library.SafetensorError as exc:
            raise ValueError(f"{self.path}: not a valid safetensors file ({exc})") from None

    def __exit__(self, *exc: object) -> None:
        self.handle.__exit__(*exc)


def _read_bits(path: Path, name: str, dtype: np.dtype, count: int) -> np.ndarray:
    """An entry's bytes as `dtype` (the library has validated the header and its offsets when the file was
    listed; its numpy API cannot hand over BF16 / F8, so their bytes are read at the header's offsets)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        begin, end = json.loads(handle.read(length))[name]["data_offsets"]
        if end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name!r} has {end - begin} bytes for {count} values")
        handle.seek(8 + length + begin)
        data = np.fromfile(handle, dtype=dtype, count=count)
    if data.size != count:
        raise ValueError(f"{path}: tensor {name!r} is cut short (truncated file)")
    return data


# --------------------------------------------------------------------------- reading
def read_safetensors(path: str | Path) -> tuple[dict[str, Entry], dict[str, str]]:
    """Every tensor of a safetensors file (listed, read when asked for) and the metadata.

    The library parses and validates the file; a file it refuses is a ValueError naming it."""
    p = Path(path)
    library = safetensors_library()
    with _opened(p, library) as handle:
        metadata = dict(handle.metadata() or {})
        entries = {}
        for name in handle.keys():  # noqa: SIM118 (a file handle, not a dict)
            view = handle.get_slice(name)
            entries[name] = Entry(p, name, str(view.get_dtype()), tuple(int(d) for d in view.get_shape()))
    return entries, metadata


# --------------------------------------------------------------------------- writing
def write_safetensors(path: str | Path, tensors: dict[str, tuple[str, np.ndarray]],
                      metadata: dict[str, str] | None = None) -> None:
    """Write {name: (safetensors dtype, array)} atomically (temporary file, then rename) through the library.

    The array must already hold the declared dtype: the numpy dtype itself for F64 ... BOOL, and for BF16 /
    F8_E4M3 / F8_E5M2 their bit patterns (uint16 / uint8) or ml_dtypes' bfloat16 / float8 arrays. Anything
    else is a TypeError rather than a cast (1.7 declared BF16 would otherwise store the bits 0x0001, 9e-41;
    2^40 declared I32 would wrap to INT32_MIN). Big-endian arrays are byte-swapped (the same values)."""
    library = safetensors_library()
    keep = [_checked(name, dtype, arr) for name, (dtype, arr) in tensors.items()]
    specs = {name: library.TensorSpec(dtype=library_name, shape=list(arr.shape), data_ptr=arr.ctypes.data,
                                      data_len=arr.nbytes)
             for name, library_name, arr in keep}
    atomic_write_with(path, lambda tmp: library.serialize_file(specs, str(tmp), metadata=metadata or None),
                      suffix=".safetensors")


def _checked(name: str, dtype: str, arr: Any) -> tuple[str, str, np.ndarray]:
    """(name, the library's dtype name, a contiguous little-endian array of the declared dtype's bytes)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"tensor {name!r}: pass a numpy array, got {type(arr).__name__}")
    if dtype in NUMPY_DTYPES:
        want, library_name = NUMPY_DTYPES[dtype], _LIBRARY_NAMES[dtype]
        ok = arr.dtype.kind == want.kind and arr.dtype.itemsize == want.itemsize
    elif dtype in BIT_DTYPES:
        want, library_name = BIT_DTYPES[dtype]
        ok = arr.dtype.name == library_name or (arr.dtype.kind == "u" and arr.dtype.itemsize == want.itemsize)
    else:
        raise ValueError(f"tensor {name!r}: unsupported safetensors dtype {dtype!r}; choose one of "
                         f"{', '.join([*NUMPY_DTYPES, *BIT_DTYPES])}")
    if not ok:
        hint = (f"its bit patterns as {want.name}" if dtype in BIT_DTYPES else f"a {want.name} array")
        raise TypeError(f"tensor {name!r} is {arr.dtype} data declared {dtype}: pass {hint} (precisionlab does "
                        "not cast values on write)")
    data = np.ascontiguousarray(arr)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return name, library_name, data


# --------------------------------------------------------------------------- quantized tensors
def _element_description(scheme_element: str) -> str:
    if scheme_element == "nf4":
        return "nf4 (codebook)"
    fmt = get_format(scheme_element)
    if isinstance(fmt, FloatFormat):
        return f"{fmt.name} ({fmt.encoding.value}{', extended' if fmt.extended else ''}, max {fmt.max_finite:g})"
    return f"{fmt.name} ({'signed' if fmt.signed else 'unsigned'} integer)"


def _scale_entry(q: QuantizedTensor) -> tuple[str, np.ndarray]:
    return _float_entry(q.scale_values, q.scheme.scale)


def _float_entry(values: np.ndarray, fmt: str) -> tuple[str, np.ndarray]:
    """Float32 values of a scale (or min) format as a safetensors entry in that format."""
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


@dataclass(frozen=True)
class PassThrough:
    """A tensor written unchanged beside the quantized ones: its safetensors dtype, its stored values
    (BF16 / F8 as their bit patterns, as Entry.raw() reads them) and why it was not quantized."""

    dtype: str
    array: np.ndarray
    reason: str


def save_quantized(path: str | Path, tensors: dict[str, QuantizedTensor] | QuantizedTensor,
                   passthrough: dict[str, PassThrough] | None = None) -> None:
    """Write quantized tensors (a dict, or one tensor under the name 'tensor') to a tagged file, with the
    `passthrough` tensors stored unchanged (and recorded as such) beside them."""
    items = {"tensor": tensors} if isinstance(tensors, QuantizedTensor) else dict(tensors)
    entries: dict[str, tuple[str, np.ndarray]] = {}
    metadata = {TAG_KEY: TAG_VERSION}
    for name, q in items.items():
        # entry keys are NAME.<part> with dot-free parts, so dotted names (model.layers.0.w) cannot collide
        if not isinstance(name, str) or not name or name in ("__metadata__", TAG_KEY):
            raise ValueError(f"tensor name {name!r} is empty or reserved")
        if not isinstance(q, QuantizedTensor):
            raise TypeError(f"tensor {name!r} is a {type(q).__name__}, not a QuantizedTensor: quantize it first")
        if q.scheme.is_two_level:
            raise ValueError(f"tensor {name!r} is {q.scheme}, a two-level (K-quant) layout: write it to a GGUF file "
                             "(precisionlab's tagged safetensors hold one-level scales)")
        entries[f"{name}.codes"] = ("U8", q.packed)
        entries[f"{name}.scales"] = _scale_entry(q)
        if q.min_values is not None and q.scheme.min_format is not None:
            entries[f"{name}.mins"] = _float_entry(q.min_values, q.scheme.min_format)
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
    for name, kept in (passthrough or {}).items():
        if not isinstance(name, str) or not name or name in ("__metadata__", TAG_KEY):
            raise ValueError(f"tensor name {name!r} is empty or reserved")
        if name in items or name in entries:
            raise ValueError(f"tensor name {name!r} is both quantized and passed through (or collides with a "
                             "quantized tensor's entry)")
        if not isinstance(kept, PassThrough):
            raise TypeError(f"tensor {name!r} is a {type(kept).__name__}, not a PassThrough")
        entries[name] = (kept.dtype, kept.array)
        metadata[name] = json.dumps({"passthrough": True, "dtype": kept.dtype, "shape": list(kept.array.shape),
                                     "reason": kept.reason})
    write_safetensors(path, entries, metadata)


def load_passthrough(path: str | Path) -> dict[str, PassThrough]:
    """Every tensor of a tagged file that was written through unchanged, as stored, with its reason."""
    entries, metadata = read_safetensors(path)
    if metadata.get(TAG_KEY) != TAG_VERSION:
        raise ValueError(f"{path}: not a precisionlab quantized file (no '{TAG_KEY}' tag in its metadata)")
    out: dict[str, PassThrough] = {}
    for name, record in _records(path, metadata):
        if record.get("passthrough") is not True:
            continue
        entry = entries.get(name)
        shape = record.get("shape")
        if entry is None or entry.dtype != record.get("dtype") or list(entry.shape) != shape:
            held = f"{entry.dtype} {list(entry.shape)}" if entry is not None else "no such entry"
            raise ValueError(f"{path}: tensor {name!r} is recorded as passed through as {record.get('dtype')} "
                             f"{shape}, but the file holds {held}")
        out[name] = PassThrough(entry.dtype, entry.raw(), str(record.get("reason", "")))
    return out


def _records(path: str | Path, metadata: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """The JSON-object records of a tagged file's metadata (a tool's plain-string values are left alone)."""
    records = []
    for name, text in metadata.items():
        if name == TAG_KEY or not text.lstrip().startswith("{"):
            continue
        try:
            record = json_object(text)
        except ValueError as exc:
            raise ValueError(f"{path}: bad record for tensor {name!r}: {exc}") from None
        records.append((name, record))
    return records


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
            if isinstance(record, dict) and record.get("passthrough") is True:
                continue  # written through unchanged: load_passthrough reads it
            scheme = parse_scheme(record["scheme"])
            dims = record["shape"]
            if not isinstance(dims, list) or not all(type(d) is int for d in dims):  # no 33.5 -> 33, "4" -> 4
                raise ValueError(f"shape {dims!r} is not a list of integers")
            shape = tuple(dims)
            if not shape or any(d <= 0 for d in shape) or record.get("dtype") not in SOURCE_DTYPES.values():
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
        if entry.dtype != dtype or entry.size != count:
            raise ValueError(f"{path}: entry {entry.name!r} holds {entry.size} {entry.dtype} values; scheme "
                             f"{scheme} on shape {list(shape)} needs {count} {dtype}")
        return entry.raw().reshape(-1)

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
    if codes.dtype != "U8" or codes.size != packed_nbytes(lay.n_stored, bits):
        raise ValueError(f"{path}: tensor {name!r} codes hold {codes.size} bytes; scheme {scheme} on shape "
                         f"{shape} needs {packed_nbytes(lay.n_stored, bits)}")
    if scheme.is_two_level:
        raise ValueError(f"{path}: tensor {name!r} is {scheme}, a two-level (K-quant) layout these files do not hold")

    def block_values(kind: str, fmt: Any) -> np.ndarray:
        """The per-block scales or mins (`kind`), checked against the layout's block count."""
        entry = need(kind)
        if math.prod(entry.shape) != lay.n_blocks:
            raise ValueError(f"{path}: tensor {name!r} has {math.prod(entry.shape)} {kind}; needs {lay.n_blocks}")
        try:
            return _scale_values(entry.dtype, entry.raw(), fmt, lay.grid)
        except ValueError as exc:
            raise ValueError(f"{path}: tensor {name!r}: {str(exc).replace('scales', kind, 1)}") from None

    scales = block_values("scales", scheme.scale)
    mins = None if scheme.min_format is None else block_values("mins", scheme.min_format)
    zero_points = None
    if scheme.has_zero_point:
        zp = unpack(check(need("zero_points"), "U8", packed_nbytes(lay.n_blocks, bits)), bits, lay.n_blocks)
        zp = zp.astype(np.int64)
        fmt = make_codec(scheme).fmt
        if getattr(fmt, "signed", False):
            zp = np.where(zp >= 1 << (bits - 1), zp - (1 << bits), zp)
        zero_points = zp.astype(np.float32).reshape(lay.grid)
    tensor_scale = None
    if scheme.tensor_scale:
        tensor_scale = float(check(need("tensor_scale"), "F32", 1)[0])
        if not (math.isfinite(tensor_scale) and tensor_scale > 0):
            raise ValueError(f"{path}: tensor {name!r} has tensor scale {tensor_scale}; it must be finite and > 0")
    return QuantizedTensor(scheme, shape, dtype, codes.raw().reshape(-1), scales, zero_points, tensor_scale,
                           rows, index, min_values=mins)
