"""Scenario facts for the advisor: every number its templates print, computed here.

Each function takes the scenario's Inputs and returns a dict of named facts (plus "format",
the recommendation), from the format engine (`get_format`, `ulp`, `decode`) and the capacity
model (bytes, batch capacity, roofline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab.advise.format_choice import (
    ALL_FP8,
    PEAK_KEY,
    ROLE_NOTES,
    candidates,
    decades_at,
    template_fields,
    unit_roundoff,
)
from precisionlab.capacity.memory import (
    DEFAULT_RESERVE,
    GB,
    GiB,
    cache_exceeds_weights_context,
    head_split,
    max_batch,
)
from precisionlab.capacity.models import ModelShape, context_label, get_model
from precisionlab.capacity.roofline import decode_step, prefill
from precisionlab.capacity.schemes import (
    KV_SCHEMES,
    WEIGHT_SCHEMES,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    weight_bytes,
)
from precisionlab.formats import IntFormat, get_format
from precisionlab.hardware import Accelerator
from precisionlab.rounding import decode, ulp


@dataclass(frozen=True)
class Inputs:
    """What a scenario may use: the target accelerator and serving choices, an optional model override,
    and the custom scenario's options."""

    accelerator: Accelerator
    gpu_key: str
    model: ModelShape | None = None
    batch: int = 32
    reserve: float = DEFAULT_RESERVE
    tp: int = 1
    context: int = 8192
    long_context: int = 131072
    role: str = "activations"
    range_decades: float = 4.0
    rel_error: float = 1e-2
    bound: str = "memory"


def rate(acc: Accelerator, key: str) -> str:
    """A dense peak as text, or a statement that the device lists none."""
    if key not in acc.peak_tflops:
        return f"nothing ({acc.name} lists no {key} rate)"
    return f"{acc.peak_tflops[key]:g} {'TOP/s' if key.startswith('int') else 'TFLOP/s'}"


def pretrain_facts(inp: Inputs) -> dict[str, Any]:
    """Mixed-precision training of a large model: Adam with bf16 weights and grads, fp32 master copy and
    moments: bytes/param = 2 · bf16 + 3 · fp32 (master, m, v)."""
    model = inp.model or get_model("llama3_70b")
    acc = inp.accelerator
    params = model.params().total
    bf16, fp32 = get_format("bf16").bits / 8, get_format("fp32").bits / 8
    bytes_per_param = 2 * bf16 + 3 * fp32
    total = bytes_per_param * params
    return {
        "format": "bf16",
        "model": model.name, "params_b": params / 1e9, "gpu": acc.name, "gpu_mem": acc.memory_gb,
        "rate_bf16": rate(acc, "bf16"), "rate_tf32": rate(acc, "tf32"), "rate_fp32": rate(acc, "fp32"),
        "rate_fp8": rate(acc, "fp8"),
        "bytes_per_param": bytes_per_param, "train_tb": total / 1e12,
        "min_gpus": math.ceil(total / acc.memory_bytes),
        "bf16_decades": decades_at(get_format("bf16"), 1.0),
        "noise_ratio": unit_roundoff(get_format("bf16")) / unit_roundoff(get_format("fp16")),
    }


