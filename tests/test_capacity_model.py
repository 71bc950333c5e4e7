"""Capacity model arithmetic against the seed's worked numbers and hand calculations written out here."""

from __future__ import annotations

import math

import pytest

from precisionlab.capacity import (
    PRESETS,
    cache_exceeds_weights_context,
    decode_step,
    decode_weight_bytes,
    get_model,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_per_layer,
    kv_shard_fraction,
    max_batch,
    prefill,
    weight_bytes,
)
from precisionlab.capacity.roofline import bare_decode, causal_attended_tokens
from precisionlab.capacity.schemes import expected_expert_fraction
from precisionlab.hardware import Accelerator, get_accelerator

LLAMA3_8B = get_model("llama3_8b")
H100 = get_accelerator("h100")


# ---- the seed's KV anchor: 2 x 8 x 128 values per layer, 128 KiB per token, 1 GiB per 8k sequence --------

def test_llama3_8b_kv_anchor_from_the_seed() -> None:
    assert LLAMA3_8B.kv_values_per_token_per_layer == 2 * 8 * 128 == 2048
    assert kv_bytes_per_token_per_layer(LLAMA3_8B, "fp16") == 2048 * 2
    assert kv_bytes_per_token(LLAMA3_8B, "fp16") == 128 * 1024
    assert kv_bytes_per_sequence(LLAMA3_8B, "fp16", 8192) == 2**30
    # batch 32 at 8k: 32 GiB, about twice the ~16 GB of fp16 weights
    assert 32 * kv_bytes_per_sequence(LLAMA3_8B, "fp16", 8192) / weight_bytes(LLAMA3_8B, "bf16") == pytest.approx(
        2.0, rel=0.1)


def test_kv_bytes_with_scales_by_hand() -> None:
    # one K or V head vector of 128 values, 16 such vectors per layer (8 KV heads x K,V), 32 layers
    vectors = 16 * 32
    assert kv_bytes_per_token(LLAMA3_8B, "fp8") == vectors * 128  # 1 byte each, per-tensor scales only
    assert kv_bytes_per_token(LLAMA3_8B, "int8") == vectors * (128 + 2 * 2)  # two g64 groups, fp16 scale
    # two g64 groups, each an fp16 scale (2 bytes) and a 4-bit zero point (half a byte)
    assert kv_bytes_per_token(LLAMA3_8B, "int4") == vectors * (64 + 2 * (2 + 4 / 8))
    assert kv_bytes_per_token(LLAMA3_8B, "kivi2") == vectors * (32 + 4 * 4)  # four g32 groups, fp16 scale + fp16 min
    # KIVI keeps the newest 128 tokens in fp16
    assert kv_bytes_per_sequence(LLAMA3_8B, "kivi2", 8192) == 128 * 131072 + (8192 - 128) * vectors * 48
    assert kv_bytes_per_sequence(LLAMA3_8B, "kivi2", 100) == 100 * 131072


def test_deepseek_v3_mla_latent_cache() -> None:
    ds = get_model("deepseek_v3")
    assert ds.kv_values_per_token_per_layer == 512 + 64
    assert kv_bytes_per_token(ds, "fp16") == (512 + 64) * 61 * 2
    # the latent is shared by all heads: a KV head count of 128 would cache 2*128*128 values instead
    assert kv_bytes_per_token(ds, "fp16") < kv_bytes_per_token(get_model("llama3_70b"), "fp16")
    assert kv_shard_fraction(ds, 8) == 1.0


# ---- parameter counts against the published totals -------------------------------------------------------

@pytest.mark.parametrize(("key", "published"), [
    ("llama3_8b", 8_030_261_248),  # Meta-Llama-3-8B safetensors total
    ("llama3_70b", 70_553_706_496),
    ("llama2_13b", 13_015_864_320),
    ("mistral_7b", 7_241_732_096),
])
def test_dense_parameter_counts_match_published(key: str, published: int) -> None:
    assert PRESETS[key].params().total == published


