"""Capacity model: KV-cache and weight bytes, batch capacity and the decode roofline.

    from precisionlab.capacity import get_model, kv_bytes_per_token, max_batch, decode_step
    m = get_model("llama3_8b")
    kv_bytes_per_token(m, "fp16")                       # 131072 bytes = 128 KiB
    max_batch(m, get_accelerator("h100"), "bf16", "fp8", 32768).batch

Modules: models (shapes, presets), hf_config (config.json loader), schemes (formats with
their scale bytes), memory (batch capacity, cache-vs-weights crossover), roofline
(decode, prefill, tensor parallelism). The format advisor is its own package, `precisionlab.advise`.
"""

from precisionlab.capacity.hf_config import load_config, model_from_config
from precisionlab.capacity.memory import (
    DEFAULT_RESERVE,
    GB,
    BatchFit,
    GiB,
    cache_exceeds_weights_context,
    head_split,
    kv_shard_fraction,
    max_batch,
    splits_heads,
)
from precisionlab.capacity.models import PRESETS, ModelShape, ParamCounts, finding_key, get_model, preset_keys
from precisionlab.capacity.roofline import (
    DecodeStep,
    Roofline,
    bare_decode,
    decode_step,
    matmul_precision,
    prefill,
    roofline,
)
from precisionlab.capacity.schemes import (
    KV_DEFAULT,
    KV_SCHEMES,
    WEIGHT_DEFAULT,
    WEIGHT_SCHEMES,
    StorageScheme,
    decode_weight_bytes,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_per_layer,
    kv_scheme,
    weight_bytes,
    weight_scheme,
)

__all__ = [
    "DEFAULT_RESERVE",
    "GB",
    "KV_DEFAULT",
    "KV_SCHEMES",
    "PRESETS",
    "WEIGHT_DEFAULT",
    "WEIGHT_SCHEMES",
    "BatchFit",
    "DecodeStep",
    "GiB",
    "ModelShape",
    "ParamCounts",
    "Roofline",
    "StorageScheme",
    "bare_decode",
    "cache_exceeds_weights_context",
    "decode_step",
    "decode_weight_bytes",
    "finding_key",
    "get_model",
    "head_split",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_layer",
    "kv_scheme",
    "kv_shard_fraction",
    "load_config",
    "matmul_precision",
    "max_batch",
    "model_from_config",
    "prefill",
    "preset_keys",
    "roofline",
    "splits_heads",
    "weight_bytes",
    "weight_scheme",
]
