"""Decode and prefill on the roofline: time = max(bytes / bandwidth, FLOPs / peak).

    intensity  = FLOPs / bytes                     ridge = peak / bandwidth
    decode     : bytes = weights read + batch · KV(context), FLOPs = batch · (2 · matmul params + attention)
                 tokens/s = batch / time
    prefill    : a prompt of P tokens reads the weights once and writes P tokens of cache;
                 FLOPs = 2 · matmul params · P + causal attention; time to first token = time.
Matmul precision: fp8 weights run W8A8 on the fp8 matrix path when the device has one; every
other weight scheme is weight-only (dequantized to bf16, W4A16-style) and runs at the bf16 rate.
Tensor parallelism divides bytes and FLOPs per device by tp (weights evenly, KV per
`memory.kv_shard_fraction`) and ignores the all-reduce cost: an upper bound on the speed-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionlab.capacity.memory import check_tp, kv_shard_fraction
from precisionlab.capacity.models import ModelShape
from precisionlab.capacity.schemes import StorageScheme, decode_weight_bytes, kv_bytes_per_sequence, kv_bytes_per_token
from precisionlab.capacity.schemes import weight_scheme as _weight_scheme
from precisionlab.hardware import Accelerator


@dataclass(frozen=True)
class Roofline:
    """One step's bytes and FLOPs (per device) against one device's ceilings."""

    bytes: float
    flops: float
    bandwidth: float  # bytes/s
    peak: float  # FLOP/s

    @property
    def memory_time(self) -> float:
        return self.bytes / self.bandwidth

    @property
    def compute_time(self) -> float:
        return self.flops / self.peak

    @property
    def time(self) -> float:
        return max(self.memory_time, self.compute_time)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def ridge(self) -> float:
        return self.peak / self.bandwidth

    @property
    def bound(self) -> str:
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def attained_flops(self) -> float:
        return self.flops / self.time


def roofline(bytes_moved: float, flops: float, accelerator: Accelerator, precision: str = "bf16") -> Roofline:
    if bytes_moved <= 0:
        raise ValueError(f"bytes moved must be positive, got {bytes_moved}")
    return Roofline(bytes=bytes_moved, flops=flops, bandwidth=accelerator.bandwidth_bytes_per_s,
                    peak=accelerator.peak(precision))


def bare_decode(params: float, bits_per_param: float, accelerator: Accelerator, precision: str = "bf16") -> Roofline:
    """Batch-1 decode of a model that is nothing but `params` weights: 2 FLOPs per weight,
    params · bits / 8 bytes read per token (the course notes' worked example)."""
    return roofline(params * bits_per_param / 8, 2 * params, accelerator, precision)


def matmul_precision(weights: str | StorageScheme, accelerator: Accelerator) -> str:
    """'fp8' for fp8 weights on a device with an fp8 matrix rate, else 'bf16' (rule in the docstring)."""
    s = _weight_scheme(weights)
    if s.value_format in ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz") and "fp8" in accelerator.peak_tflops:
        return "fp8"
    return "bf16"


@dataclass(frozen=True)
class DecodeStep:
    batch: int
    context: int
    tp: int
    roof: Roofline

    @property
    def tokens_per_s(self) -> float:
        """All sequences together."""
        return self.batch / self.roof.time

    @property
    def tokens_per_s_per_seq(self) -> float:
        return 1 / self.roof.time


def decode_step(model: ModelShape, accelerator: Accelerator, weights: str | StorageScheme, kv: str | StorageScheme,
                context: int, batch: int = 1, tp: int = 1) -> DecodeStep:
    """One decode step of `batch` sequences at `context` tokens (formulas in the module docstring)."""
    check_tp(tp)
    if batch <= 0 or context < 0:
        raise ValueError(f"batch must be positive and context non-negative, got {batch} and {context}")
    kv_bytes = batch * kv_bytes_per_sequence(model, kv, context) * kv_shard_fraction(model, tp)
    bytes_moved = decode_weight_bytes(model, weights, batch) / tp + kv_bytes
    flops = batch * (2 * model.params().matmul_active + model.attention_flops_per_token(context)) / tp
    roof = roofline(bytes_moved, flops, accelerator, matmul_precision(weights, accelerator))
    return DecodeStep(batch=batch, context=context, tp=tp, roof=roof)


def causal_attended_tokens(prompt: int, window: int | None) -> int:
    """Sum over prompt positions i = 1..P of the tokens position i attends to, min(i, window)."""
    if window is None or prompt <= window:
        return prompt * (prompt + 1) // 2
    return window * (window + 1) // 2 + (prompt - window) * window


def prefill(model: ModelShape, accelerator: Accelerator, weights: str | StorageScheme, kv: str | StorageScheme,
            prompt: int, tp: int = 1) -> Roofline:
    """Processing a prompt of `prompt` tokens in one pass; `.time` is the time to first token."""
    check_tp(tp)
    if prompt <= 0:
        raise ValueError(f"prompt length must be positive, got {prompt}")
    attended = causal_attended_tokens(prompt, model.sliding_window)
    flops = (2 * model.params().matmul_active * prompt + model.attention_flops_per_token(1) * attended) / tp
    written = prompt * kv_bytes_per_token(model, kv) * kv_shard_fraction(model, tp)
    bytes_moved = decode_weight_bytes(model, weights, batch=prompt) / tp + written
    return roofline(bytes_moved, flops, accelerator, matmul_precision(weights, accelerator))


__all__ = [
    "DecodeStep", "Roofline", "bare_decode", "causal_attended_tokens", "decode_step", "matmul_precision",
    "prefill", "roofline",
]