def test_llama3_8b_parameter_count_by_hand() -> None:
    h, layers, vocab = 4096, 32, 128256
    attention = h * h + 2 * h * 1024 + h * h
    mlp = 3 * h * 14336
    assert LLAMA3_8B.params().total == layers * (attention + mlp + 2 * h) + h + 2 * vocab * h


def test_qwen_and_deepseek_against_model_cards() -> None:
    qwen = get_model("qwen2_5_7b").params()
    assert qwen.total / 1e9 == pytest.approx(7.61, abs=0.01)  # "Number of Parameters: 7.61B"
    assert (qwen.total - qwen.embedding - qwen.lm_head) / 1e9 == pytest.approx(6.53, abs=0.01)  # non-embedding
    ds = get_model("deepseek_v3").params()
    assert ds.total / 1e9 == pytest.approx(671, abs=1)  # "671B total parameters"
    assert 36e9 < ds.active < 38.5e9  # "37B activated for each token"


# ---- the seed's decode worked example ---------------------------------------------------------------------

SEED_GPU = Accelerator("seed", memory_gb=80, bandwidth_gbs=3000, peak_tflops={"bf16": 1000})


@pytest.mark.parametrize(("bits", "seed_tokens_per_s"), [(16, 115), (8, 231), (4, 462)])
def test_seed_decode_tokens_per_second(bits: int, seed_tokens_per_s: int) -> None:
    roof = bare_decode(13e9, bits, SEED_GPU)
    assert round(1 / roof.time) == seed_tokens_per_s
    assert roof.intensity == pytest.approx(2 / (bits / 8))  # 2 FLOPs per weight over its bytes
    assert round(roof.ridge) == 333
    assert roof.bound == "memory"
    assert roof.ridge / roof.intensity > 50  # about two orders of magnitude below the ridge


# ---- batch capacity ----------------------------------------------------------------------------------------

def test_max_batch_by_hand() -> None:
    weights = 8_030_261_248 * 2  # all in bf16
    budget = 80e9 * 0.9
    per_seq = 4096 * 131072
    fit = max_batch(LLAMA3_8B, H100, "bf16", "fp16", 4096)
    assert fit.weight_bytes == weights
    assert fit.batch == math.floor((budget - weights) / per_seq) == 104
    assert max_batch(LLAMA3_8B, H100, "bf16", "fp16", 4096, reserve=0.0).batch == math.floor((80e9 - weights) / per_seq)


def test_fp8_cache_doubles_the_batch_and_flags() -> None:
    for context in (4096, 32768, 131072):
        fp16 = max_batch(LLAMA3_8B, H100, "bf16", "fp16", context).batch
        fp8 = max_batch(LLAMA3_8B, H100, "bf16", "fp8", context).batch
        assert fp8 in (2 * fp16, 2 * fp16 + 1)
    assert not max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192).past_max_context
    assert max_batch(LLAMA3_8B, H100, "bf16", "fp16", 32768).past_max_context
    assert "past model max" in max_batch(LLAMA3_8B, H100, "bf16", "fp16", 32768).flag


def test_weights_that_do_not_fit() -> None:
    fit = max_batch(get_model("llama3_70b"), get_accelerator("rtx4090"), "bf16", "fp16", 4096)
    assert fit.batch == 0 and not fit.weights_fit and "do not fit" in fit.flag


def test_sliding_window_caps_the_cache() -> None:
    mistral = get_model("mistral_7b")
    assert kv_bytes_per_sequence(mistral, "fp16", 32768) == 4096 * 131072
    assert max_batch(mistral, H100, "bf16", "fp16", 32768).batch == max_batch(mistral, H100, "bf16", "fp16",
                                                                               4096).batch
    assert cache_exceeds_weights_context(mistral, "bf16", "fp16", 1) == math.inf
    assert cache_exceeds_weights_context(mistral, "bf16", "fp16", 32) < 4096


