"""Read a Hugging Face `config.json` into a ModelShape.

Understood: Llama-style decoders (llama, mistral, qwen2, ...), Mixtral-style MoE
(`num_local_experts`) and DeepSeek-V2/V3 (MLA `kv_lora_rank`, `n_routed_experts`).
Conventions the Transformers library uses when a field is absent:
  num_key_value_heads -> num_attention_heads (plain multi-head attention)
  head_dim            -> hidden_size / num_attention_heads (which must then divide exactly);
                         v_head_dim for MLA models, whose heads need not divide the hidden size
  tie_word_embeddings -> false (the Llama-family default), except for the model types in
                         TIED_BY_DEFAULT (Gemma 1-3), whose config classes default to true and
                         whose published config.json files omit the field
  sliding_window      -> caps every layer's cache, unless use_sliding_window is false or only some
                         layers slide (Gemma-2/3 hybrids): then the full cache is counted
A missing required field, a value of the wrong type, a zero head count or a head size
that does not divide the hidden size is a ValueError naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from precisionlab.capacity.models import ModelShape, finding_key
from precisionlab.json_input import json_object

TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
"""model_type values whose Transformers config class defaults tie_word_embeddings to true."""

REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
            "max_position_embeddings")


def read_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in a config file; a malformed file is a one-line ValueError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(2, "No such file or directory", str(path)) from None  # `error: no such file: PATH`
    except OSError as exc:
        raise OSError(f"cannot read model config {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"malformed config.json {path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json_object(text)
    except ValueError as exc:
        raise ValueError(f"malformed config.json {path}: {exc}") from None
    if "num_hidden_layers" not in data and isinstance(data.get("text_config"), dict):
        data = {**data["text_config"], "_name_or_path": data.get("_name_or_path", "")}
    return data


def model_from_config(data: dict[str, Any], name: str, where: str = "config") -> ModelShape:
    """Build a ModelShape from config.json fields (conventions in the module docstring)."""
    missing = [field for field in REQUIRED if data.get(field) is None]
    if missing:
        raise ValueError(f"{where} lacks required field(s): {', '.join(missing)}")

    def integer(field: str, default: int | None = None, positive: bool = True) -> int:
        value = data.get(field)
        if value is None:
            if default is None:
                raise ValueError(f"{where} lacks required field: {field}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: {field} must be an integer, got {value!r}")
        if value < 0 or (positive and value == 0):
            raise ValueError(f"{where}: {field} must be {'positive' if positive else 'non-negative'}, got {value}")
        return value

    layers = integer("num_hidden_layers")
    hidden = integer("hidden_size")
    heads = integer("num_attention_heads")
    kv_heads = integer("num_key_value_heads", default=heads)
    if "head_dim" in data and data["head_dim"] is not None:
        head_dim = integer("head_dim")
    elif data.get("kv_lora_rank"):
        head_dim = integer("v_head_dim")  # MLA: heads need not divide the hidden size
    elif hidden % heads:
        raise ValueError(f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                         "and the file gives no head_dim")
    else:
        head_dim = hidden // heads
    if heads % kv_heads:
        raise ValueError(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")

    window = data.get("sliding_window")
    if data.get("use_sliding_window") is False or _hybrid_attention(data):
        window = None
    if window is not None:
        window = integer("sliding_window")

    experts = 0
    for field in ("n_routed_experts", "num_local_experts", "num_experts"):
        if data.get(field) is not None:
            experts = integer(field, positive=False)
            break
    moe: dict[str, int] = {}
    if experts:
        moe = {
            "routed_experts": experts,
            "experts_per_token": integer("num_experts_per_tok"),
            "shared_experts": integer("n_shared_experts", default=0, positive=False),
            "moe_intermediate": integer("moe_intermediate_size", default=integer("intermediate_size")),
            "first_dense_layers": integer("first_k_dense_replace", default=0, positive=False),
        }
    mla: dict[str, int] = {}
    if data.get("kv_lora_rank"):
        mla = {
            "kv_lora_rank": integer("kv_lora_rank"),
            "q_lora_rank": integer("q_lora_rank", default=0, positive=False),
            "qk_rope_head_dim": integer("qk_rope_head_dim"),
            "qk_nope_head_dim": integer("qk_nope_head_dim"),
            "v_head_dim": integer("v_head_dim"),
        }
    bias = data.get("attention_bias", data.get("model_type") == "qwen2")
    return ModelShape(
        key=finding_key(name),
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=integer("intermediate_size"),
        vocab=integer("vocab_size"),
        max_context=integer("max_position_embeddings"),
        sliding_window=window,
        tie_embeddings=bool(data.get("tie_word_embeddings", data.get("model_type") in TIED_BY_DEFAULT)),
        qkv_bias=bool(bias),
        source=where,
        **moe,
        **mla,
    )


def _hybrid_attention(data: dict[str, Any]) -> bool:
    """True when only some layers slide (Gemma-2/3 style: `layer_types` with full-attention layers, a
    `sliding_window_pattern`, or the hybrid cache). One window cannot describe such a model, so the
    window is ignored and every layer's cache counted in full: an over-estimate, the safe side."""
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list) and "full_attention" in layer_types:
        return True
    return data.get("sliding_window_pattern") is not None or data.get("cache_implementation") == "hybrid"


def load_config(path: str | Path, name: str | None = None) -> ModelShape:
    """A ModelShape from a config.json file. The name defaults to `_name_or_path`'s last part,
    else the folder holding a file called config.json, else the file's stem."""
    path = Path(path)
    data = read_config(path)
    if name is None:
        hub_name = str(data.get("_name_or_path") or "").rstrip("/").split("/")[-1]
        if hub_name:
            name = hub_name
        elif path.name == "config.json" and path.resolve().parent.name:
            name = path.resolve().parent.name
        else:
            name = path.stem
    return model_from_config(data, name, where=str(path))


__all__ = ["REQUIRED", "TIED_BY_DEFAULT", "load_config", "model_from_config", "read_config"]
