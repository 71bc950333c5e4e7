"""Batch capacity: how many sequences fit beside the weights, and where the cache outgrows them.

    budget per device   = memory · (1 - reserve)                 (reserve: activations, runtime)
    max batch           = floor((budget - weights/tp - fixed scales) / KV bytes per sequence per device)
    cache > weights at  = the smallest context L with batch · KV(L) > weights

Memory is the vendor's decimal GB (1e9 bytes); GiB (2^30) are shown beside it.
Tensor parallelism over tp devices splits the weights evenly and the KV heads as
ceil(Hkv / tp) per device (KV heads are replicated when tp > Hkv); an MLA latent is
shared by all heads, so every device holds the whole latent cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from precisionlab.capacity.models import ModelShape, ceil_div
from precisionlab.capacity.schemes import StorageScheme, kv_bytes_per_sequence, kv_fixed_bytes, weight_bytes
from precisionlab.hardware import Accelerator

DEFAULT_RESERVE = 0.10
"""Fraction of device memory held back for activations, CUDA graphs and the runtime
(vLLM's default gpu_memory_utilization of 0.9 leaves the same 10%)."""

GB = 1e9
GiB = float(2**30)
CONTEXT_SEARCH_LIMIT = 2**26
"""Largest context the crossover search considers (67M tokens); beyond it the answer is 'never'."""


def kv_shard_fraction(model: ModelShape, tp: int) -> float:
    """Fraction of one sequence's cache each of tp devices holds (see module docstring)."""
    check_tp(tp)
    if model.is_mla:
        return 1.0
    return ceil_div(model.kv_heads, tp) / model.kv_heads


def check_tp(tp: int) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
        raise ValueError(f"tensor-parallel degree must be a positive integer, got {tp!r}")


def splits_heads(model: ModelShape, tp: int) -> bool:
    """Whether tp devices can split the model's attention heads evenly (see head_split)."""
    if model.heads % tp:
        return False
    return model.is_mla or model.kv_heads % tp == 0 or tp % model.kv_heads == 0


def head_split(model: ModelShape, tp: int) -> str:
    """How tensor parallelism over tp devices splits the attention heads, in words; ValueError when it cannot.

    Each device computes heads/tp query heads, so tp must divide the query heads. The KV heads are split the
    same way when tp divides them, and replicated when tp is a multiple of them (each device holds one KV
    head, each KV head lives on tp/Hkv devices); any other degree leaves some devices with a share of a head,
    which serving stacks refuse (vLLM's rule). An MLA latent cache is replicated on every device."""
    check_tp(tp)
    q, kv = model.heads, model.kv_heads
    if not splits_heads(model, tp):
        degrees = [d for d in range(1, q + 1) if splits_heads(model, d)]
        what = (f"{q} query heads ({q}/{tp} is not whole)" if q % tp else
                f"{kv} KV heads ({tp} neither divides {kv} nor is a multiple of it)")
        raise ValueError(f"tensor parallelism over {tp} devices cannot split {model.name}'s {what}; "
                         f"degrees that split its heads evenly: {', '.join(map(str, degrees))}")
    if model.is_mla:
        return f"{q // tp} query heads per device; the MLA latent cache is replicated on all {tp}"
    if kv % tp == 0:
        return f"{q // tp} query heads and {kv // tp} KV heads per device"
    return (f"{q // tp} query heads and 1 KV head per device (each of the {kv} KV heads replicated on "
            f"{tp // kv} devices)")


def check_reserve(reserve: float) -> None:
    if not 0 <= reserve < 1:
        raise ValueError(f"memory reserve is a fraction of device memory in [0, 1), got {reserve}")


@dataclass(frozen=True)
class BatchFit:
    """The result of fitting sequences of one context beside the weights on one device."""

    batch: int
    budget_bytes: float
    weight_bytes: float
    kv_bytes_per_seq: float
    context: int
    cached_tokens: int
    past_max_context: bool
    windowed: bool

    @property
    def weights_fit(self) -> bool:
        return self.weight_bytes <= self.budget_bytes

    @property
    def flag(self) -> str:
        notes = []
        if not self.weights_fit:
            notes.append("weights do not fit")
        if self.past_max_context:
            notes.append("past model max context")
        if self.windowed:
            notes.append(f"cache capped by {self.cached_tokens}-token window")
        return "; ".join(notes)


def max_batch(model: ModelShape, accelerator: Accelerator, weights: str | StorageScheme, kv: str | StorageScheme,
              context: int, reserve: float = DEFAULT_RESERVE, tp: int = 1) -> BatchFit:
    """Largest batch of `context`-token sequences that fits on each of tp devices (formula above)."""
    check_reserve(reserve)
    check_tp(tp)
    if context <= 0:
        raise ValueError(f"context must be positive, got {context}")
    budget = accelerator.memory_bytes * (1 - reserve)
    w = weight_bytes(model, weights) / tp + kv_fixed_bytes(model, kv)
    per_seq = kv_bytes_per_sequence(model, kv, context) * kv_shard_fraction(model, tp)
    batch = max(0, math.floor((budget - w) / per_seq)) if budget > w else 0
    cached = model.cached_tokens(context)
    return BatchFit(batch=batch, budget_bytes=budget, weight_bytes=w, kv_bytes_per_seq=per_seq, context=context,
                    cached_tokens=cached, past_max_context=context > model.max_context, windowed=cached < context)


def cache_exceeds_weights_context(model: ModelShape, weights: str | StorageScheme, kv: str | StorageScheme,
                                  batch: int = 1) -> float:
    """Smallest context at which batch · KV bytes per sequence exceeds the weight bytes.

    Found by bisection on the (non-decreasing) cache size; math.inf when the cache never gets
    there (a sliding window caps it) within CONTEXT_SEARCH_LIMIT tokens.
    """
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    target = weight_bytes(model, weights)

    def exceeds(context: int) -> bool:
        return batch * kv_bytes_per_sequence(model, kv, context) > target

    if not exceeds(CONTEXT_SEARCH_LIMIT):
        return math.inf
    lo, hi = 0, CONTEXT_SEARCH_LIMIT  # exceeds(lo) is False, exceeds(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if exceeds(mid):
            hi = mid
        else:
            lo = mid
    return hi


__all__ = [
    "CONTEXT_SEARCH_LIMIT", "DEFAULT_RESERVE", "GB", "BatchFit", "GiB", "cache_exceeds_weights_context",
    "check_reserve", "check_tp", "kv_shard_fraction", "max_batch",
]
