"""GGUF metadata for a Hugging Face model, as llama.cpp's converter (convert_hf_to_gguf.py) writes it.

    ARCHITECTURES           transformers model_type -> GGUF architecture (llama, qwen2) and whether the
                            converter permutes q_proj / k_proj rows (Llama's rotary pairs: `permute`)
    model_pairs(arch, hf)   TextModel.set_gguf_parameters (+ LlamaModel's vocab size, rope dimension count)
    tokenizer_pairs(dir)    _set_vocab_gpt2: tokenizer.ggml.model "gpt2", the pre-tokenizer name (the
                            converter's hash of the tokens of its check text; `PRE_TOKENIZERS`), the token list
                            and types (CONTROL for special added tokens), then gguf.SpecialVocab's merges,
                            special token ids, add_bos / add_eos and chat template

Every pair goes through the gguf package's own GGUFWriter.add_* method, so each key has the type the
converter gives it. A byte-level BPE tokenizer (tokenizer.json, as SmolLM2, Llama 3 and Qwen2 have) is what
this writes; a SentencePiece one (tokenizer.model) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.interop.writers.gguf_file import OWN_KEYS, Pair, gguf_module


@dataclass(frozen=True)
class Architecture:
    gguf: str
    permute_qk: bool


ARCHITECTURES = {"llama": Architecture("llama", True), "qwen2": Architecture("qwen2", False)}

CHECK_TEXT = ("\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ "  # noqa: E501
              "🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "  # noqa: E501
              "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE "
              "you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL")
"""The converter's check text (get_vocab_base_pre): its token ids' hash names the pre-tokenizer."""

PRE_TOKENIZERS = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",
}
"""Pre-tokenizer hashes from llama.cpp's converter, for the tokenizers of the supported architectures."""


def architecture(hparams: dict[str, Any]) -> Architecture:
    """The GGUF architecture of a transformers config; ValueError naming the supported ones."""
    model_type = str(hparams.get("model_type", ""))
    if model_type not in ARCHITECTURES:
        raise ValueError(f"model type {model_type or '(none)'!r} has no GGUF mapping here; export --to gguf supports "
                         f"{', '.join(ARCHITECTURES)} (or use --to compressed-tensors)")
    return ARCHITECTURES[model_type]


def permute(rows: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """The converter's LlamaModel.permute along axis 0 (rows of a weight, or of its block bytes)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = rows.shape
    return rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def unpermute(rows: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """The inverse of `permute`."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = rows.shape
    return rows.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def _pairs(writer: Any) -> list[Pair]:
    return [(key, v.value, v.type, v.sub_type) for key, v in writer.kv_data[0].items() if key not in OWN_KEYS]


def rope_theta(hparams: dict[str, Any]) -> float | None:
    """rope_theta, from the config or (transformers 5) its rope_parameters; ValueError for rope scaling."""
    rope = hparams.get("rope_parameters") or hparams.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind not in (None, "default"):
        raise ValueError(f"rope scaling {kind!r} is not written here (GGUF export supports plain RoPE)")
    value = hparams.get("rope_theta")
    if value is None and isinstance(rope, dict):
        value = rope.get("rope_theta")
    return None if value is None else float(value)


def model_pairs(arch: Architecture, hparams: dict[str, Any], name: str, file_type: int) -> list[Pair]:
    """The model's hyperparameters (module docstring)."""
    gguf = gguf_module()
    w = gguf.GGUFWriter(None, arch.gguf)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_block_count(int(hparams["num_hidden_layers"]))
    if hparams.get("max_position_embeddings") is not None:
        w.add_context_length(int(hparams["max_position_embeddings"]))
    w.add_embedding_length(int(hparams["hidden_size"]))
    if hparams.get("intermediate_size") is not None:
        w.add_feed_forward_length(int(hparams["intermediate_size"]))
    n_head = int(hparams["num_attention_heads"])
    w.add_head_count(n_head)
    if hparams.get("num_key_value_heads") is not None:
        w.add_head_count_kv(int(hparams["num_key_value_heads"]))
    theta = rope_theta(hparams)
    if theta is not None:
        w.add_rope_freq_base(theta)
    if hparams.get("rms_norm_eps") is not None:
        w.add_layer_norm_rms_eps(float(hparams["rms_norm_eps"]))
    head_dim = hparams.get("head_dim")
    if head_dim is not None:
        w.add_key_length(int(head_dim))
        w.add_value_length(int(head_dim))
    w.add_file_type(int(file_type))
    if arch.gguf == "llama":
        w.add_vocab_size(int(hparams["vocab_size"]))
        w.add_rope_dimension_count(int(head_dim) if head_dim is not None else int(hparams["hidden_size"]) // n_head)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    return _pairs(w)


def pre_tokenizer(tokenizer: Any) -> str | None:
    """The converter's pre-tokenizer name for this tokenizer, or None when its hash is not in PRE_TOKENIZERS."""
    digest = sha256(str(tokenizer.encode(CHECK_TEXT)).encode()).hexdigest()
    return PRE_TOKENIZERS.get(digest)


def tokenizer_pairs(directory: str | Path, vocab_size: int, pre: str | None = None) -> list[Pair]:
    """The tokenizer of a Hugging Face directory as GGUF pairs (module docstring); `pre` overrides the detected
    pre-tokenizer name (ValueError when it is unknown and not given)."""
    gguf = gguf_module()
    from transformers import AutoTokenizer

    folder = Path(directory)
    if (folder / "tokenizer.model").is_file() or not (folder / "tokenizer.json").is_file():
        raise ValueError(f"{folder}: GGUF export writes byte-level BPE tokenizers (tokenizer.json); this one is "
                         "SentencePiece or missing")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    name = pre or pre_tokenizer(tokenizer)
    if name is None:
        raise ValueError("the tokenizer's pre-tokenizer is none llama.cpp's converter knows by its hash "
                         f"({', '.join(sorted(set(PRE_TOKENIZERS.values())))}); name it with --tokenizer-pre")
    vocab = tokenizer.get_vocab()
    if max(vocab.values()) >= vocab_size:
        raise ValueError(f"the tokenizer has ids beyond the model's vocab_size {vocab_size}")
    reverse = {i: t for t, i in vocab.items()}
    added = tokenizer.get_added_vocab()
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
            continue
        token = reverse[i]
        if token in added:
            special = tokenizer.added_tokens_decoder[i].special or _looks_special(token)
            if not special:
                token = token.replace("\u2581", " ")
            types.append(int(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED))
        else:
            types.append(int(gguf.TokenType.NORMAL))
        tokens.append(token)
    w = gguf.GGUFWriter(None, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(name)
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(w, quiet=True)
    return _pairs(w)


def _looks_special(token: str) -> bool:
    """The converter's does_token_look_special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<｜") and token.endswith("｜>"))
            or (token.startswith("<unused") and token.endswith(">")))
