"""Storage schemes for weights and the KV cache, with their scale bytes counted by quant's byte model.

A scheme is either a 16-bit format with no scales (bf16, fp16) or a `precisionlab.quant` scheme string,
and its bytes are `precisionlab.quant.stored_bytes` of that scheme: packed codes (a ragged last group
padded and counted), one scale per group in the scale format, integer zero points at the element's
width, float block minimums (min=) at their format's width. So `capacity` and `quant` count the same bytes.
Bits per value:

    weights   bits_per_element(scheme, (8 R, C))   for R x C blocks (groups: R = 1), amortised over 8
                                                   blocks so that sub-byte zero points fill whole bytes
    KV        bits of one cached vector of `length` values = 8 * stored_bytes(scheme, (8, length)) / 8

Assumptions (the usual published choices):
  KV fp16/bf16  : no scales.
  KV fp8        : e4m3 with one fp32 scale per layer for K and one for V (vLLM's per-tensor
                  k_scale / v_scale; quant's per-tensor `e4m3`): a fixed 8 bytes per layer, nothing per token.
  KV int8       : `int8:g64`, symmetric groups of 64 values along the head dimension, fp16 scale (8.25 bits).
  KV int4       : `int4:g64:asym`, groups of 64, fp16 scale + a 4-bit integer zero point (4.3125 bits).
  KV kivi2      : 2-bit KIVI (arXiv:2402.02750): keys per channel over 32-token groups, values per token in
                  32-value groups; `uint2:g32:min=fp16`: unsigned 2-bit codes, an fp16 scale and KIVI's fp16
                  group minimum (a float offset, x_hat = q * s + m, not an integer zero point), so
                  2 + 16/32 + 16/32 = 3 bits; the most recent 128 tokens stay in fp16 (KIVI's residual window).
  weights bf16  : no scales.       fp8 : `e4m3:block128x128`, fp32 scale (DeepSeek-V3's recipe).
  weights int8  : `int8:g128`, symmetric groups of 128 input channels, fp16 scale (8.125 bits).
  weights int4  : `int4:g128:asym`, fp16 scale + 4-bit zero point per 128 (GPTQ / AWQ's g128 layout:
                  qzeros hold 4-bit zero points, eight to an int32): 4 + 20/128 = 4.15625 bits.
Weight scales are amortised (params / group); KV groups are counted per cached vector,
rounding up, so a head size that the group does not divide pays for the partial group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from precisionlab.capacity.models import ModelShape
from precisionlab.formats import get_format
from precisionlab.quant import Granularity, bits_per_element, parse_scheme, stored_bytes
from precisionlab.quant import Scheme as QuantScheme

AMORTISE_BLOCKS = 8
"""Blocks (or cached vectors) a bit count is taken over: 8 of them hold whole bytes of any sub-byte part."""


@dataclass(frozen=True)
class StorageScheme:
    """How one stored value is kept: `storage` is a 16-bit format name (no scales) or a quant scheme string.

    `recent_window` (KV only): newest tokens kept in fp16.
    """

    name: str
    storage: str
    recent_window: int = 0
    note: str = ""

    def __post_init__(self) -> None:
        if self.quant is None and get_format(self.storage).bits != 16:  # get_format names an unknown format
            raise ValueError(f"capacity scheme {self.name!r}: {self.storage} is neither a 16-bit format nor a "
                             "quantization scheme")

    @cached_property
    def quant(self) -> QuantScheme | None:
        """The quant scheme, or None for a plain 16-bit format (bf16 and fp16 are not quant elements)."""
        try:
            return parse_scheme(self.storage)
        except ValueError:
            return None

    @property
    def value_format(self) -> str:
        return self.storage if self.quant is None else self.quant.element

    @property
    def value_bits(self) -> int:
        return get_format(self.value_format).bits

    @property
    def group(self) -> int:
        """Values sharing one scale (R x C for 2-D blocks); 0 for no scales or one scale per tensor."""
        q = self.quant
        if q is None or self.per_tensor:
            return 0
        return q.group * q.block_rows

    @property
    def per_tensor(self) -> bool:
        """One scale per K / V tensor of a layer, not per group of values."""
        return self.quant is not None and self.quant.granularity is Granularity.TENSOR

    @property
    def bits_per_value(self) -> float:
        """Amortised bits per value: quant's bytes of AMORTISE_BLOCKS blocks (per-tensor scales left out)."""
        q = self.quant
        if q is None:
            return float(self.value_bits)
        if self.per_tensor:
            return float(self.value_bits)
        rows = q.block_rows if q.granularity is Granularity.BLOCK else 1
        shape = (AMORTISE_BLOCKS * rows, q.group)
        return bits_per_element(q, shape)

    def vector_bits(self, length: int) -> float:
        """Bits to store one cached vector of `length` values, a partial group paid in full (with its
        padding, as quant stores it); per-tensor scales are counted per layer (`fixed_scale_bytes_per_layer`)."""
        q = self.quant
        if q is None:
            return float(length * self.value_bits)
        parts = stored_bytes(q, (AMORTISE_BLOCKS, length))
        if self.per_tensor:
            parts = {**parts, "scales": 0, "tensor_scale": 0}
        return 8 * sum(parts.values()) / AMORTISE_BLOCKS

    @property
    def fixed_scale_bytes_per_layer(self) -> int:
        """Per-tensor scales: one for K and one for V per layer, whatever the tokens."""
        if not self.per_tensor:
            return 0
        assert self.quant is not None
        return 2 * stored_bytes(self.quant, (1, 1))["scales"]


