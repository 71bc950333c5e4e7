"""Index safetensors checkpoints: single files, sharded directories and their index JSON.

The safetensors layout: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the raw
little-endian tensor bytes (offsets relative to the end of the header). The header is parsed here
and every part is memory-mapped at its offset: the `safetensors` library's numpy loader copies
each tensor and cannot hold BF16 or FP8 data, and an auditor of a checkpoint of hundreds of
gigabytes needs the mapping. The index (model.safetensors.index.json) maps each tensor name to its
shard under "weight_map".

Indexing is tolerant where a file is readable: a tensor of a dtype this reader does not know is
kept with layout "unknown" and a note. A file that is not safetensors, is truncated (its header
describes more data than it holds), whose tensors overlap, share bytes, leave holes or leave bytes
after the last one (each refused by the safetensors library as well), or an index naming a shard
that does not exist, is a one-line ValueError naming the file.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precisionlab.interop.checkpoint import Checkpoint, PartRef
from precisionlab.interop.readers import layouts

DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("u1", 1),
    "F8_E4M3": ("u1", 1), "F8_E5M2": ("u1", 1), "F8_E4M3FNUZ": ("u1", 1), "F8_E5M2FNUZ": ("u1", 1),
    "F8_E8M0": ("u1", 1),
}
"""safetensors dtype -> (numpy dtype of the raw elements, bytes each). BF16 and FP8 are read as bits."""

MAX_HEADER = 256 * 2**20
CONFIG_NAMES = ("config.json", "quantize_config.json", "quant_config.json")
INDEX_SUFFIX = ".safetensors.index.json"


def read_header(path: Path) -> tuple[dict[str, Any], int, int]:
    """(header, start of the data section, file size); ValueError / OSError naming the file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ValueError(f"{path}: not a safetensors file ({size} bytes, shorter than the 8-byte header "
                                 "length)")
            (length,) = struct.unpack("<Q", head)
            if length == 0 or length > MAX_HEADER or 8 + length > size:
                raise ValueError(f"{path}: not a safetensors file, or truncated (header length {length} does not "
                                 f"fit its {size} bytes)")
            text = fh.read(length)
    except PermissionError:
        raise PermissionError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{path}: is a directory, not a file") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: corrupt safetensors header ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: corrupt safetensors header (not a JSON object)")
    return header, 8 + length, size


def index_file(path: Path) -> tuple[dict[str, PartRef], dict[str, str], list[str]]:
    """Every entry of one file as a PartRef, the file's __metadata__, and notes on entries skipped."""
    header, start, size = read_header(path)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        metadata = {}
    refs: dict[str, PartRef] = {}
    notes: list[str] = []
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if (not isinstance(info, dict) or not isinstance(info.get("shape"), list)
                or not all(isinstance(d, int) and d >= 0 for d in info["shape"])
                or not isinstance(info.get("data_offsets"), list) or len(info["data_offsets"]) != 2
                or not all(isinstance(o, int) and o >= 0 for o in info["data_offsets"])
                or not isinstance(info.get("dtype"), str)):
            raise ValueError(f"{path}: corrupt safetensors entry {name!r}")
        begin, end = info["data_offsets"]
        if end < begin:
            raise ValueError(f"{path}: corrupt safetensors entry {name!r} (offsets {begin} > {end})")
        spans.append((begin, end, name))
        shape = tuple(info["shape"])
        dtype = info["dtype"]
        raw, itemsize = DTYPES.get(dtype, ("u1", 0))
        if itemsize and end - begin != math.prod(shape) * itemsize:
            raise ValueError(f"{path}: tensor {name!r} holds {end - begin} bytes, its shape {list(shape)} of {dtype} "
                             f"needs {math.prod(shape) * itemsize}")
        if not itemsize:
            notes.append(f"{name}: dtype {dtype} is not one this reader knows; kept as raw bytes")
            shape = (end - begin,)
        refs[name] = PartRef(str(path), start + begin, end - begin, raw, shape, dtype)
    end_of_data = start + check_coverage(path, spans)
    if end_of_data > size:
        raise ValueError(f"{path}: truncated: its header describes {end_of_data} bytes, the file holds {size}")
    if end_of_data < size:
        raise ValueError(f"{path}: {size - end_of_data} bytes after the last tensor's data, which the header does not "
                         "describe (the safetensors library refuses a file its tensors do not cover exactly)")
    return refs, {str(k): str(v) for k, v in metadata.items()}, notes


def check_coverage(path: Path, spans: list[tuple[int, int, str]]) -> int:
    """The end of the data section: the tensors' byte ranges, sorted by (begin, end), must tile it from 0
    with no gap and no overlap, as the safetensors library requires (`Metadata::validate`: each range
    begins where the previous one ended, else "invalid offset for tensor"). Two tensors on the same
    bytes, overlapping ranges and holes between ranges are each a ValueError naming the tensor."""
    position = 0
    previous = ""
    for begin, end, name in sorted(spans):
        if begin < position:
            what = "the same bytes as" if (begin, end) == _span_of(spans, previous) else "bytes that overlap"
            raise ValueError(f"{path}: invalid offsets for tensor {name!r}: [{begin}, {end}) holds {what} {previous!r} "
                             f"(which ends at {position}); the safetensors library refuses such a file")
        if begin > position:
            after = f"after {previous!r}" if previous else "at the start of the data"
            raise ValueError(f"{path}: invalid offsets for tensor {name!r}: a hole of {begin - position} bytes {after} "
                             f"(it begins at {begin}, the data before ends at {position}); the safetensors library "
                             "refuses such a file")
        position, previous = end, name
    return position