def serve_facts(inp: Inputs) -> dict[str, Any]:
    """Serving a model on one GPU: weight bytes, batch-1 decode and prefill in bf16 against int4 (g128)."""
    model = inp.model or get_model("llama2_13b")
    acc = inp.accelerator
    ctx = min(inp.context, model.max_context)
    one_bf16 = decode_step(model, acc, "bf16", "fp16", ctx, 1)
    one_int4 = decode_step(model, acc, "int4", "fp16", ctx, 1)
    int4 = WEIGHT_SCHEMES["int4"]
    int4_format = get_format(int4.value_format)
    if not isinstance(int4_format, IntFormat):
        raise TypeError(f"the int4 weight scheme stores {int4.value_format}, not an integer format")
    levels = 1 << int4_format.bits  # asymmetric with a zero point: every code is used, [min, max] in 2^b - 1 steps
    prompt = ctx
    batch_int4 = max_batch(model, acc, "int4", "fp8", ctx, inp.reserve).batch
    fit_note = "" if batch_int4 else (f". Even int4 weights leave no room for a {ctx}-token sequence on one "
                                      f"{acc.memory_gb:g} GB device: spread the model over several (--tp)")
    bf16_bytes = weight_bytes(model, "bf16")
    bf16_note = "" if bf16_bytes <= acc.memory_bytes else (
        f" (a bound only: {bf16_bytes / GB:.3g} GB of bf16 weights do not fit in {acc.memory_gb:g} GB)")
    return {
        "format": "int4 (W4A16, g128)",
        "model": model.name, "gpu": acc.name, "ctx": ctx, "int4_group": int4.group,
        "levels": levels, "steps": levels - 1, "int4_rel": 1 / (levels - 1), "int4_bits": int4.bits_per_value,
        "int4_zero_bits": int4_format.bits,  # quant stores the zero point at the element's width (GPTQ / AWQ)
        "w_bf16": weight_bytes(model, "bf16") / GB, "w_int4": weight_bytes(model, "int4") / GB,
        "gpu_mem": acc.memory_gb,
        "intensity": one_bf16.roof.intensity, "ridge": one_bf16.roof.ridge,
        "tps_bf16": one_bf16.tokens_per_s, "tps_int4": one_int4.tokens_per_s,
        "speedup": one_int4.tokens_per_s / one_bf16.tokens_per_s,
        "batch_bf16": max_batch(model, acc, "bf16", "fp8", ctx, inp.reserve).batch,
        "batch_int4": batch_int4, "fit_note": fit_note, "bf16_note": bf16_note,
        "prompt": prompt,
        "ttft_bf16_ms": 1e3 * prefill(model, acc, "bf16", "fp16", prompt).time,
        "ttft_int4_ms": 1e3 * prefill(model, acc, "int4", "fp16", prompt).time,
        "rate_fp8": rate(acc, "fp8"), "rate_bf16": rate(acc, "bf16"),
    }


# The stagnation example of the “Precision & Quantization” course notes: summing COUNT terms of TERM in a
# per-step-rounded fp16 sum.
STAGNATION_TERM = 1e-2
STAGNATION_COUNT = 10**6


def stall_point(term: float, fmt: str) -> float:
    """Smallest power of two S at which S + term rounds back to S: ulp(S)/2 >= term (at a tie,
    ulp(S)/2 == term, round-to-nearest-even keeps S, whose mantissa is even)."""
    s = 2.0 ** math.floor(math.log2(term))
    while float(ulp(s, fmt)) / 2 < term:
        s *= 2
    return s


def reduction_facts(inp: Inputs) -> dict[str, Any]:
    """A reduction / LayerNorm statistic: fp16 sum stagnation and sum-of-squares overflow."""
    model = inp.model or get_model("llama3_8b")
    fp16 = get_format("fp16")
    stall = stall_point(STAGNATION_TERM, "fp16")
    exact = STAGNATION_TERM * STAGNATION_COUNT
    storage_bytes = get_format("bf16").bits / 8
    return {
        "format": "fp32 accumulator",
        "term": STAGNATION_TERM, "count": float(STAGNATION_COUNT), "stall": stall,
        "half_ulp": float(ulp(stall, "fp16")) / 2, "stall_err": 1 - stall / exact,
        "stall_fp32": stall_point(STAGNATION_TERM, "fp32"),
        "hidden": model.hidden, "model": model.name,
        "overflow_rms": math.sqrt(fp16.max_finite / model.hidden),
        "storage_bytes": storage_bytes, "reduce_intensity": 1 / storage_bytes,
        "ridge": inp.accelerator.ridge_flop_per_byte("bf16"), "gpu": inp.accelerator.name,
        "sqrt_n_u": math.sqrt(STAGNATION_COUNT) * unit_roundoff(get_format("fp32")),
    }