def test_cache_exceeds_weights_context_by_hand() -> None:
    weights = 8_030_261_248 * 2
    assert cache_exceeds_weights_context(LLAMA3_8B, "bf16", "fp16", 1) == weights // 131072 + 1
    assert cache_exceeds_weights_context(LLAMA3_8B, "bf16", "fp16", 32) == weights // (32 * 131072) + 1
    assert cache_exceeds_weights_context(LLAMA3_8B, "bf16", "fp8", 1) == weights // 65536 + 1


def test_tensor_parallel_memory() -> None:
    assert kv_shard_fraction(LLAMA3_8B, 2) == 0.5
    assert kv_shard_fraction(LLAMA3_8B, 16) == 1 / 8  # 8 KV heads: replicated past tp = 8
    one = max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192, tp=1)
    two = max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192, tp=2)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2)
    assert two.kv_bytes_per_seq == one.kv_bytes_per_seq / 2
    with pytest.raises(ValueError, match="tensor-parallel"):
        max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192, tp=0)


def test_bad_reserve() -> None:
    with pytest.raises(ValueError, match="reserve"):
        max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192, reserve=1.0)


# ---- weight bytes -----------------------------------------------------------------------------------------

def test_weight_bytes_with_scales_by_hand() -> None:
    p = LLAMA3_8B.params()
    kept = p.embedding + p.lm_head + p.small
    assert weight_bytes(LLAMA3_8B, "int4") == p.linear * (4 + (16 + 4) / 128) / 8 + kept * 2  # fp16 scale, 4-bit zero
    assert weight_bytes(LLAMA3_8B, "int8") == p.linear * (8 + 16 / 128) / 8 + kept * 2
    assert weight_bytes(LLAMA3_8B, "fp8") == p.linear * (8 + 32 / (128 * 128)) / 8 + kept * 2


def test_capacity_counts_bytes_with_the_quant_byte_model() -> None:
    # one byte model: the bits capacity charges per weight / cached value are what `quant` stores for the same
    # scheme string (quantizing real data here), including sub-byte zero points
    import numpy as np

    from precisionlab.capacity.schemes import KV_SCHEMES, WEIGHT_SCHEMES
    from precisionlab.quant import quantize

    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    for scheme in (*WEIGHT_SCHEMES.values(), *KV_SCHEMES.values()):
        if scheme.quant is None or scheme.per_tensor:
            continue
        q = quantize(x, scheme.storage)  # KIVI's fp16 group minimum is part of its scheme (min=fp16)
        assert scheme.bits_per_value == pytest.approx(q.bits_per_element, rel=1e-12), scheme.name
    assert WEIGHT_SCHEMES["int4"].bits_per_value == 4 + (16 + 4) / 128


# ---- decode, prefill, MoE ---------------------------------------------------------------------------------

def test_decode_batch1_by_hand() -> None:
    p = LLAMA3_8B.params()
    read = (p.total - p.embedding) * 2 + 8192 * 131072  # weights less the embedding table, plus the cache
    step = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192, batch=1)
    assert step.roof.bytes == read
    assert step.tokens_per_s == pytest.approx(3350e9 / read)
    assert step.roof.bound == "memory"


def test_batching_raises_intensity_and_throughput() -> None:
    one = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192, batch=1)
    many = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192, batch=32)
    assert many.roof.intensity > 8 * one.roof.intensity
    assert many.tokens_per_s > 8 * one.tokens_per_s
    assert many.tokens_per_s_per_seq < one.tokens_per_s_per_seq


def test_prefill_is_compute_bound_and_ignores_weight_only_quantization() -> None:
    bf16 = prefill(LLAMA3_8B, H100, "bf16", "fp16", 4096)
    int4 = prefill(LLAMA3_8B, H100, "int4", "fp16", 4096)
    assert bf16.bound == "compute"
    assert int4.time == pytest.approx(bf16.time)
    # decode, by contrast, gets faster with int4 weights
    assert decode_step(LLAMA3_8B, H100, "int4", "fp16", 4096).tokens_per_s > 2.5 * decode_step(
        LLAMA3_8B, H100, "bf16", "fp16", 4096).tokens_per_s
    assert causal_attended_tokens(4, None) == 1 + 2 + 3 + 4
    assert causal_attended_tokens(6, 3) == 1 + 2 + 3 + 3 + 3 + 3


