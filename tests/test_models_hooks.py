"""Activation (W8A8-style) and KV-cache quantization hooks.

Expected values: per-token int8 by hand (fp16 scale = amax / 127 per token, codes rounded half to
even); the KV cache's stored states against the same rule applied to states captured before entry.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.model_helpers import require_peers, smollm2_slice

torch = pytest.importorskip("torch")

from precisionlab.models.hooks import (  # noqa: E402
    SchemeKV,
    activation_quantization,
    cache_kwargs,
    fake_quantize,
    quantized_cache,
)


def per_token_int8(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1, x.shape[-1]).astype(np.float32)
    s = (np.abs(flat.astype(np.float64)).max(axis=1, keepdims=True) / 127).astype(np.float16).astype(np.float32)
    return (np.rint(flat / s) * s).reshape(x.shape).astype(np.float32)


def test_fake_quantize_is_per_token_over_the_last_axis() -> None:
    x = torch.randn(2, 5, 48, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.01, 30, 48)
    np.testing.assert_array_equal(fake_quantize(x, "int8:row").numpy(), per_token_int8(x.numpy()))
    assert fake_quantize(x.to(torch.bfloat16), "int8:row").dtype == torch.bfloat16


def test_activation_hooks_quantize_linear_inputs_and_go_away() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    x = torch.randn(3, 7, 32) * 5
    plain = model(x)
    with activation_quantization(model, "int8:row") as names, torch.no_grad():
        assert names == ["0", "2"]
        quantized = model(x)
        h = torch.relu(torch.nn.functional.linear(torch.from_numpy(per_token_int8(x.numpy())), model[0].weight,
                                                  model[0].bias))
        expected = torch.nn.functional.linear(torch.from_numpy(per_token_int8(h.numpy())), model[2].weight,
                                              model[2].bias)
        torch.testing.assert_close(quantized, expected, rtol=0, atol=0)
    assert not torch.equal(quantized, plain)
    assert all(not m._forward_pre_hooks for m in model.modules())
    torch.testing.assert_close(model(x), plain, rtol=0, atol=0)


class Recorder:
    """A KV quantizer that records what enters the cache and applies int8 per token."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, np.ndarray]] = []

    def __call__(self, states: torch.Tensor, kind: str, layer: int) -> torch.Tensor:
        self.seen.append((kind, layer, states.numpy().copy()))
        return SchemeKV("int8:row")(states, kind, layer)


def test_kv_cache_stores_the_quantized_states() -> None:
    loaded = smollm2_slice()
    model = loaded.model
    recorder = Recorder()
    cache = quantized_cache(model, recorder)
    ids = torch.tensor([loaded.tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]])
    with torch.inference_mode():
        quantized_logits = model(input_ids=ids, **cache_kwargs(model, cache)).logits
        plain_logits = model(input_ids=ids, use_cache=False).logits
    layers = {layer for _, layer, _ in recorder.seen}
    assert layers == set(range(model.config.num_hidden_layers))
    key_in = next(states for kind, layer, states in recorder.seen if kind == "key" and layer == 1)
    stored = cache.layers[1].keys.numpy()
    np.testing.assert_array_equal(stored, per_token_int8(key_in))
    assert stored.shape == (1, model.config.num_key_value_heads, ids.shape[1], 64)
    assert not torch.equal(quantized_logits, plain_logits)
    assert float((quantized_logits - plain_logits).abs().max()) < 1.0  # int8 keys and values: a small change


def test_identity_kv_quantizer_changes_nothing() -> None:
    loaded = smollm2_slice()
    model = loaded.model
    ids = torch.tensor([loaded.tokenizer("def f(x):\n    return x + 1\n")["input_ids"]])
    cache = quantized_cache(model, lambda states, kind, layer: states)
    with torch.inference_mode():
        cached = model(input_ids=ids, **cache_kwargs(model, cache)).logits
        plain = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(cached, plain, rtol=1e-5, atol=1e-5)


def test_cache_keyword_follows_the_forward_signature() -> None:
    require_peers()

    class Old(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, past_key_values: object = None) -> None:
            return None

    class New(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, cache: object = None) -> None:
            return None

    assert set(cache_kwargs(Old(), "c")) == {"past_key_values", "use_cache"}
    assert set(cache_kwargs(New(), "c")) == {"cache", "use_cache"}


def test_scheme_kv_checks_its_schemes() -> None:
    with pytest.raises(ValueError, match="unknown element"):
        SchemeKV("int7:row")
