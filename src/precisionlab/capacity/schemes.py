"""Storage schemes for weights and the KV cache, with their scale bytes counted.

A scheme stores values in a registered format (its width comes from
`precisionlab.get_format(...).bits`) plus, per group of `group` consecutive values, one
scale and optionally one zero point in a stated format. Bits per value:

    bits = value_bits + (scale_bits + zero_bits) / group

Assumptions (the usual published choices):
  KV fp16/bf16  : no scales.
  KV fp8        : e4m3 with one fp32 scale per layer for K and one for V (vLLM's per-tensor
                  k_scale / v_scale): a fixed 8 bytes per layer, nothing per token.
  KV int8       : symmetric, groups of 64 values along the head dimension, fp16 scale.
  KV int4       : asymmetric, groups of 64, fp16 scale + fp16 zero point.
  KV kivi2      : 2-bit asymmetric KIVI (arXiv:2402.02750): keys per channel over 32-token groups,
                  values per token in 32-value groups, fp16 scale + zero each; the most recent 128
                  tokens stay in fp16 (KIVI's residual window). Both amortise to 32 bits per 32 values.
  weights bf16  : no scales.       fp8 : e4m3, 128x128 blocks, fp32 scale (DeepSeek-V3's recipe).
  weights int8  : symmetric, groups of 128 input channels, fp16 scale.
  weights int4  : asymmetric, groups of 128, fp16 scale + fp16 zero (GPTQ/AWQ's g128).
Weight scales are amortised (params / group); KV groups are counted per cached vector,
rounding up, so a head size that the group does not divide pays for the partial group.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionlab.capacity.models import ModelShape, ceil_div
from precisionlab.formats import get_format


@dataclass(frozen=True)
class Scheme:
    """Values in `value_format`; one `scale_format` scale (and zero point if `zero_point`) per `group` values.

    group 0 means no per-group scale. `recent_window` (KV only): newest tokens kept in fp16.
    `fixed_scale_bytes_per_layer` (KV only): per-tensor scales, independent of tokens.
    """

    name: str
    value_format: str
    group: int = 0
    scale_format: str = "fp16"
    zero_point: bool = False
    recent_window: int = 0
    fixed_scale_bytes_per_layer: int = 0
    note: str = ""

    @property
    def value_bits(self) -> int:
        return get_format(self.value_format).bits

    @property
    def group_overhead_bits(self) -> int:
        """Scale (and zero point) bits paid once per group."""
        if not self.group:
            return 0
        return get_format(self.scale_format).bits * (2 if self.zero_point else 1)

    @property
    def bits_per_value(self) -> float:
        """value bits + group overhead / group (amortised)."""
        return self.value_bits + (self.group_overhead_bits / self.group if self.group else 0.0)

    def vector_bits(self, length: int) -> int:
        """Bits to store one vector of `length` values, partial groups paid in full."""
        groups = ceil_div(length, self.group) if self.group else 0
        return length * self.value_bits + groups * self.group_overhead_bits


def _fixed_fp8_scales() -> int:
    return 2 * get_format("fp32").bits // 8


KV_SCHEMES: dict[str, Scheme] = {
    "fp16": Scheme("fp16", "fp16", note="16-bit, no scales (bf16 has the same bytes)"),
    "bf16": Scheme("bf16", "bf16", note="16-bit, no scales"),
    "fp8": Scheme("fp8", "e4m3", fixed_scale_bytes_per_layer=_fixed_fp8_scales(),
                  note="e4m3, per-tensor fp32 scale for K and for V in each layer"),
    "int8": Scheme("int8", "int8", group=64, note="symmetric, g64 along head dim, fp16 scale"),
    "int4": Scheme("int4", "int4", group=64, zero_point=True, note="asymmetric, g64, fp16 scale + zero"),
    "kivi2": Scheme("kivi2", "int2", group=32, zero_point=True, recent_window=128,
                    note="2-bit KIVI: g32 fp16 scale + zero; newest 128 tokens in fp16"),
}

WEIGHT_SCHEMES: dict[str, Scheme] = {
    "bf16": Scheme("bf16", "bf16", note="16-bit, no scales"),
    "fp16": Scheme("fp16", "fp16", note="16-bit, no scales"),
    "fp8": Scheme("fp8", "e4m3", group=128 * 128, scale_format="fp32",
                  note="e4m3, 128x128 blocks, fp32 scale"),
    "int8": Scheme("int8", "int8", group=128, note="symmetric, g128, fp16 scale"),
    "int4": Scheme("int4", "int4", group=128, zero_point=True, note="asymmetric, g128, fp16 scale + zero"),
}

# The formats a table shows by default (bf16 KV has fp16's bytes, so it is listed once).
KV_DEFAULT = ("fp16", "fp8", "int8", "int4", "kivi2")
WEIGHT_DEFAULT = ("bf16", "fp8", "int4")
KEPT_FORMAT = "bf16"  # embedding, lm_head, router, norms, biases


def _lookup(table: dict[str, Scheme], name: str, what: str) -> Scheme:
    key = name.strip().lower()
    if key not in table:
        raise ValueError(f"unknown {what} scheme {name!r}; choose from {', '.join(table)}")
    return table[key]


def kv_scheme(name: str | Scheme) -> Scheme:
    return name if isinstance(name, Scheme) else _lookup(KV_SCHEMES, name, "KV-cache")


def weight_scheme(name: str | Scheme) -> Scheme:
    return name if isinstance(name, Scheme) else _lookup(WEIGHT_SCHEMES, name, "weight")


# ---- KV cache -------------------------------------------------------------------------------------------

def kv_bits_per_token_per_layer(model: ModelShape, scheme: str | Scheme) -> int:
    """Bits one token adds to one layer's cache: every cached vector, scale groups included."""
    s = kv_scheme(scheme)
    return sum(count * s.vector_bits(length) for count, length in model.cache_vectors())