def test_moe_decode_reads_only_active_experts() -> None:
    ds = get_model("deepseek_v3")
    assert expected_expert_fraction(ds, 1) == 8 / 256
    assert expected_expert_fraction(ds, 2) == pytest.approx(1 - (1 - 8 / 256) ** 2)
    p = ds.params()
    one = decode_weight_bytes(ds, "bf16", batch=1)
    assert one == pytest.approx((p.active - p.embedding) * 2)
    assert decode_weight_bytes(ds, "bf16", batch=4096) == pytest.approx((p.total - p.embedding) * 2, rel=1e-6)


def test_fp8_weights_use_the_fp8_peak_where_present() -> None:
    from precisionlab.capacity import matmul_precision

    assert matmul_precision("fp8", H100) == "fp8"
    assert matmul_precision("fp8", get_accelerator("a100")) == "bf16"
    assert matmul_precision("int4", H100) == "bf16"


def test_presets_name_their_source() -> None:
    for key, model in PRESETS.items():
        assert model.key == key
        assert "config.json" in model.source


def test_peak_override_moves_the_ridge_not_decode() -> None:
    faster = H100.with_overrides(peak_tflops={"bf16": 2 * 989.5})
    slow = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192)
    fast = decode_step(LLAMA3_8B, faster, "bf16", "fp16", 8192)
    assert fast.roof.ridge == pytest.approx(2 * slow.roof.ridge)
    assert fast.tokens_per_s == slow.tokens_per_s  # memory-bound: compute peak does not matter
    assert prefill(LLAMA3_8B, faster, "bf16", "fp16", 4096).time < prefill(LLAMA3_8B, H100, "bf16", "fp16", 4096).time


def test_capacity_imports_no_heavy_peers() -> None:
    import subprocess
    import sys

    code = ("import sys, precisionlab.capacity, precisionlab.advise.advisor, precisionlab.labs.capacity, "
            "precisionlab.labs.advise; print(sorted({'torch', 'triton', 'matplotlib', 'rich'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- more hand calculations (every expected value written out from the formulas, not from the code) -------

LLAMA3_8B_PARAMS = 8_030_261_248
LLAMA3_8B_EMBEDDING = 128256 * 4096
H100_BW, H100_BF16 = 3350e9, 989.5e12


def test_deepseek_v3_parameters_by_hand_and_active_against_deepseek() -> None:
    # config.json fields: h 7168, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128, 128 heads, 61 layers,
    # 3 dense layers (intermediate 18432), 58 MoE layers of 256 routed + 1 shared experts (2048), top-8, vocab 129280
    h = 7168
    attention = h * 1536 + 1536 * 128 * (128 + 64) + h * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * h
    norms = 1536 + 512 + 2 * h
    dense = 3 * 3 * h * 18432
    moe = 58 * ((256 + 1) * 3 * h * 2048 + 256 * h)
    total = 61 * (attention + norms) + dense + moe + 2 * 129280 * h + h
    p = get_model("deepseek_v3").params()
    assert p.total == total
    # DeepSeek's weight notes: 36.6B activated parameters (output head included, embedding lookup not)
    assert p.matmul_active / 1e9 == pytest.approx(36.6, abs=0.05)


def test_decode_at_batch_by_hand() -> None:
    weights = (LLAMA3_8B_PARAMS - LLAMA3_8B_EMBEDDING) * 2            # bf16, the embedding table is not read
    cache = 32 * 8192 * 131072                                          # 32 sequences of 8192 fp16 tokens
    flops = 32 * (2 * (LLAMA3_8B_PARAMS - LLAMA3_8B_EMBEDDING) + 32 * 4 * 32 * 128 * 8192)
    step = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192, batch=32)
    assert step.roof.bytes == weights + cache
    assert step.roof.flops == flops
    time = max((weights + cache) / H100_BW, flops / H100_BF16)
    assert step.tokens_per_s == pytest.approx(32 / time, rel=1e-12)
    assert step.roof.intensity == pytest.approx(flops / (weights + cache), rel=1e-12)


