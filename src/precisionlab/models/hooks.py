"""Activation and KV-cache quantization hooks (fake quantization, exact to the quant library).

Activations (W8A8-style): `activation_quantization(model, "int8:row")` registers a forward
pre-hook on each selected Linear that replaces its input x, seen as (tokens, features), by
`quant.quantize_dequantize(x, scheme)`: "int8:row" is per-token dynamic int8 (one fp16 scale
per token, amax / 127), "e4m3:row" per-token fp8, "mxfp8" 32-element MX blocks, "int8" one
dynamic scale per call (which then spans every token of the batch, padding included: prefer
per-token schemes). Unlike weight quantization this costs work on every call.

KV cache: `quantized_cache(model, quantizer)` returns a transformers DynamicCache whose
`update` passes the new key and value states through `quantizer(states, kind, layer)` as they
enter the cache; attention then reads the quantized states for every position (the prefill
of a sequence behaves as token-by-token decoding with a quantized cache). Pass it to the
model's forward with `cache_kwargs(model, cache)` (transformers 5 names the argument `cache`,
4.x `past_key_values`). `SchemeKV("int8:row")` quantizes each head's vector of each token
(groups along head_dim); a quantizer that groups across tokens (KIVI's per-channel keys)
keeps its own residual window: it is called with the 4-D (batch, heads, tokens, head_dim)
states of each update and returns their fake-quantized values.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from precisionlab import peers
from precisionlab.models.weights import LINEAR, layer_kind, linear_layers
from precisionlab.quant import parse_scheme, quantize_dequantize


def fake_quantize(x: Any, scheme: str) -> Any:
    """quantize_dequantize of a torch tensor over its last axis, back as a tensor of x's dtype and device."""
    torch = peers.torch()
    flat = x.detach().reshape(-1, x.shape[-1])
    values = quantize_dequantize(flat.float().cpu().numpy(), scheme)
    return torch.from_numpy(values).to(device=x.device, dtype=x.dtype).reshape(x.shape)


@contextlib.contextmanager
def activation_quantization(model: Any, scheme: str, include: Sequence[str] = (),
                            exclude: Sequence[str] | None = None) -> Iterator[list[str]]:
    """Quantize the inputs of the selected Linear layers while the context is open; yields their names."""
    canonical = str(parse_scheme(scheme))
    layers = {n: m for n, m in linear_layers(model, include, exclude).items() if layer_kind(m) == LINEAR}

    def hook(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (fake_quantize(args[0], canonical), *args[1:])

    handles = [module.register_forward_pre_hook(hook) for module in layers.values()]
    try:
        yield list(layers)
    finally:
        for handle in handles:
            handle.remove()


class KVQuantizer(Protocol):
    def __call__(self, states: Any, kind: str, layer: int) -> Any:
        """Fake-quantized states (same shape, dtype and device); kind is "key" or "value"."""
        ...


@dataclass(frozen=True)
class SchemeKV:
    """Keys and values quantized with a scheme over head_dim, per (batch, head, token)."""

    key_scheme: str
    value_scheme: str | None = None
    """Defaults to the key scheme."""

    def __post_init__(self) -> None:
        parse_scheme(self.key_scheme)
        if self.value_scheme is not None:
            parse_scheme(self.value_scheme)

    def __call__(self, states: Any, kind: str, layer: int) -> Any:
        scheme = self.key_scheme if kind == "key" or self.value_scheme is None else self.value_scheme
        return fake_quantize(states, scheme)


def quantized_cache(model: Any, quantizer: KVQuantizer) -> Any:
    """A DynamicCache for `model` whose update() quantizes new keys and values on entry."""
    transformers = peers.transformers()
    cache = transformers.DynamicCache(config=model.config)
    original = cache.update

    def update(key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        return original(quantizer(key_states, "key", layer_idx), quantizer(value_states, "value", layer_idx),
                        layer_idx, *args, **kwargs)

    cache.update = update
    return cache


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands a cache to this model's forward, with use_cache=True."""
    parameters = inspect.signature(model.forward).parameters
    name = "cache" if "cache" in parameters else "past_key_values"
    return {name: cache, "use_cache": True}
