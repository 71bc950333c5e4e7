"""Transformer shapes: the handful of numbers that fix a decoder's weight and KV-cache bytes.

A `ModelShape` holds only defining fields (layers, widths, heads, vocabulary, MoE and
MLA settings); parameter counts and cache widths are computed from them. Presets are
the models' published Hugging Face `config.json` values, named in a comment each.

Parameter count rule (every preset uses a gated SwiGLU MLP and RMSNorm):
  embedding  = vocab · hidden            lm_head = vocab · hidden (0 when tied)
  attention  = hidden·(H·d) + 2·hidden·(Hkv·d) + (H·d)·hidden        (GQA; MLA below)
  dense MLP  = 3 · hidden · intermediate
  MoE layer  = (experts + shared) · 3 · hidden · moe_intermediate + router experts·hidden
  small      = norms (2·hidden per layer + hidden) and q/k/v biases
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by role. `active_routed` counts the experts one token uses."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    routed_experts: int
    active_routed: int
    shared_experts: int
    router: int
    small: int
    tied: bool = False

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.routed_experts
                + self.shared_experts + self.router + self.small)

    @property
    def active(self) -> int:
        """Parameters one token touches: total with only the routed experts it is sent to."""
        return self.total - self.routed_experts + self.active_routed

    @property
    def linear(self) -> int:
        """Block linear weights (attention, MLP, experts): the part a weight format quantizes."""
        return self.attention + self.dense_mlp + self.routed_experts + self.shared_experts

    @property
    def kept_16bit(self) -> int:
        """Embedding, lm_head, router, norms and biases: kept in bf16 by every weight scheme here."""
        return self.total - self.linear

    @property
    def matmul_active(self) -> int:
        """Parameters a decode token multiplies by (2 FLOPs each): active, less the embedding lookup."""
        return self.active - (0 if self.tied else self.embedding)


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape. MoE when `routed_experts` > 0, MLA when `kv_lora_rank` > 0."""

    key: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_context: int
    sliding_window: int | None = None
    tie_embeddings: bool = False
    qkv_bias: bool = False
    routed_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate: int = 0
    first_dense_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_context"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model {self.name!r}: {name} must be a positive integer, got {value!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or value < 0):
                raise ValueError(f"model {self.name!r}: {f.name} must be a non-negative integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"model {self.name!r}: {self.heads} attention heads are not a multiple of "
                             f"{self.kv_heads} KV heads")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"model {self.name!r}: sliding_window must be positive, got {self.sliding_window}")
        if self.is_moe and not 0 < self.experts_per_token <= self.routed_experts:
            raise ValueError(f"model {self.name!r}: experts_per_token must be in 1..{self.routed_experts}, "
                             f"got {self.experts_per_token}")
        if self.is_moe and self.moe_intermediate <= 0:
            raise ValueError(f"model {self.name!r}: an MoE model needs a positive moe_intermediate size")
        if self.first_dense_layers > self.layers:
            raise ValueError(f"model {self.name!r}: first_dense_layers {self.first_dense_layers} > layers")
        if self.is_mla and min(self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim) <= 0:
            raise ValueError(f"model {self.name!r}: an MLA model needs positive qk_rope, qk_nope and v head dims")

    @property
    def is_moe(self) -> bool:
        return self.routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.is_moe else 0

    def cache_vectors(self) -> list[tuple[int, int]]:
        """What one token stores per layer, as (count, length) vectors (the unit a KV scale group spans).

        GQA: K and V for each KV head -> (2·Hkv, d). MLA: the compressed latent and the shared
        RoPE key -> (1, kv_lora_rank) and (1, qk_rope_head_dim) (DeepSeek-V2/V3 cache these only).
        """
        if self.is_mla:
            return [(1, self.kv_lora_rank), (1, self.qk_rope_head_dim)]
        return [(2 * self.kv_heads, self.head_dim)]

    @property
    def kv_values_per_token_per_layer(self) -> int:
        return sum(count * length for count, length in self.cache_vectors())

    def cached_tokens(self, context: int) -> int:
        """Tokens the cache holds at a context length: capped by a sliding window."""
        return context if self.sliding_window is None else min(context, self.sliding_window)

    def attention_flops_per_token(self, context: int) -> int:
        """Score and value FLOPs of one new token attending to `context` cached tokens, all layers.

        GQA: 2·H·d·L for Q·K^T plus 2·H·d·L for P·V. MLA with absorbed projections: scores span
        kv_lora + rope dims, values span kv_lora, per head.
        """
        tokens = self.cached_tokens(context)
        if self.is_mla:
            per_layer = 2 * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim) * tokens
        else:
            per_layer = 4 * self.heads * self.head_dim * tokens
        return self.layers * per_layer

    def params(self) -> ParamCounts:
        """Parameter counts by role (rule in the module docstring)."""
        h = self.hidden
        if self.is_mla:
            q_dim = self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            q = h * self.q_lora_rank + self.q_lora_rank * q_dim if self.q_lora_rank else h * q_dim
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            attention = q + kv + self.heads * self.v_head_dim * h
            attn_small = self.q_lora_rank + self.kv_lora_rank
        else:
            attention = 2 * h * self.heads * self.head_dim + 2 * h * self.kv_heads * self.head_dim
            attn_small = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        expert = 3 * h * self.moe_intermediate
        dense_layers = self.layers - self.moe_layers
        return ParamCounts(
            embedding=self.vocab * h,
            lm_head=0 if self.tie_embeddings else self.vocab * h,
            attention=self.layers * attention,
            dense_mlp=dense_layers * 3 * h * self.intermediate,
            routed_experts=self.moe_layers * self.routed_experts * expert,
            active_routed=self.moe_layers * self.experts_per_token * expert,
            shared_experts=self.moe_layers * self.shared_experts * expert,
            router=self.moe_layers * self.routed_experts * h,
            small=self.layers * (2 * h + attn_small) + h,
            tied=self.tie_embeddings,
        )