KV_SCHEMES: dict[str, StorageScheme] = {
    "fp16": StorageScheme("fp16", "fp16", note="16-bit, no scales (bf16 has the same bytes)"),
    "bf16": StorageScheme("bf16", "bf16", note="16-bit, no scales"),
    "fp8": StorageScheme("fp8", "e4m3", note="e4m3, per-tensor fp32 scale for K and for V in each layer"),
    "int8": StorageScheme("int8", "int8:g64", note="symmetric, g64 along head dim, fp16 scale"),
    "int4": StorageScheme("int4", "int4:g64:asym", note="asymmetric, g64, fp16 scale + 4-bit zero point"),
    "kivi2": StorageScheme("kivi2", "uint2:g32:min=fp16", recent_window=128,
                                   note="2-bit KIVI: g32 fp16 scale + fp16 minimum; newest 128 tokens in fp16"),
}

WEIGHT_SCHEMES: dict[str, StorageScheme] = {
    "bf16": StorageScheme("bf16", "bf16", note="16-bit, no scales"),
    "fp16": StorageScheme("fp16", "fp16", note="16-bit, no scales"),
    "fp8": StorageScheme("fp8", "e4m3:block128x128", note="e4m3, 128x128 blocks, fp32 scale"),
    "int8": StorageScheme("int8", "int8:g128", note="symmetric, g128, fp16 scale"),
    "int4": StorageScheme("int4", "int4:g128:asym", note="asymmetric, g128, fp16 scale + 4-bit zero point (GPTQ/AWQ)"),
}

# The formats a table shows by default (bf16 KV has fp16's bytes, so it is listed once).
KV_DEFAULT = ("fp16", "fp8", "int8", "int4", "kivi2")
WEIGHT_DEFAULT = ("bf16", "fp8", "int4")
KEPT_FORMAT = "bf16"  # embedding, lm_head, router, norms, biases


def _lookup(table: dict[str, StorageScheme], name: str, what: str) -> StorageScheme:
    key = name.strip().lower()
    if key not in table:
        raise ValueError(f"unknown {what} scheme {name!r}; choose from {', '.join(table)}")
    return table[key]


def kv_scheme(name: str | StorageScheme) -> StorageScheme:
    return name if isinstance(name, StorageScheme) else _lookup(KV_SCHEMES, name, "KV-cache")


def weight_scheme(name: str | StorageScheme) -> StorageScheme:
    return name if isinstance(name, StorageScheme) else _lookup(WEIGHT_SCHEMES, name, "weight")


# ---- KV cache -------------------------------------------------------------------------------------------

def kv_bits_per_token_per_layer(model: ModelShape, scheme: str | StorageScheme) -> float:
    """Bits one token adds to one layer's cache: every cached vector, scale groups included."""
    s = kv_scheme(scheme)
    return sum(count * s.vector_bits(length) for count, length in model.cache_vectors())


def kv_bytes_per_token_per_layer(model: ModelShape, scheme: str | StorageScheme) -> float:
    return kv_bits_per_token_per_layer(model, scheme) / 8


def kv_bytes_per_token(model: ModelShape, scheme: str | StorageScheme) -> float:
    """Bytes one (quantized) token adds to the cache across all layers."""
    return model.layers * kv_bytes_per_token_per_layer(model, scheme)


def kv_bytes_per_sequence(model: ModelShape, scheme: str | StorageScheme, context: int) -> float:
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


def kv_fixed_bytes(model: ModelShape, scheme: str | StorageScheme) -> int:
    """Per-tensor scale bytes, paid once per model whatever the batch and context."""
    return model.layers * kv_scheme(scheme).fixed_scale_bytes_per_layer


# ---- weights --------------------------------------------------------------------------------------------

def weight_bytes(model: ModelShape, scheme: str | StorageScheme) -> float:
    """Resident weight bytes: block linears in the scheme, the rest (embedding, head, norms) in bf16."""
    p = model.params()
    return p.linear * weight_scheme(scheme).bits_per_value / 8 + p.kept_16bit * get_format(KEPT_FORMAT).bits / 8


def decode_weight_bytes(model: ModelShape, scheme: str | StorageScheme, batch: int = 1) -> float:
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
    "KV_DEFAULT", "KV_SCHEMES", "WEIGHT_DEFAULT", "WEIGHT_SCHEMES", "StorageScheme", "decode_weight_bytes",
    "expected_expert_fraction", "kv_bits_per_token_per_layer", "kv_bytes_per_sequence",
    "kv_bytes_per_token", "kv_bytes_per_token_per_layer", "kv_fixed_bytes", "kv_scheme", "weight_bytes",
    "weight_scheme",
]