def test_tensor_parallel_decode_by_hand() -> None:
    # tp=2: half the weights and half the 8 KV heads per device; all-reduce ignored
    weights = (LLAMA3_8B_PARAMS - LLAMA3_8B_EMBEDDING) * 2 / 2
    cache = 8192 * 131072 * 4 / 8
    step = decode_step(LLAMA3_8B, H100, "bf16", "fp16", 8192, batch=1, tp=2)
    assert step.roof.bytes == pytest.approx(weights + cache, rel=1e-12)
    assert step.tokens_per_s == pytest.approx(H100_BW / (weights + cache), rel=1e-12)


def test_prefill_by_hand() -> None:
    prompt = 4096
    matmul = LLAMA3_8B_PARAMS - LLAMA3_8B_EMBEDDING
    attention = 32 * 4 * 32 * 128 * (prompt * (prompt + 1) // 2)       # causal: position i attends to i tokens
    flops = 2 * matmul * prompt + attention
    bytes_moved = matmul * 2 + prompt * 131072                          # weights once, the prompt's cache written
    roof = prefill(LLAMA3_8B, H100, "bf16", "fp16", prompt)
    assert roof.flops == flops and roof.bytes == bytes_moved
    assert roof.time == pytest.approx(flops / H100_BF16, rel=1e-12)     # compute-bound
    assert roof.intensity > roof.ridge


def test_crossover_with_quantized_weights_by_hand() -> None:
    # int4 g128 weights: linears at 4 + (16 + 4)/128 bits (fp16 scale, 4-bit zero point), embedding + lm_head
    # + norms at 16 bits
    h, layers = 4096, 32
    linear = layers * (2 * h * h + 2 * h * 1024 + 3 * h * 14336)
    kept = LLAMA3_8B_PARAMS - linear
    weights = linear * (4 + 20 / 128) / 8 + kept * 2
    assert weight_bytes(LLAMA3_8B, "int4") == pytest.approx(weights, rel=1e-12)
    # fp8 cache: 65536 bytes per token; crossover = first L with L * 65536 > weights
    assert cache_exceeds_weights_context(LLAMA3_8B, "int4", "fp8", 1) == math.floor(weights / 65536) + 1
    assert cache_exceeds_weights_context(LLAMA3_8B, "int4", "fp8", 8) == math.floor(weights / (8 * 65536)) + 1


def test_seed_example_ridge_ratio() -> None:
    # seed: 2 FLOP per weight over 2 bytes is 1 FLOP/byte in fp16, against a ridge of 1e15 / 3e12 = 333.3
    roof = bare_decode(13e9, 16, SEED_GPU)
    assert roof.intensity == 1.0
    assert roof.ridge == pytest.approx(1e15 / 3e12)
    assert 100 < roof.ridge / roof.intensity < 1000  # two orders of magnitude
    assert 1 / roof.time == pytest.approx(3e12 / 26e9)


def test_tensor_parallel_batch_is_the_groups() -> None:
    # tp=8 splits the 8 KV heads one per device, so the 8 devices together hold as many 8k sequences as
    # their pooled memory allows: floor((8 x 72e9 - bf16 weights) / 1 GiB), not 8 times that
    fit = max_batch(LLAMA3_8B, H100, "bf16", "fp16", 8192, tp=8)
    assert fit.batch == math.floor((8 * 72e9 - 2 * LLAMA3_8B_PARAMS) / 2**30)
