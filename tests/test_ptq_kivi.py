"""KIVI: the group quantizer against numpy written from the rule, the cache's token windows, honest bytes,
and the transformers cache against the whole-cache function (on a tiny random Llama, no download)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="KIVI runs on torch tensors")
transformers = pytest.importorskip("transformers", reason="the KIVI cache is a transformers Cache")

from precisionlab.ptq.kivi import (  # noqa: E402
    KIVIConfig,
    cache_bytes,
    kivi_config,
    kivi_quantize,
    make_kivi_cache,
    quantize_groups,
    teacher_forced_logits,
)


def numpy_groups(x: np.ndarray, bits: int, group: int, axis: int) -> np.ndarray:
    """z = fp16(min), s = fp16((max - z) / (2^b - 1)), q = clip(rint((x - z) / s)), x_hat = q s + z; per group."""
    moved = np.moveaxis(x.astype(np.float32), axis, -1)
    out = np.empty_like(moved)
    for start in range(0, moved.shape[-1], group):
        block = moved[..., start : start + group]
        z = block.min(axis=-1, keepdims=True).astype(np.float16).astype(np.float32)
        s = ((block.max(axis=-1, keepdims=True) - z) / np.float32(2**bits - 1)).astype(np.float16).astype(np.float32)
        s = np.where(s > 0, s, np.float32(1))
        q = np.clip(np.rint((block - z) / s), 0, 2**bits - 1)
        out[..., start : start + group] = q * s + z
    return np.moveaxis(out, -1, axis)


def states(tokens: int = 70, heads: int = 2, dim: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, heads, tokens, dim)).astype(np.float32)
    x[..., [5, 17]] += 8.0  # key-like outlier channels: large and of one sign in every token
    return x


@pytest.mark.parametrize(("bits", "axis"), [(4, 2), (2, 2), (4, 3), (2, 3)])
def test_group_quantizer_equals_the_rule(bits: int, axis: int) -> None:
    x = states()[:, :, :64]
    got = quantize_groups(torch.from_numpy(x), bits, 32, axis).numpy()
    assert np.array_equal(got, numpy_groups(x, bits, 32, axis))


def test_recent_tokens_stay_fp16_and_the_rest_follow_kivis_windows() -> None:
    k, v = states(seed=1), states(seed=2)
    config = KIVIConfig(4, 32, 32)
    k_hat, v_hat = (t.numpy() for t in kivi_quantize(torch.from_numpy(k), torch.from_numpy(v), config))
    assert config.key_tokens(70) == 64 and config.value_tokens(70) == 38
    assert np.array_equal(k_hat[:, :, 64:], k[:, :, 64:].astype(np.float16).astype(np.float32))
    assert np.array_equal(v_hat[:, :, 38:], v[:, :, 38:].astype(np.float16).astype(np.float32))
    assert np.array_equal(k_hat[:, :, :64], numpy_groups(k[:, :, :64], 4, 32, axis=2))  # per channel
    assert np.array_equal(v_hat[:, :, :38], numpy_groups(v[:, :, :38], 4, 32, axis=3))  # per token


def test_per_channel_keys_beat_per_token_keys_on_outlier_channels() -> None:
    k = states(64)
    per_channel = numpy_groups(k, 4, 32, axis=2)
    per_token = numpy_groups(k, 4, 32, axis=3)
    err = [float(np.linalg.norm(a - k)) for a in (per_channel, per_token)]
    assert err[0] < 0.6 * err[1]


def test_cache_bytes_are_counted_by_hand() -> None:
    got = cache_bytes((1, 2, 70, 64), KIVIConfig(4, 32, 32))
    # keys: 64 tokens x 64 channels quantized; values: 38 tokens; 4 bits; per (batch, head):
    payload = 2 * (64 + 38) * 64 * 4 // 8
    groups = 2 * ((64 // 32) * 64 + 38 * 2)  # keys: 2 token groups per channel; values: 2 channel groups per token
    residual = 2 * ((70 - 64) + (70 - 38)) * 64 * 2
    assert (got.payload, got.scales, got.residual) == (payload, groups * 4, residual)
    assert got.fp16 == 2 * 2 * 70 * 64 * 2
    assert got.total == payload + groups * 4 + residual


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"bits": 3}, "2 or 4 bits"),
    ({"residual": 48, "group": 32}, "multiple of the group size"),
    ({"group": 0}, ">= 1"),
])
def test_bad_configs_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KIVIConfig(**kwargs)


def test_kivi_applies_to_int4_and_int2_only() -> None:
    assert kivi_config("int4").bits == 4 and kivi_config("int2").bits == 2
    with pytest.raises(ValueError, match="2 or 4 bits"):
        kivi_config("int8")
    # a granularity or an option was silently dropped (int4:g128 ran as KIVI int4 with groups of 32)
    for scheme in ("int4:g128", "int4:asym", "int2:row"):
        with pytest.raises(ValueError, match="bit width only"):
            kivi_config(scheme)


# --------------------------------------------------------------------------- the cache
@pytest.fixture(scope="module")
def tiny_llama():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(config).eval()


def test_the_cache_serves_exactly_the_kivi_view_at_every_decode_step(tiny_llama) -> None:  # type: ignore[no-untyped-def]
    config = KIVIConfig(2, 16, 32)
    cache = make_kivi_cache(tiny_llama, config)
    k_all, v_all = torch.from_numpy(states(90, seed=3)), torch.from_numpy(states(90, seed=4))
    k, v = cache.update(k_all[:, :, :40], v_all[:, :, :40], 0)
    assert torch.equal(k, k_all[:, :, :40])  # the prefill attends in full precision
    for t in range(40, 90):
        k, v = cache.update(k_all[:, :, t : t + 1], v_all[:, :, t : t + 1], 0)
        k_ref, v_ref = kivi_quantize(k_all[:, :, : t + 1], v_all[:, :, : t + 1], config)
        assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert cache.get_seq_length(0) == 90


def test_teacher_forced_decoding_reproduces_the_full_forward(tiny_llama) -> None:  # type: ignore[no-untyped-def]
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(1))
    cache = transformers.DynamicCache(config=tiny_llama.config)
    decoded = teacher_forced_logits(tiny_llama, ids, 20, cache)
    with torch.no_grad():
        full = tiny_llama(input_ids=ids, use_cache=False).logits[0, 19:47]
    assert torch.allclose(decoded, full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("bits", "prefill"), [(2, 37), (4, 1)])
def test_the_one_pass_attention_equals_decoding_over_the_cache(tiny_llama, bits: int, prefill: int) -> None:  # type: ignore[no-untyped-def]
    """Two mechanisms for one semantics: token-by-token decoding over KIVICache, and kivi_attention's masks."""
    from precisionlab.ptq.kivi import kivi_attention

    config = KIVIConfig(bits, 16, 32)
    ids = torch.randint(0, 96, (1, 100), generator=torch.Generator().manual_seed(bits + prefill))
    decoded = teacher_forced_logits(tiny_llama, ids, prefill, make_kivi_cache(tiny_llama, config))[1:]
    with torch.no_grad(), kivi_attention(tiny_llama, config, prefill):
        one_pass = tiny_llama(input_ids=ids, use_cache=False).logits[0, prefill:99]
    assert decoded.shape == one_pass.shape
    assert torch.allclose(one_pass, decoded, atol=2e-5, rtol=1e-4)
    with torch.no_grad():
        plain = tiny_llama(input_ids=ids, use_cache=False).logits[0, prefill:99]
    assert not torch.allclose(one_pass, plain, atol=1e-3)  # the quantization shows
    assert tiny_llama.config._attn_implementation != "precisionlab_kivi"  # restored
