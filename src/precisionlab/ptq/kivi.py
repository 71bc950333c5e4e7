"""KIVI (Liu et al., 2024): 2- or 4-bit asymmetric KV cache, keys per channel, values per token.

States have shape (batch, heads, tokens, head_dim). With n tokens cached, bits b, group size G
and residual length R (a multiple of G):

    keys    the oldest n - (n mod R) tokens are quantized per channel, in groups of G tokens
            (a channel's statistics need a group of tokens, so keys are quantized R at a time,
            as KIVI does); the n mod R most recent stay in fp16
    values  all but the R most recent tokens are quantized per token, in groups of G channels
            along head_dim (one group when head_dim <= G); the R most recent stay in fp16
    a group x:  z = fp16(min x),  s = fp16((max x - z) / (2^b - 1))   (s = 1 when it is 0)
                q = clip(rint((x - z) / s), 0, 2^b - 1),   x_hat = q s + z  (float32)

Unlike the quant library's asymmetric integers (whose range always holds 0, with an integer
zero point), KIVI's range is [min, max] with a float zero: a key channel with values around
+10 would otherwise lose most of its levels.

Bytes are honest: payload b/8 per quantized element, 2 + 2 bytes (fp16 scale and zero) per
group, 2 per fp16 residual element.

Two ways to run a model with it:
- `make_kivi_cache`: a transformers Cache that stores exactly this and serves it to the attention
  during decoding (the prefill's own attention runs on the full-precision states, as KIVI's does).
- `kivi_attention`: one forward pass over a whole text that gives every position t >= prefill
  what decoding token t over a KIVI cache of tokens 0..t would give it. Because KIVI quantizes
  keys R tokens at a time and values once they leave the window, the cache seen at step t is a
  fixed function of t: key j is quantized iff j < (t+1) - ((t+1) mod R), value j iff
  j < t+1-R, the rest are fp16. So the attention scores are chosen elementwise from Q K_q^T and
  Q K_fp16^T, and the values split by a mask: exact, at about twice the attention's cost,
  instead of one forward pass per token (tested equal to the decode with the cache).
`kivi_kl` measures what it does to next-token distributions on long text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab import peers

DEFAULT_BITS = 4
DEFAULT_GROUP = 32
DEFAULT_RESIDUAL = 32


@dataclass(frozen=True)
class KIVIConfig:
    bits: int = DEFAULT_BITS
    group: int = DEFAULT_GROUP
    residual: int = DEFAULT_RESIDUAL

    def __post_init__(self) -> None:
        if self.bits not in (2, 4):
            raise ValueError(f"KIVI quantizes the KV cache to 2 or 4 bits, got {self.bits}")
        if self.group < 1 or self.residual < 1:
            raise ValueError(f"group and residual must be >= 1, got {self.group} and {self.residual}")
        if self.residual % self.group:
            raise ValueError(f"the residual length ({self.residual}) must be a multiple of the group size "
                             f"({self.group}): keys are quantized a residual window at a time")

    def key_tokens(self, n: int) -> int:
        """How many of n cached tokens have quantized keys."""
        return n - n % self.residual

    def value_tokens(self, n: int) -> int:
        """How many of n cached tokens have quantized values."""
        return max(n - self.residual, 0)


BITS = {"int4": 4, "uint4": 4, "4": 4, "int2": 2, "uint2": 2, "2": 2}
"""The bit widths KIVI's scheme may spell (keys and values are asymmetric, with a float zero, whatever the spelling)."""


def kivi_config(scheme: str | None = None, group: int = DEFAULT_GROUP, residual: int = DEFAULT_RESIDUAL) -> KIVIConfig:
    """A config from a bit width spelled as a scheme element (int4 / uint4 / int2 / uint2 / 4 / 2), nothing else:
    KIVI's groups and residual window are its `group` and `residual`, not a scheme's granularity."""
    if scheme is None:
        return KIVIConfig(DEFAULT_BITS, group, residual)
    text = str(scheme).strip().lower()
    head = text.split(":")[0]
    if head not in BITS:
        raise ValueError(f"KIVI quantizes the KV cache to 2 or 4 bits (asymmetric); scheme {scheme!r} is not int4 or "
                         "int2")
    if text != head:
        raise ValueError(f"KIVI takes a bit width only (int2 or int4), got {scheme!r}: its groups and residual window "
                         "are the options group= and residual=, and its keys and values are always asymmetric")
    return KIVIConfig(BITS[head], group, residual)