def kv_bytes_per_token_per_layer(model: ModelShape, scheme: str | Scheme) -> float:
    return kv_bits_per_token_per_layer(model, scheme) / 8


def kv_bytes_per_token(model: ModelShape, scheme: str | Scheme) -> float:
    """Bytes one (quantized) token adds to the cache across all layers."""
    return model.layers * kv_bytes_per_token_per_layer(model, scheme)


def kv_bytes_per_sequence(model: ModelShape, scheme: str | Scheme, context: int) -> float:
    """Cache bytes for one sequence: cached tokens = min(context, window); the newest
    `recent_window` of them at fp16, the rest in the scheme. Per-tensor scales not included
    (they are per model: see `kv_fixed_bytes`)."""
    if context < 0:
        raise ValueError(f"context must be non-negative, got {context}")
    s = kv_scheme(scheme)
    tokens = model.cached_tokens(context)
    recent = min(tokens, s.recent_window)
    full = kv_bytes_per_token(model, KV_SCHEMES["fp16"]) if recent else 0.0
    return recent * full + (tokens - recent) * kv_bytes_per_token(model, s)


def kv_fixed_bytes(model: ModelShape, scheme: str | Scheme) -> int:
    """Per-tensor scale bytes, paid once per model whatever the batch and context."""
    return model.layers * kv_scheme(scheme).fixed_scale_bytes_per_layer


# ---- weights --------------------------------------------------------------------------------------------

def weight_bytes(model: ModelShape, scheme: str | Scheme) -> float:
    """Resident weight bytes: block linears in the scheme, the rest (embedding, head, norms) in bf16."""
    p = model.params()
    return p.linear * weight_scheme(scheme).bits_per_value / 8 + p.kept_16bit * get_format(KEPT_FORMAT).bits / 8


def decode_weight_bytes(model: ModelShape, scheme: str | Scheme, batch: int = 1) -> float:
    """Weight bytes one decode step reads at a batch.

    Read: attention, dense MLP, shared experts, router, lm_head, norms; the embedding table only
    as one row per token (counted as zero); routed experts in the expected fraction a batch touches,
    1 - (1 - k/E)^batch per MoE layer (independent uniform routing assumed).
    """
    p = model.params()
    s = weight_scheme(scheme)
    touched = expected_expert_fraction(model, batch) * p.routed_experts
    linear = p.attention + p.dense_mlp + p.shared_experts + touched
    kept = p.kept_16bit - (0 if p.tied else p.embedding)
    return linear * s.bits_per_value / 8 + kept * get_format(KEPT_FORMAT).bits / 8


def expected_expert_fraction(model: ModelShape, batch: int) -> float:
    """Fraction of routed experts a batch of tokens touches per layer: 1 - (1 - k/E)^batch."""
    if not model.is_moe:
        return 1.0
    return 1.0 - (1.0 - model.experts_per_token / model.routed_experts) ** batch


__all__ = [
    "KV_DEFAULT", "KV_SCHEMES", "WEIGHT_DEFAULT", "WEIGHT_SCHEMES", "Scheme", "decode_weight_bytes",
    "expected_expert_fraction", "kv_bits_per_token_per_layer", "kv_bytes_per_sequence",
    "kv_bytes_per_token", "kv_bytes_per_token_per_layer", "kv_fixed_bytes", "kv_scheme", "weight_bytes",
    "weight_scheme",
]
