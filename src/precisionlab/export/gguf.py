"""Export the evaluated model as a GGUF file (llama.cpp, ollama, LM Studio).

Tensor names are llama.cpp's (gguf's TensorNameMap, as its converter maps them); Llama's q_proj / k_proj rows
are permuted as the converter permutes them (whole rows move, so a row's blocks move with it and no value
changes; transformers' GGUF loader permutes them back). Types:

    a quantized layer        its scheme's GGML type (quant.ggml_types), the layer's own codes
    1-D tensors, norms       F32 (the converter's rule)
    other float tensors      --float-dtype: auto (the narrowest of BF16 / F16 / F32 that holds the values
                             exactly; a GGUF source's tensor in its source type, a quantized one copied as
                             its source bytes when they decode to the evaluated values, as SmolLM2's Q8_0
                             embedding does), or f32 / f16 / bf16 (refused where it would change a value)

Metadata: a GGUF source's key-value pairs are copied (general.file_type set to the new file's type); a
Hugging Face directory gets what the converter writes for its architecture (interop.writers.gguf_meta).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.export.plan import Prepared
from precisionlab.interop.writers import gguf_meta
from precisionlab.interop.writers.gguf_file import GGUFTensor, Pair, copy_pairs, gguf_module, write_gguf
from precisionlab.interop.writers.gguf_tensors import quantized_rows
from precisionlab.quant.ggml_types import float_bytes, narrowest_float

FLOAT_CHOICES = {"auto": None, "f32": "F32", "fp32": "F32", "f16": "F16", "fp16": "F16", "bf16": "BF16"}
FILE_TYPES = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "BF16": "MOSTLY_BF16", "Q4_0": "MOSTLY_Q4_0",
              "Q4_1": "MOSTLY_Q4_1", "Q8_0": "MOSTLY_Q8_0", "Q5_0": "MOSTLY_Q5_0", "Q5_1": "MOSTLY_Q5_1",
              "Q4_K": "MOSTLY_Q4_K_S", "Q6_K": "MOSTLY_Q6_K"}


@dataclass
class TensorRecord:
    name: str
    """The name in the file."""
    source: str
    """The model parameter it holds."""
    kind: str
    shape: tuple[int, ...]
    nbytes: int
    predicted: int
    """Bytes the evaluation's accounting gives this tensor at this type (quantized: QuantizedTensor.nbytes)."""
    how: str
    """"quantized", "float" or "copied" (a GGUF source's tensor, its bytes as they were)."""


@dataclass
class GGUFPlan:
    arch: gguf_meta.Architecture
    tensors: list[GGUFTensor]
    records: list[TensorRecord]
    pairs: list[Pair]
    permuted: dict[str, int | None] = field(default_factory=dict)
    """Parameter name -> the head count its rows were permuted with (q_proj / k_proj of Llama)."""
    n_head: int = 0


def hparams(loaded: Any) -> dict[str, Any]:
    config = loaded.model.config
    return dict(config.to_dict())


def check_gguf(loaded: Any, float_dtype: str, tokenizer_pre: str | None = None) -> gguf_meta.Architecture:
    """ValueError (before any work) for an architecture with no GGUF mapping, a float choice that does not exist,
    or a Hugging Face tokenizer the converter's rules cannot write."""
    if float_dtype not in FLOAT_CHOICES:
        raise ValueError(f"--float-dtype {float_dtype!r}: choose auto, f32, f16 or bf16")
    gguf_module()
    hp = hparams(loaded)
    arch = gguf_meta.architecture(hp)
    gguf_meta.rope_theta(hp)
    if loaded.form != "gguf":
        if not loaded.directory:
            raise ValueError("GGUF export of a Hugging Face model needs its directory (tokenizer files)")
        folder = Path(loaded.directory)
        if (folder / "tokenizer.model").is_file() or not (folder / "tokenizer.json").is_file():
            raise ValueError(f"{folder}: GGUF export writes byte-level BPE tokenizers (tokenizer.json); this one is "
                             "SentencePiece or missing")
    return arch