def quantize_groups(x: Any, bits: int, group: int, axis: int) -> Any:
    """KIVI's asymmetric rule (module docstring) over groups of `group` along `axis` (torch, float32 result)."""
    torch = peers.torch("KIVI")
    t = torch.as_tensor(x, dtype=torch.float32)
    moved = t.movedim(axis, -1)
    size = moved.shape[-1]
    pad = (-size) % group if size > group else 0
    g = group if size > group else size
    if pad:  # a ragged last group: repeat its last element (no effect on min / max)
        moved = torch.cat([moved, moved[..., -1:].expand(*moved.shape[:-1], pad)], dim=-1)
    blocks = moved.reshape(*moved.shape[:-1], -1, g)
    lo = blocks.amin(dim=-1, keepdim=True).half().float()
    hi = blocks.amax(dim=-1, keepdim=True)
    levels = float(2**bits - 1)
    scale = ((hi - lo) / levels).half().float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round((blocks - lo) / scale), 0, levels)
    out = (q * scale + lo).reshape(*moved.shape[:-1], -1)[..., :size]
    return out.movedim(-1, axis)


@dataclass(frozen=True)
class CacheBytes:
    payload: int
    scales: int
    """fp16 scales and zeros, 4 bytes per group."""
    residual: int
    fp16: int
    """The same cache all in fp16, for comparison."""

    @property
    def total(self) -> int:
        return self.payload + self.scales + self.residual


