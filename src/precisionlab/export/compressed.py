"""Export the evaluated model as a compressed-tensors directory (vLLM, SGLang, transformers).

    config.json          the model's config with `quantization_config` (compressed-tensors' QuantizationConfig,
                         status "compressed": one config group per scheme; a single scheme targets "Linear"
                         and lists every other Linear under "ignore", as llm-compressor writes it)
    model.safetensors    each quantized Linear as its compressor writes it (weight_packed / weight_scale /
                         weight_zero_point / weight_shape, or an fp8 weight and its scale), every other tensor
                         as itself (tied tensors once) at --float-dtype
    tokenizer files, generation_config.json

Only Linear layers are quantized in this format (transformers' loader replaces Linear modules); a quantized
embedding, or a quantized lm_head tied to the embedding, is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.export.gguf import FLOAT_CHOICES
from precisionlab.export.plan import Prepared
from precisionlab.interop.writers import compressed as ct
from precisionlab.quant.ggml_types import narrowest_float

TORCH_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
WEIGHTS = "model.safetensors"


@dataclass
class CTRecord:
    name: str
    """The tensor's name in model.safetensors."""
    layer: str
    kind: str
    """The safetensors dtype."""
    shape: tuple[int, ...]
    nbytes: int
    how: str
    """"quantized" (a compressor's tensor) or "float"."""


@dataclass
class CTPlan:
    tensors: dict[str, Any]
    """name -> torch tensor, as written."""
    records: list[CTRecord]
    config: dict[str, Any]
    predicted: dict[str, int] = field(default_factory=dict)
    """Quantized layer -> the bytes the evaluation counted (QuantizedTensor.nbytes)."""
    notes: list[str] = field(default_factory=list)


def check_compressed(prepared_layers: dict[str, Any], model: Any) -> None:
    """ValueError for a quantized layer compressed-tensors cannot hold as a Linear."""
    import torch

    modules = dict(model.named_modules())
    tied = {id(m.weight) for n, m in modules.items() if isinstance(m, torch.nn.Embedding)}
    for name in prepared_layers:
        module = modules[name]
        if not isinstance(module, torch.nn.Linear):
            raise ValueError(f"{name} is a {type(module).__name__}; compressed-tensors quantizes Linear layers "
                             "(exclude it, e.g. --exclude '*embed*')")
        if id(module.weight) in tied:
            raise ValueError(f"{name} is tied to the token embedding; compressed-tensors quantizes Linear layers "
                             "only (exclude it, or untie the model)")


def plan_compressed(prepared: Prepared, float_dtype: str = "auto") -> CTPlan:
    """Every tensor of model.safetensors and the config (see the module docstring)."""
    import torch

    if float_dtype not in FLOAT_CHOICES:
        raise ValueError(f"--float-dtype {float_dtype!r}: choose auto, f32, f16 or bf16")
    model = prepared.loaded.model
    check_compressed(prepared.quantized, model)
    state = prepared.state()
    tensors: dict[str, Any] = {}
    records: list[CTRecord] = []
    groups: dict[str, tuple[dict[str, Any], str, list[str]]] = {}
    predicted: dict[str, int] = {}
    for layer, q in prepared.quantized.items():
        local, fmt, fields = ct.compress(q)
        key = json.dumps([fields, fmt], sort_keys=True)
        groups.setdefault(key, (fields, fmt, []))[2].append(layer)
        predicted[layer] = int(q.nbytes)
        for suffix, tensor in local.items():
            name = f"{layer}.{suffix}"
            tensors[name] = tensor.contiguous()
            records.append(CTRecord(name, layer, str(tensor.dtype).replace("torch.", ""), tuple(tensor.shape),
                                    int(tensor.numel() * tensor.element_size()), "quantized"))
    quantized_weights = {f"{layer}.weight" for layer in prepared.quantized}
    tie = bool(getattr(model.config, "tie_word_embeddings", False))
    forced = FLOAT_CHOICES[float_dtype]
    for param, values in state.items():
        if param in quantized_weights or (tie and param == "lm_head.weight"):
            continue
        kind = forced or (narrowest_float(values) if values.ndim > 1 else "F32")
        tensor = torch.from_numpy(values.copy()).to(getattr(torch, TORCH_DTYPES[kind]))
        if not torch.equal(tensor.float(), torch.from_numpy(values)):
            raise ValueError(f"--float-dtype {float_dtype}: {param}: {kind} would change values of this tensor (the "
                             "evaluation used its float32 values)")
        tensors[param] = tensor
        records.append(CTRecord(param, param.rsplit(".", 1)[0], TORCH_DTYPES[kind], tuple(values.shape),
                                int(tensor.numel() * tensor.element_size()), "float"))
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if len(groups) == 1:
        fields, fmt, _ = next(iter(groups.values()))
        config_groups = [(fields, fmt, ["Linear"])]
        ignore = [n for n in linears if n not in prepared.quantized]
    else:
        config_groups = list(groups.values())
        ignore = []
    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]  # as save_pretrained writes it (a GGUF-sourced config has none)
    config.pop("quantization_config", None)
    config["quantization_config"] = ct.quantization_config(config_groups, ignore)
    notes = ["scales are stored as float32 (their fp16 / bf16 values exactly): compressed-tensors dequantizes in the "
             "scale's dtype, and q * s rounded to fp16 is not what was evaluated"]
    return CTPlan(tensors, records, config, predicted, notes)


def write(plan: CTPlan, prepared: Prepared, folder: Path) -> Path:
    """Write the directory's files into `folder` (a staging folder the caller moves into place)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(plan.tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(plan.config, indent=2, sort_keys=True, default=_jsonable) + "\n",
                                        encoding="utf-8")
    model = prepared.loaded.model
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(str(folder))
    prepared.loaded.tokenizer.save_pretrained(str(folder))
    return folder


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return str(value)