def plan_gguf(prepared: Prepared, float_dtype: str = "auto", tokenizer_pre: str | None = None) -> GGUFPlan:
    """Every tensor and key-value pair of the file (see the module docstring)."""
    gguf = gguf_module()
    loaded = prepared.loaded
    hp = hparams(loaded)
    arch = gguf_meta.architecture(hp)
    n_layers = int(hp["num_hidden_layers"])
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.gguf.upper()), n_layers)
    n_head, n_kv = int(hp["num_attention_heads"]), hp.get("num_key_value_heads")
    state = prepared.state()
    source = _source_tensors(loaded)
    modules = dict(loaded.model.named_modules())
    tensors: list[GGUFTensor] = []
    records: list[TensorRecord] = []
    permuted: dict[str, int | None] = {}
    tie = bool(getattr(loaded.model.config, "tie_word_embeddings", False))
    for param, values in state.items():
        if tie and param == "lm_head.weight":
            continue
        target = names.get_name(param, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise ValueError(f"no GGUF name for the parameter {param} ({arch.gguf})")
        layer = param.rsplit(".", 1)[0]
        heads: int | None = None
        if arch.permute_qk and param.endswith(("q_proj.weight", "q_proj.bias")):
            heads = n_head
        elif arch.permute_qk and param.endswith(("k_proj.weight", "k_proj.bias")):
            heads = int(n_kv) if n_kv is not None else n_head
        if heads is not None:
            permuted[param] = heads
        q = prepared.quantized.get(layer) if param.endswith(".weight") else None
        if q is not None and isinstance(modules.get(layer), object):
            kind, rows = quantized_rows(q)
            if heads is not None:
                rows = gguf_meta.permute(rows, heads)
            tensors.append(GGUFTensor(target, np.ascontiguousarray(rows), kind))
            records.append(TensorRecord(target, param, kind, tuple(values.shape), int(rows.nbytes), int(q.nbytes),
                                        "quantized"))
            continue
        data = gguf_meta.permute(values, heads) if heads is not None else values
        tensor, record = _float_tensor(target, param, data, float_dtype, source.get(target))
        tensors.append(tensor)
        records.append(record)
    counts = Counter(r.kind for r in records if r.how == "quantized") or Counter(
        r.kind for r in records if len(r.shape) > 1)
    main = counts.most_common(1)[0][0] if counts else "F32"
    file_type = int(getattr(gguf.LlamaFileType, FILE_TYPES.get(main, "GUESSED")))
    pairs = _pairs(loaded, arch, hp, file_type, tokenizer_pre)
    return GGUFPlan(arch, tensors, records, pairs, permuted, n_head)


def _float_tensor(target: str, param: str, values: np.ndarray, choice: str,
                  source: Any) -> tuple[GGUFTensor, TensorRecord]:
    forced = FLOAT_CHOICES[choice]
    shape = tuple(values.shape)
    if values.ndim <= 1 or target.endswith("_norm.weight"):
        kind = "F32"
    elif forced is not None:
        kind = forced
    elif source is not None:
        copied = _copy_source(target, param, values, source)
        if copied is not None:
            return copied
        kind = narrowest_float(values)
    else:
        kind = narrowest_float(values)
    try:
        data = float_bytes(values, kind)
    except ValueError as exc:
        raise ValueError(f"--float-dtype {choice}: {param}: {exc}") from None
    return GGUFTensor(target, data, kind), TensorRecord(target, param, kind, shape, int(data.nbytes),
                                                        int(data.nbytes), "float")


def _copy_source(target: str, param: str, values: np.ndarray, source: Any) -> tuple[GGUFTensor, TensorRecord] | None:
    """A GGUF source's own tensor, when it decodes to exactly the evaluated values."""
    gguf = gguf_module()
    kind = source.tensor_type.name
    if kind in ("F32", "F16", "BF16"):
        return None  # the float path writes it in that type (narrowest exact)
    decoded = gguf.quants.dequantize(np.asarray(source.data), source.tensor_type).reshape(values.shape)
    if not np.array_equal(decoded.astype(np.float32).view(np.uint32), values.view(np.uint32)):
        return None
    data = np.ascontiguousarray(np.asarray(source.data))
    return GGUFTensor(target, data, kind), TensorRecord(target, param, kind, tuple(values.shape), int(data.nbytes),
                                                        int(data.nbytes), "copied")


def _source_tensors(loaded: Any) -> dict[str, Any]:
    if loaded.form != "gguf":
        return {}
    gguf = gguf_module()
    reader = gguf.GGUFReader(str(loaded.source))
    return {t.name: t for t in reader.tensors}


def _pairs(loaded: Any, arch: gguf_meta.Architecture, hp: dict[str, Any], file_type: int,
           tokenizer_pre: str | None) -> list[Pair]:
    gguf = gguf_module()
    if loaded.form == "gguf":
        reader = gguf.GGUFReader(str(loaded.source))
        pairs = copy_pairs(reader, skip=("general.file_type",))
        pairs.append(("general.file_type", file_type, gguf.GGUFValueType.UINT32, None))
        return pairs
    pairs = gguf_meta.model_pairs(arch, hp, loaded.name, file_type)
    pairs += gguf_meta.tokenizer_pairs(loaded.directory, int(hp["vocab_size"]), tokenizer_pre)
    return pairs


def write(plan: GGUFPlan, path: Path) -> Path:
    return write_gguf(path, plan.arch.gguf, plan.pairs, plan.tensors)