def cache_bytes(shape: tuple[int, int, int, int], config: KIVIConfig) -> CacheBytes:
    """Bytes of one layer's KIVI cache holding keys and values of shape (batch, heads, tokens, head_dim)."""
    b, h, n, d = shape
    rows = b * h
    nk, nv = config.key_tokens(n), config.value_tokens(n)
    key_groups = (nk // config.group) * d
    value_groups = nv * -(-d // config.group)
    payload = rows * -(-((nk + nv) * d * config.bits) // 8)
    scales = rows * (key_groups + value_groups) * 4
    residual = rows * ((n - nk) + (n - nv)) * d * 2
    return CacheBytes(payload, scales, residual, rows * 2 * n * d * 2)


def kivi_quantize(keys: Any, values: Any, config: KIVIConfig = KIVIConfig()) -> tuple[Any, Any]:
    """(keys_hat, values_hat) of a whole cache (batch, heads, tokens, head_dim), float32 (torch)."""
    torch = peers.torch("KIVI")
    k = torch.as_tensor(keys, dtype=torch.float32)
    v = torch.as_tensor(values, dtype=torch.float32)
    if k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"keys and values must both be (batch, heads, tokens, head_dim), got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    n = k.shape[2]
    nk, nv = config.key_tokens(n), config.value_tokens(n)
    k_hat = k.half().float()
    v_hat = v.half().float()
    if nk:
        k_hat[:, :, :nk] = quantize_groups(k[:, :, :nk], config.bits, config.group, axis=2)
    if nv:
        v_hat[:, :, :nv] = quantize_groups(v[:, :, :nv], config.bits, config.group, axis=3)
    return k_hat, v_hat


def make_kivi_cache(model: Any, config: KIVIConfig = KIVIConfig()) -> Any:
    """A transformers Cache whose layers store KIVI-quantized states (see `KIVILayer`)."""
    torch = peers.torch("KIVI")
    from transformers.cache_utils import Cache, DynamicLayer

    class KIVILayer(DynamicLayer):
        """Keeps the incoming states in full precision (self.keys / self.values: the sequence length
        transformers reads) and serves the attention the KIVI view of them: the quantized part is
        computed once, when tokens leave the residual window."""

        def __init__(self) -> None:
            super().__init__()
            self.k_hat: Any = None
            self.v_hat: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            first = not self.is_initialized
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            if first:
                self.k_hat = keys[:, :, :0].float()
                self.v_hat = values[:, :, :0].float()
                self._advance(keys, values)
                return keys, values  # the prefill attends to its own states in full precision
            self._advance(keys, values)
            n = keys.shape[2]
            nk, nv = config.key_tokens(n), config.value_tokens(n)
            k = torch.cat([self.k_hat, keys[:, :, nk:].half().float()], dim=2).to(keys.dtype)
            v = torch.cat([self.v_hat, values[:, :, nv:].half().float()], dim=2).to(values.dtype)
            return k, v

        def _advance(self, keys: Any, values: Any) -> None:
            n = keys.shape[2]
            nk, nv = config.key_tokens(n), config.value_tokens(n)
            done_k, done_v = self.k_hat.shape[2], self.v_hat.shape[2]
            if nk > done_k:
                chunk = quantize_groups(keys[:, :, done_k:nk], config.bits, config.group, axis=2)
                self.k_hat = torch.cat([self.k_hat, chunk], dim=2)
            if nv > done_v:
                chunk = quantize_groups(values[:, :, done_v:nv], config.bits, config.group, axis=3)
                self.v_hat = torch.cat([self.v_hat, chunk], dim=2)

    n_layers = int(model.config.get_text_config().num_hidden_layers)
    return Cache(layers=[KIVILayer() for _ in range(n_layers)])


@dataclass
class KIVIResult:
    """Next-token distributions of a decode over a KIVI cache against the full-precision model."""

    kl: np.ndarray
    """KL(reference || KIVI) in nats, one per decoded position."""
    top1_agreement: float
    bytes: CacheBytes
    positions: int


def teacher_forced_logits(model: Any, ids: Any, prefill: int, cache: Any) -> Any:
    """Logits (steps, vocab) at positions prefill-1 .. T-2: prefill, then one token at a time (the text's own)."""
    torch = peers.torch("KIVI")
    from precisionlab.ptq.calibration import cache_keyword

    key = cache_keyword(model)
    out = []
    with torch.no_grad():
        result = model(input_ids=ids[:, :prefill], use_cache=True, **{key: cache})
        out.append(result.logits[0, -1].float())
        for t in range(prefill, ids.shape[1] - 1):
            result = model(input_ids=ids[:, t : t + 1], use_cache=True, **{key: cache})
            out.append(result.logits[0, -1].float())
    return torch.stack(out)


ATTENTION_NAME = "precisionlab_kivi"


def _kivi_attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                            scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """A transformers attention function (same signature and output as eager_attention_forward)."""
    torch = peers.torch("KIVI")
    settings = getattr(module, "precisionlab_kivi", None)
    if settings is None:
        raise RuntimeError("the KIVI attention runs inside ptq.kivi.kivi_attention(model, ...) only")
    config, prefill = settings
    t_len = key.shape[2]
    if prefill is None:  # a layer left out of the selection: every row attends in full precision
        prefill = t_len
    if query.shape[2] != t_len:
        raise ValueError("the KIVI attention emulates a whole text in one forward pass: no cache, no past states")
    n_rep = query.shape[1] // key.shape[1]
    k32, v32 = key.float(), value.float()
    k16, v16 = k32.half().float(), v32.half().float()
    whole = config.key_tokens(t_len)
    kq = k16.clone()
    if whole:
        kq[:, :, :whole] = quantize_groups(k32[:, :, :whole], config.bits, config.group, axis=2)
    vq = quantize_groups(v32, config.bits, config.group, axis=3)
    k32, k16, kq, v32, v16, vq = (x.repeat_interleave(n_rep, dim=1) for x in (k32, k16, kq, v32, v16, vq))
    q = query.float()
    scale = float(scaling) if scaling is not None else q.shape[-1] ** -0.5
    t = torch.arange(t_len)[:, None]
    j = torch.arange(t_len)[None, :]
    n = t + 1  # tokens in the cache when token t is decoded
    decoding = t >= prefill
    key_q = decoding & (j < n - n % config.residual)
    val_q = decoding & (j < n - config.residual)
    scores = q @ k16.transpose(-1, -2)
    head = min(prefill, t_len)  # the prefill's rows attend to the full-precision states
    if head:
        scores[..., :head, :] = q[..., :head, :] @ k32.transpose(-1, -2)
    scores = torch.where(key_q, q @ kq.transpose(-1, -2), scores) * scale
    allowed = j <= t
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            allowed = allowed & attention_mask[..., -t_len:]
        else:
            scores = scores + attention_mask[..., -t_len:].float()
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = (probs * val_q) @ vq + (probs * (~val_q & decoding)) @ v16
    if head:
        out[..., :head, :] = probs[..., :head, :] @ v32
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def kivi_attention(model: Any, config: KIVIConfig = KIVIConfig(), prefill: int = 0,
                   modules: Collection[str] | None = None) -> Iterator[None]:
    """Run the model's attention as decoding over a KIVI cache would (module docstring), for forward passes
    over whole texts without a cache; positions before `prefill` attend in full precision. `modules` (attention
    module names) limits KIVI to those layers: the others attend in full precision (None: every layer)."""
    peers.torch("KIVI")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if prefill < 0:
        raise ValueError(f"prefill must be >= 0, got {prefill}")
    AttentionInterface.register(ATTENTION_NAME, _kivi_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    named = {n: m for n, m in model.named_modules() if hasattr(m, "k_proj") and hasattr(m, "layer_idx")}
    attention = list(named.values())
    if not attention:
        raise ValueError("no attention modules (with k_proj and layer_idx, as transformers' decoders have) found")
    unknown = sorted(set(modules or ()) - set(named))
    if unknown:
        raise ValueError(f"no attention module named {unknown[0]!r}; they look like {next(iter(named))}")
    chosen = set(named) if modules is None else set(modules)
    configs = [c for c in {id(c): c for c in (model.config, model.config.get_text_config())}.values()]
    saved = [c._attn_implementation for c in configs]
    for n, m in named.items():
        m.precisionlab_kivi = (config, int(prefill) if n in chosen else None)
    try:
        for c in configs:
            c._attn_implementation = ATTENTION_NAME
        yield
    finally:
        for c, old in zip(configs, saved, strict=True):
            c._attn_implementation = old
        for m in attention:
            del m.precisionlab_kivi


def kivi_kl(model: Any, ids: Any, prefill: int, config: KIVIConfig = KIVIConfig()) -> KIVIResult:
    """KL(reference || KIVI) of the next-token distributions at the positions decoded after a prefill of
    `prefill` tokens of `ids` (1, T), against the model's own (two forward passes: `kivi_attention`)."""
    torch = peers.torch("KIVI")
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"ids must be one sequence of shape (1, T), got {tuple(ids.shape)}")
    if not 0 < prefill < ids.shape[1] - 1:
        raise ValueError(f"prefill must leave at least one token to decode: 0 < prefill < {ids.shape[1] - 1}")
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits[0, prefill : ids.shape[1] - 1].float()
        with kivi_attention(model, config, prefill):
            cand = model(input_ids=ids, use_cache=False).logits[0, prefill : ids.shape[1] - 1].float()
    logp = torch.log_softmax(ref.double(), dim=-1)
    logq = torch.log_softmax(cand.double(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(dim=-1).numpy()
    agree = float((ref.argmax(-1) == cand.argmax(-1)).double().mean())
    cfg = model.config.get_text_config()
    heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    n = ids.shape[1] - 1
    per_layer = cache_bytes((1, heads, n, head_dim), config)
    layers = int(cfg.num_hidden_layers)
    total = CacheBytes(per_layer.payload * layers, per_layer.scales * layers, per_layer.residual * layers,
                       per_layer.fp16 * layers)
    return KIVIResult(np.maximum(kl, 0.0), agree, total, int(kl.size))