def kv_facts(inp: Inputs) -> dict[str, Any]:
    """A KV cache at long context: bytes, batch capacity and decode speed in fp16 against fp8."""
    model = inp.model or get_model("llama3_8b")
    head_split(model, inp.tp)  # an uneven split is an error that names the degrees that work
    acc = inp.accelerator
    ctx = inp.long_context
    fit16 = max_batch(model, acc, "bf16", "fp16", ctx, inp.reserve, inp.tp)
    fit8 = max_batch(model, acc, "bf16", "fp8", ctx, inp.reserve, inp.tp)
    dbatch = max(1, min(inp.batch, fit16.batch or 1))
    cross_1 = cache_exceeds_weights_context(model, "bf16", "fp16", 1)
    cross_b = cache_exceeds_weights_context(model, "bf16", "fp16", inp.batch)
    return {
        "format": "fp8 (e4m3) KV cache",
        "model": model.name, "gpu": acc.name, "ctx": ctx, "ctx_label": context_label(ctx),
        "past_max": (f"; past {model.name}'s {model.max_context}-token maximum, so a long-context variant"
                     if ctx > model.max_context else ""),
        "e4m3_decades": decades_at(get_format("e4m3"), 1.0),
        "kv_fp16_kib": kv_bytes_per_token(model, "fp16") / 1024, "kv_fp8_kib": kv_bytes_per_token(model, "fp8") / 1024,
        "kv_int8_kib": kv_bytes_per_token(model, "int8") / 1024, "int8_group": KV_SCHEMES["int8"].group,
        "seq_fp16_gib": kv_bytes_per_sequence(model, "fp16", ctx) / GiB,
        "seq_fp8_gib": kv_bytes_per_sequence(model, "fp8", ctx) / GiB,
        "batch_fp16": fit16.batch, "batch_fp8": fit8.batch,
        "w_gb": weight_bytes(model, "bf16") / GB, "batch": inp.batch,
        "cross_1": cross_1, "cross_b": cross_b,
        "cross_1_text": _crossover_text(cross_1, model), "cross_b_text": _crossover_text(cross_b, model),
        "dbatch": dbatch,
        "tps_fp16": decode_step(model, acc, "bf16", "fp16", ctx, dbatch, inp.tp).tokens_per_s,
        "tps_fp8": decode_step(model, acc, "bf16", "fp8", ctx, dbatch, inp.tp).tokens_per_s,
    }


def _crossover_text(context: float, model: ModelShape) -> str:
    """'from N tokens', or 'never' with the reason (a sliding window caps the cache)."""
    if math.isfinite(context):
        return f"from {context:.0f} tokens"
    window = f"its {model.sliding_window}-token sliding window caps the cache" if model.sliding_window else (
        "not within the context searched")
    return f"never ({window})"