# Presets: the published config.json of each model on the Hugging Face Hub.
PRESETS: dict[str, ModelShape] = {
    # meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336, 32 layers,
    # 32 heads, 8 KV heads, vocab 128256, max_position_embeddings 8192, untied embeddings.
    "llama3_8b": ModelShape("llama3_8b", "Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                            intermediate=14336, vocab=128256, max_context=8192,
                            source="meta-llama/Meta-Llama-3-8B config.json"),
    # meta-llama/Meta-Llama-3-70B config.json: hidden_size 8192, intermediate_size 28672, 80 layers,
    # 64 heads, 8 KV heads, vocab 128256, max_position_embeddings 8192.
    "llama3_70b": ModelShape("llama3_70b", "Llama-3-70B", layers=80, hidden=8192, heads=64, kv_heads=8,
                             head_dim=128, intermediate=28672, vocab=128256, max_context=8192,
                             source="meta-llama/Meta-Llama-3-70B config.json"),
    # meta-llama/Llama-2-13b-hf config.json: hidden_size 5120, intermediate_size 13824, 40 layers,
    # 40 heads, 40 KV heads (no GQA), vocab 32000, max_position_embeddings 4096.
    "llama2_13b": ModelShape("llama2_13b", "Llama-2-13B", layers=40, hidden=5120, heads=40, kv_heads=40,
                             head_dim=128, intermediate=13824, vocab=32000, max_context=4096,
                             source="meta-llama/Llama-2-13b-hf config.json"),
    # mistralai/Mistral-7B-v0.1 config.json: hidden_size 4096, intermediate_size 14336, 32 layers, 32 heads,
    # 8 KV heads, vocab 32000, max_position_embeddings 32768, sliding_window 4096.
    "mistral_7b": ModelShape("mistral_7b", "Mistral-7B-v0.1", layers=32, hidden=4096, heads=32, kv_heads=8,
                             head_dim=128, intermediate=14336, vocab=32000, max_context=32768, sliding_window=4096,
                             source="mistralai/Mistral-7B-v0.1 config.json"),
    # Qwen/Qwen2.5-7B config.json: hidden_size 3584, intermediate_size 18944, 28 layers, 28 heads, 4 KV heads,
    # vocab 152064, max_position_embeddings 131072, use_sliding_window false, q/k/v biases, untied.
    "qwen2_5_7b": ModelShape("qwen2_5_7b", "Qwen2.5-7B", layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128,
                             intermediate=18944, vocab=152064, max_context=131072, qkv_bias=True,
                             source="Qwen/Qwen2.5-7B config.json"),
    # deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168, intermediate_size 18432 (dense layers),
    # moe_intermediate_size 2048, 61 layers, first_k_dense_replace 3, 128 heads, n_routed_experts 256,
    # num_experts_per_tok 8, n_shared_experts 1, kv_lora_rank 512, q_lora_rank 1536, qk_rope_head_dim 64,
    # qk_nope_head_dim 128, v_head_dim 128, vocab 129280, max_position_embeddings 163840.
    # The multi-token-prediction module (num_nextn_predict_layers 1) is not counted: 671B main model.
    "deepseek_v3": ModelShape("deepseek_v3", "DeepSeek-V3", layers=61, hidden=7168, heads=128, kv_heads=128,
                              head_dim=128, intermediate=18432, vocab=129280, max_context=163840,
                              routed_experts=256, experts_per_token=8, shared_experts=1, moe_intermediate=2048,
                              first_dense_layers=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                              qk_nope_head_dim=128, v_head_dim=128,
                              source="deepseek-ai/DeepSeek-V3 config.json"),
}

_ALIASES = {
    "llama-3-8b": "llama3_8b", "llama3-8b": "llama3_8b", "meta-llama-3-8b": "llama3_8b",
    "llama-3-70b": "llama3_70b", "llama3-70b": "llama3_70b", "meta-llama-3-70b": "llama3_70b",
    "llama-2-13b": "llama2_13b", "llama2-13b": "llama2_13b", "mistral-7b": "mistral_7b", "mistral": "mistral_7b",
    "qwen2.5-7b": "qwen2_5_7b", "qwen-2.5-7b": "qwen2_5_7b", "deepseek-v3": "deepseek_v3", "dsv3": "deepseek_v3",
}


def preset_keys() -> list[str]:
    return list(PRESETS)


def get_model(name: str) -> ModelShape:
    """A preset by key (llama3_8b, llama3_70b, llama2_13b, mistral_7b, qwen2_5_7b, deepseek_v3) or alias."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, [*PRESETS, *_ALIASES], n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown model {name!r}{hint} (presets: {', '.join(PRESETS)})")


def finding_key(name: str) -> str:
    """A name made safe for a dotted findings key: lower case, runs of other characters -> '_'."""
    out = "".join(c if c.isalnum() else "_" for c in name.lower())
    while "__" in out:
        out = out.replace("__", "_")
    out = out.strip("_")
    if not out:
        raise ValueError(f"model name {name!r} has no letters or digits to name it by")
    return out


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def context_label(tokens: int) -> str:
    """A context length as it is usually written: 4096 -> '4k', 131072 -> '128k', 1000 -> '1000'."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


__all__ = ["PRESETS", "ModelShape", "ParamCounts", "ceil_div", "context_label", "finding_key", "get_model",
           "preset_keys"]
