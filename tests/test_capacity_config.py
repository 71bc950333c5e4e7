"""config.json loading: real configs reproduce the presets; bad files give one-line errors naming the problem."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from precisionlab.capacity import get_model, kv_bytes_per_token, load_config, model_from_config

# meta-llama/Meta-Llama-3-8B config.json as published (all fields).
LLAMA3_8B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}

# deepseek-ai/DeepSeek-V3 config.json, the fields that shape the model.
DEEPSEEK_V3_CONFIG: dict[str, Any] = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
}

# Qwen/Qwen2.5-7B config.json: sliding_window is set but switched off.
QWEN_CONFIG: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "sliding_window": 131072, "use_sliding_window": False, "max_window_layers": 28, "tie_word_embeddings": False,
}


# meta-llama/Meta-Llama-3-70B, meta-llama/Llama-2-13b-hf and mistralai/Mistral-7B-v0.1 config.json, shape fields.
LLAMA3_70B_CONFIG: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
LLAMA2_13B_CONFIG: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
    "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 32000, "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
MISTRAL_7B_CONFIG: dict[str, Any] = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "tie_word_embeddings": False,
}


def write(tmp_path: Path, data: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def same_shape(a: object, b: object) -> bool:
    skip = {"key", "name", "source"}
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a) if f.name not in skip)  # type: ignore[arg-type]


@pytest.mark.parametrize(("config", "preset"), [
    (LLAMA3_8B_CONFIG, "llama3_8b"), (DEEPSEEK_V3_CONFIG, "deepseek_v3"), (QWEN_CONFIG, "qwen2_5_7b"),
    (LLAMA3_70B_CONFIG, "llama3_70b"), (LLAMA2_13B_CONFIG, "llama2_13b"), (MISTRAL_7B_CONFIG, "mistral_7b"),
])
def test_published_configs_reproduce_presets(tmp_path: Path, config: dict[str, Any], preset: str) -> None:
    model = load_config(write(tmp_path, config), name="x")
    assert same_shape(model, get_model(preset))
    assert model.params().total == get_model(preset).params().total


def test_name_from_folder_and_hub_path(tmp_path: Path) -> None:
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    model = load_config(write(folder, LLAMA3_8B_CONFIG))
    assert model.key == "meta_llama_3_8b"
    assert kv_bytes_per_token(model, "fp16") == 131072
    named = load_config(write(tmp_path, {**LLAMA3_8B_CONFIG, "_name_or_path": "org/My.Model-v2"}, "c.json"))
    assert named.key == "my_model_v2"


def test_defaults_when_optional_fields_are_absent() -> None:
    data = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k not in ("num_key_value_heads", "tie_word_embeddings")}
    model = model_from_config(data, "mha")
    assert model.kv_heads == model.heads == 32  # no num_key_value_heads: plain multi-head attention
    assert model.head_dim == 4096 // 32


def test_mistral_sliding_window_read() -> None:
    data = {**LLAMA3_8B_CONFIG, "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096}
    assert model_from_config(data, "m").sliding_window == 4096


def test_missing_fields_are_all_named(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k not in ("hidden_size", "vocab_size")}
    with pytest.raises(ValueError, match=r"lacks required field\(s\): hidden_size, vocab_size"):
        load_config(write(tmp_path, data))


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,')
    with pytest.raises(ValueError, match=r"malformed config\.json .*line 1"):
        load_config(path)
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_config(write(tmp_path, [1, 2]))


@pytest.mark.parametrize(("change", "message"), [
    ({"num_attention_heads": 0}, "num_attention_heads must be positive"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be positive"),
    ({"num_attention_heads": 30}, "hidden_size 4096 is not divisible by num_attention_heads 30"),
    ({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers must be an integer"),
    ({"num_hidden_layers": 32.5}, "num_hidden_layers must be an integer"),
    ({"sliding_window": -1}, "sliding_window must be positive"),
])
def test_impossible_shapes(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_from_config({**LLAMA3_8B_CONFIG, **change}, "bad")


def test_explicit_head_dim_need_not_divide() -> None:
    # Gemma-style: head_dim given, heads x head_dim != hidden size, and that is allowed
    model = model_from_config({**LLAMA3_8B_CONFIG, "num_attention_heads": 24, "head_dim": 256,
                               "num_key_value_heads": 8}, "g")
    assert model.head_dim == 256


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:  # the command line prints it as `no such file: PATH`
        load_config(tmp_path / "nope.json")
    assert caught.value.filename == str(tmp_path / "nope.json")


def test_mixtral_style_moe_against_published_totals() -> None:
    # mistralai/Mixtral-8x7B-v0.1 config.json; Mistral AI: 46.7B total, 12.9B active per token
    data = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
            "max_position_embeddings": 32768, "sliding_window": None, "num_local_experts": 8,
            "num_experts_per_tok": 2, "tie_word_embeddings": False}
    p = model_from_config(data, "mixtral").params()
    assert p.total / 1e9 == pytest.approx(46.7, abs=0.05)
    assert p.active / 1e9 == pytest.approx(12.9, abs=0.05)


def test_binary_file_is_a_one_line_malformed_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match=r"malformed config\.json .*not UTF-8"):
        load_config(path)


@pytest.mark.parametrize("hybrid", [
    {"layer_types": ["sliding_attention", "full_attention"] * 16},
    {"sliding_window_pattern": 6},
    {"cache_implementation": "hybrid"},
])
def test_hybrid_sliding_window_is_not_applied_to_every_layer(hybrid: dict[str, Any]) -> None:
    # Gemma-2/3 style: only some layers slide; one window for all layers would under-count the cache
    data = {**LLAMA3_8B_CONFIG, "sliding_window": 4096, **hybrid}
    model = model_from_config(data, "hybrid")
    assert model.sliding_window is None
    assert kv_bytes_per_token(model, "fp16") == 131072


# google/gemma-2-9b config.json (the shape fields; like every Gemma config it has no tie_word_embeddings: the
# Gemma config classes default it to true, and the checkpoint has no separate lm_head)
GEMMA2_9B_CONFIG: dict[str, Any] = {
    "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192, "sliding_window": 4096, "cache_implementation": "hybrid",
}


def test_gemma_ties_embeddings_when_the_field_is_absent() -> None:
    model = model_from_config(GEMMA2_9B_CONFIG, "gemma-2-9b")
    p = model.params()
    assert model.tie_embeddings and p.lm_head == 0
    # by hand: per layer attention 2·3584·16·256 + 2·3584·8·256 = 44,040,192, MLP 3·3584·14336 = 154,140,672,
    # norms 2·3584; × 42 layers, + embedding 256000·3584 = 917,504,000, + final norm 3584
    assert p.total == 42 * (44_040_192 + 154_140_672 + 2 * 3584) + 917_504_000 + 3584 == 9_241_404_928
    # the published 9.24B (9,241,705,984: Gemma-2 has two more norms per layer, 42 · 2 · 3584 = 301,056)
    assert p.total + 42 * 2 * 3584 == 9_241_705_984
    # an explicit field still wins, and Llama-family types keep their untied default
    assert not model_from_config({**GEMMA2_9B_CONFIG, "tie_word_embeddings": False}, "g").tie_embeddings
    assert not model_from_config({**GEMMA2_9B_CONFIG, "model_type": "llama"}, "l").tie_embeddings