def fp8_portability_facts(inp: Inputs) -> dict[str, Any]:
    """The OCP / FNUZ trap: decode every code in both E4M3 encodings and compare."""
    codes = np.arange(256, dtype=np.uint8)
    ocp = np.asarray(decode(codes, "e4m3"), dtype=np.float64)
    fnuz = np.asarray(decode(codes, "e4m3fnuz"), dtype=np.float64)
    both = np.isfinite(ocp) & np.isfinite(fnuz) & (ocp != 0) & (fnuz != 0)
    ratios = np.unique(ocp[both] / fnuz[both])
    nan_code = int(np.flatnonzero(np.isnan(fnuz))[0])
    ocp_meaning = "-0" if ocp[nan_code] == 0 and math.copysign(1, ocp[nan_code]) < 0 else f"{ocp[nan_code]:g}"
    model = inp.model or get_model("deepseek_v3")
    bf16_bytes, fp8_bytes = weight_bytes(model, "bf16"), weight_bytes(model, "fp8")
    target = inp.accelerator.fp8_formats[0]  # the resolved device's own: any alias or override works
    return {
        "format": "bf16 + format tag, quantize at load",
        "code_ratio": float(ratios[0]) if len(ratios) == 1 else math.nan, "distinct_ratios": len(ratios),
        "finite_codes": int(both.sum()), "nan_code_hex": f"0x{nan_code:02X}", "ocp_meaning": ocp_meaning,
        "model": model.name, "ckpt_bf16_gb": bf16_bytes / GB, "ckpt_fp8_gb": fp8_bytes / GB,
        "ckpt_ratio": bf16_bytes / fp8_bytes, "gpu": inp.accelerator.name, "target_fp8": target,
        "requant_s": (bf16_bytes + fp8_bytes) / inp.accelerator.bandwidth_bytes_per_s,
    }


def custom_facts(inp: Inputs) -> dict[str, Any]:
    """The custom scenario: the best candidate, its margins and the next wider fallback."""
    found = candidates(inp.accelerator, inp.gpu_key, inp.role, inp.range_decades, inp.rel_error, inp.bound)
    if not found:
        raise ValueError(f"no format meets {inp.range_decades:g} decades at relative error {inp.rel_error:g} "
                         f"for {inp.bound}-bound {inp.role} on {inp.accelerator.name}")
    best = found[0]
    wider = [c for c in found[1:] if c.roundoff <= best.roundoff and c.decades >= best.decades]
    if wider:
        fallback = wider[0].name
    elif best.name != "fp64":
        fallback = "fp64"
    else:  # the widest format already: revert to an algorithm, not a format
        fallback = ("nothing wider exists (fp64 is the widest format here): compensated sums (Kahan, pairwise) or "
                    "exact arithmetic (math.fsum, rationals)")
    fmt = get_format(best.name)
    ref = get_format("bf16")
    scaled = isinstance(fmt, IntFormat) or fmt.bits <= 8
    if inp.bound == "compute":
        throughput = (f"compute-bound: {inp.accelerator.name} runs {best.name} at "
                      f"{rate(inp.accelerator, PEAK_KEY[best.name])} against {rate(inp.accelerator, 'bf16')} for bf16")
    else:
        throughput = (f"memory-bound: {best.bits} bits per value against {ref.bits} for bf16, "
                      f"{best.bits / ref.bits:g}× the bytes to move")
    notes = [ROLE_NOTES[inp.role].format_map(template_fields())]
    if scaled:
        notes.append("needs a scale per tensor or block (range is relative to it)")
    if best.name in ALL_FP8 or inp.role == "checkpoint":
        notes.append("tag the file with its exact encoding (OCP e4m3 and FNUZ e4m3 differ by a factor of two)")
    return {
        "format": best.name, "role": inp.role, "bound": inp.bound, "need_decades": inp.range_decades,
        "need_rel": inp.rel_error, "have_decades": best.decades, "max_finite": fmt.max_finite,
        "roundoff": best.roundoff, "range_margin": best.decades / inp.range_decades if inp.range_decades else math.inf,
        "range_margin_text": (f", a margin of ×{best.decades / inp.range_decades:.3g}" if inp.range_decades
                              else "; no range was asked for"),
        "precision_margin": inp.rel_error / best.roundoff, "throughput_text": throughput,
        "notes": "; ".join(notes), "fallback": fallback,
        "gpu": inp.accelerator.name, "considered": ", ".join(c.name for c in found),
    }


__all__ = [
    "STAGNATION_COUNT", "STAGNATION_TERM", "Inputs", "custom_facts", "fp8_portability_facts", "kv_facts",
    "pretrain_facts", "rate", "reduction_facts", "serve_facts", "stall_point",
]