def _span_of(spans: list[tuple[int, int, str]], name: str) -> tuple[int, int]:
    return next((b, e) for b, e, n in spans if n == name)


def load_configs(directory: Path, notes: list[str]) -> dict[str, Any]:
    """The quantization settings beside the checkpoint: config.json's quantization_config, or
    quantize_config.json (GPTQ) / quant_config.json (AutoAWQ), and the model's dimensions from config.json
    (`model_config`); {} when there is none."""
    found: dict[str, Any] = {}
    for name in CONFIG_NAMES:
        cfg_path = directory / name
        if not cfg_path.is_file():
            continue
        try:
            data = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            notes.append(f"{cfg_path}: unreadable ({exc.__class__.__name__}); its settings are ignored")
            continue
        if not isinstance(data, dict):
            notes.append(f"{cfg_path}: not a JSON object; ignored")
            continue
        if name == "config.json":
            qc = data.get("quantization_config")
            if isinstance(qc, dict):
                found.setdefault("quantization_config", qc)
                found["quantization_config_source"] = str(cfg_path)
            model = model_config(data)
            if model:
                found["model_config"] = model
        else:
            found.setdefault("quantization_config", data)
            found.setdefault("quantization_config_source", str(cfg_path))
    return found


MODEL_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size", "num_hidden_layers")
"""The model's dimensions kept from config.json (the convention checks compare tensor shapes with them)."""


def model_config(data: dict[str, Any]) -> dict[str, Any]:
    """MODEL_KEYS of an HF config.json (a multimodal config's text_config when it has one)."""
    nested = data.get("text_config")
    source: dict[str, Any] = nested if isinstance(nested, dict) else data
    return {k: source[k] for k in MODEL_KEYS if k in source and isinstance(source[k], (int, str))
            and not isinstance(source[k], bool)}


def read_files(path: Path, files: list[Path], index_map: dict[str, str] | None = None) -> Checkpoint:
    """Index the given safetensors files as one checkpoint."""
    notes: list[str] = []
    refs: dict[str, PartRef] = {}
    file_metadata: dict[str, dict[str, str]] = {}
    for f in files:
        file_refs, meta, file_notes = index_file(f)
        notes.extend(f"{f.name}: {n}" for n in file_notes)
        file_metadata[str(f)] = meta
        for name, ref in file_refs.items():
            if name in refs:
                notes.append(f"{name}: in both {Path(refs[name].file).name} and {f.name}; the first is kept")
                continue
            if index_map is not None and index_map.get(name) not in (None, f.name):
                notes.append(f"{name}: the index places it in {index_map[name]}, found in {f.name}")
            refs[name] = ref
    if index_map is not None:
        missing = sorted(set(index_map) - set(refs))
        if missing:
            notes.append(f"the index names {len(missing)} tensor(s) its shards do not hold, e.g. {missing[0]}")
    config = load_configs(path if path.is_dir() else path.parent, notes)
    metadata: dict[str, Any] = {"format": "safetensors", **config, "file_metadata": file_metadata}
    tensors = layouts.group(refs, config.get("quantization_config") or {}, notes)
    return Checkpoint(str(path), tensors, [str(f) for f in files], metadata, notes)


def read_index(index_path: Path) -> Checkpoint:
    """A sharded checkpoint through its index JSON; a shard it names that does not exist is an error."""
    try:
        data = json.loads(index_path.read_text(encoding="utf-8"))
    except PermissionError:
        raise PermissionError(f"{index_path}: permission denied") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{index_path}: corrupt index ({exc.__class__.__name__})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index_path}: not a safetensors index (no 'weight_map' of tensor name -> shard file)")
    shards: list[Path] = []
    for shard in dict.fromkeys(weight_map.values()):
        shard_path = index_path.parent / shard
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise ValueError(f"{index_path}: shard {shard!r} is outside the checkpoint directory")
        if not shard_path.is_file():
            raise ValueError(f"{index_path}: names shard {shard}, which does not exist")
        shards.append(shard_path)
    return read_files(index_path, shards, index_map={str(k): v for k, v in weight_map.items()})


def read_directory(directory: Path, gguf_reader: Callable[[Path], Checkpoint]) -> Checkpoint:
    """A directory: its index JSON, else its *.safetensors files, else its single .gguf file."""
    indexes = sorted(directory.glob("*" + INDEX_SUFFIX))
    if len(indexes) > 1:
        preferred = directory / ("model" + INDEX_SUFFIX)
        if not preferred.is_file():
            raise ValueError(f"{directory}: several index files ({', '.join(i.name for i in indexes)}); "
                             "give the one to read")
        indexes = [preferred]
    if indexes:
        return read_index(indexes[0])
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return read_files(directory, files)
    ggufs = sorted(directory.glob("*.gguf"))
    if len(ggufs) == 1:
        return gguf_reader(ggufs[0])
    if ggufs:
        raise ValueError(f"{directory}: several .gguf files ({', '.join(g.name for g in ggufs)}); give the one to read")
    raise ValueError(f"{directory}: no .safetensors, safetensors index or .gguf file in it")
