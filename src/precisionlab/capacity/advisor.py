"""The format advisor: a scenario in, a recommended format out, every column argued with numbers.

The rules are data: `RULES` is one table of rows, one per scenario, whose cells are text
templates. Templates hold no numbers of their own; every number is a `{field}` filled from
facts computed by the format engine (`get_format(...)` limits, `ulp`, `decode`) and the
capacity model (bytes, batch capacity, roofline). To add a scenario, add a row and a
function that computes its facts.

Template fields: `{fmt[NAME].prop}` is any registered format's property (max_finite,
min_normal, bias, man_bits, decimal_digits, ...), `{u[NAME]}` its unit roundoff eps/2, and
every other field is a scenario fact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.capacity.memory import DEFAULT_RESERVE, GB, GiB, cache_exceeds_weights_context, max_batch
from precisionlab.capacity.models import ModelShape, get_model
from precisionlab.capacity.roofline import decode_step, prefill
from precisionlab.capacity.schemes import (
    KV_SCHEMES,
    WEIGHT_SCHEMES,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    weight_bytes,
)
from precisionlab.formats import FloatFormat, Format, IntFormat, get_format, list_formats
from precisionlab.hardware import Accelerator
from precisionlab.rounding import decode, ulp

# The fp8 encoding each accelerator's matrix cores implement. Source: seeds/000 and AMD's HIP
# low-precision types reference: gfx940/941/942 (MI300X) implement the FNUZ variants and not
# OCP fp8; Hopper, Ada and Blackwell implement OCP E4M3/E5M2.
FP8_ENCODING: dict[str, tuple[str, str]] = {"mi300x": ("e4m3fnuz", "e5m2fnuz")}
OCP_FP8 = ("e4m3", "e5m2")

# The peak-rate key a format's matrix path is listed under in `hardware` presets.
PEAK_KEY: dict[str, str] = {
    "fp64": "fp64", "fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "e4m3": "fp8", "e5m2": "fp8",
    "e4m3fnuz": "fp8", "e5m2fnuz": "fp8", "int8": "int8", "e2m1": "fp4",
}

# Formats the custom scenario considers (the chooser ranks them).
CANDIDATES = ("fp64", "fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "int8", "int4", "e2m1")
COMPUTE_ONLY = ("tf32",)  # a matrix-core input mode, not a storage format
ROLES = ("weights", "activations", "gradients", "kv_cache", "accumulator", "optimizer_state", "checkpoint")
BOUNDS = ("memory", "compute")

# What each tensor role adds to the custom scenario's risk column (templates: no typed numbers).
ROLE_NOTES: dict[str, str] = {
    "weights": "weights are well-behaved: per-channel or per-group scales, judged by a task-level eval",
    "activations": "activations carry outlier channels: per-token or tile scales rather than one per tensor",
    "gradients": "small gradients underflow first (fp16 flushes below {fmt[fp16].min_subnormal:.3g}): a loss "
                 "scale for narrow-exponent formats",
    "kv_cache": "keys carry outlier channels: per-channel key scales, as KIVI uses",
    "accumulator": "accumulate wide whatever the storage: a narrow running sum stalls once half an ulp exceeds "
                   "the next term",
    "optimizer_state": "Adam's second moment spans many decades: fp32, or block-scaled states with their own "
                       "scales",
    "checkpoint": "a file outlives the hardware it was written on: record the exact encoding",
}


def fp8_formats_for(gpu_key: str) -> tuple[str, str]:
    """(E4M3, E5M2) as the target's hardware encodes them."""
    return FP8_ENCODING.get(gpu_key, OCP_FP8)


def float_format(name: str) -> FloatFormat:
    """A registered float format (TypeError for an integer one)."""
    fmt = get_format(name)
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"{name} is not a floating-point format")
    return fmt


def unit_roundoff(fmt: Format) -> float:
    """Largest relative rounding error: eps/2 for floats (normal range); half a step at full scale for
    integers (symmetric quantization with qmax = 2^(b-1) - 1), 1 / (2·qmax)."""
    if isinstance(fmt, IntFormat):
        return 1 / (2 * fmt.symmetric_max)
    return fmt.eps / 2


def decades_at(fmt: Format, rel_error: float) -> float:
    """Decades of magnitude over which a value keeps relative error <= rel_error (0 if never).

    Float: the normal range log10(max_finite / min_normal), when eps/2 <= rel_error.
    Integer with a scale: |x| >= step / (2·rel_error) up to qmax steps, log10(2·rel_error·qmax).
    """
    if isinstance(fmt, IntFormat):
        return max(0.0, math.log10(2 * rel_error * fmt.symmetric_max))
    if unit_roundoff(fmt) > rel_error:
        return 0.0
    return math.log10(fmt.max_finite) - math.log10(fmt.min_normal)


class _Formats(Mapping[str, Format]):
    """Every registered format by name, for `{fmt[NAME].prop}` template fields."""

    def __getitem__(self, name: str) -> Format:
        return get_format(name)

    def __iter__(self) -> Any:
        return iter(f.name for f in list_formats())

    def __len__(self) -> int:
        return len(list_formats())


class _Roundoff(Mapping[str, float]):
    """Unit roundoff by format name, for `{u[NAME]}` template fields."""

    def __getitem__(self, name: str) -> float:
        return unit_roundoff(get_format(name))

    def __iter__(self) -> Any:
        return iter(f.name for f in list_formats())

    def __len__(self) -> int:
        return len(list_formats())


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


@dataclass(frozen=True)
class Rule:
    """One row of the rules table: templates for every column, and the facts function that fills them."""

    scenario: str
    title: str
    recommend: str
    range: str
    precision: str
    throughput: str
    risk: str
    revert: str
    facts: Callable[[Inputs], dict[str, Any]] = field(repr=False, compare=False)

    COLUMNS = ("recommend", "range", "precision", "throughput", "risk", "revert")


@dataclass(frozen=True)
class Advice:
    scenario: str
    title: str
    recommend: str
    range: str
    precision: str
    throughput: str
    risk: str
    revert: str
    format: str
    facts: dict[str, Any]


def rate(acc: Accelerator, key: str) -> str:
    """A dense peak as text, or a statement that the device lists none."""
    if key not in acc.peak_tflops:
        return f"nothing ({acc.name} lists no {key} rate)"
    return f"{acc.peak_tflops[key]:g} {'TOP/s' if key.startswith('int') else 'TFLOP/s'}"


# ---- facts, one function per scenario -----------------------------------------------------------------

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
    qmax = int4_format.symmetric_max
    prompt = ctx
    batch_int4 = max_batch(model, acc, "int4", "fp8", ctx, inp.reserve).batch
    fit_note = "" if batch_int4 else (f". Even int4 weights leave no room for a {ctx}-token sequence on one "
                                      f"{acc.memory_gb:g} GB device: spread the model over several (--tp)")
    return {
        "format": "int4 (W4A16, g128)",
        "model": model.name, "gpu": acc.name, "ctx": ctx, "int4_group": int4.group, "qmax": qmax,
        "int4_rel": 1 / (2 * qmax), "int4_bits": int4.bits_per_value,
        "w_bf16": weight_bytes(model, "bf16") / GB, "w_int4": weight_bytes(model, "int4") / GB,
        "gpu_mem": acc.memory_gb,
        "intensity": one_bf16.roof.intensity, "ridge": one_bf16.roof.ridge,
        "tps_bf16": one_bf16.tokens_per_s, "tps_int4": one_int4.tokens_per_s,
        "speedup": one_int4.tokens_per_s / one_bf16.tokens_per_s,
        "batch_bf16": max_batch(model, acc, "bf16", "fp8", ctx, inp.reserve).batch,
        "batch_int4": batch_int4, "fit_note": fit_note,
        "prompt": prompt,
        "ttft_bf16_ms": 1e3 * prefill(model, acc, "bf16", "fp16", prompt).time,
        "ttft_int4_ms": 1e3 * prefill(model, acc, "int4", "fp16", prompt).time,
        "rate_fp8": rate(acc, "fp8"), "rate_bf16": rate(acc, "bf16"),
    }


# The seed's stagnation example: summing COUNT terms of TERM in a per-step-rounded fp16 sum.
STAGNATION_TERM = 1e-2
STAGNATION_COUNT = 10**6


def stall_point(term: float, fmt: str) -> float:
    """Smallest power of two S at which S + term rounds back to S: ulp(S)/2 > term."""
    s = 2.0 ** math.floor(math.log2(term))
    while float(ulp(s, fmt)) / 2 <= term:
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
    acc = inp.accelerator
    ctx = inp.long_context
    fit16 = max_batch(model, acc, "bf16", "fp16", ctx, inp.reserve, inp.tp)
    fit8 = max_batch(model, acc, "bf16", "fp8", ctx, inp.reserve, inp.tp)
    dbatch = max(1, min(inp.batch, fit16.batch or 1))
    return {
        "format": "fp8 (e4m3) KV cache",
        "model": model.name, "gpu": acc.name, "ctx": ctx, "ctx_label": f"{ctx // 1024}k",
        "past_max": (f"; past {model.name}'s {model.max_context}-token maximum, so a long-context variant"
                     if ctx > model.max_context else ""),
        "e4m3_decades": decades_at(get_format("e4m3"), 1.0),
        "kv_fp16_kib": kv_bytes_per_token(model, "fp16") / 1024, "kv_fp8_kib": kv_bytes_per_token(model, "fp8") / 1024,
        "kv_int8_kib": kv_bytes_per_token(model, "int8") / 1024, "int8_group": KV_SCHEMES["int8"].group,
        "seq_fp16_gib": kv_bytes_per_sequence(model, "fp16", ctx) / GiB,
        "seq_fp8_gib": kv_bytes_per_sequence(model, "fp8", ctx) / GiB,
        "batch_fp16": fit16.batch, "batch_fp8": fit8.batch,
        "w_gb": weight_bytes(model, "bf16") / GB, "batch": inp.batch,
        "cross_1": cache_exceeds_weights_context(model, "bf16", "fp16", 1),
        "cross_b": cache_exceeds_weights_context(model, "bf16", "fp16", inp.batch),
        "dbatch": dbatch,
        "tps_fp16": decode_step(model, acc, "bf16", "fp16", ctx, dbatch, inp.tp).tokens_per_s,
        "tps_fp8": decode_step(model, acc, "bf16", "fp8", ctx, dbatch, inp.tp).tokens_per_s,
    }


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
    target = fp8_formats_for(inp.gpu_key)[0]
    return {
        "format": "bf16 + format tag, quantize at load",
        "code_ratio": float(ratios[0]) if len(ratios) == 1 else math.nan, "distinct_ratios": len(ratios),
        "finite_codes": int(both.sum()), "nan_code_hex": f"0x{nan_code:02X}", "ocp_meaning": ocp_meaning,
        "model": model.name, "ckpt_bf16_gb": bf16_bytes / GB, "ckpt_fp8_gb": fp8_bytes / GB,
        "ckpt_ratio": bf16_bytes / fp8_bytes, "gpu": inp.accelerator.name, "target_fp8": target,
        "requant_s": (bf16_bytes + fp8_bytes) / inp.accelerator.bandwidth_bytes_per_s,
    }


@dataclass(frozen=True)
class Candidate:
    name: str
    bits: int
    roundoff: float
    decades: float
    peak: float


def candidates(inp: Inputs) -> list[Candidate]:
    """Formats meeting the custom scenario's range and precision on the target (best first).

    Rule: keep formats with unit roundoff <= rel_error and decades_at(rel_error) >= range needed;
    drop the fp8 encoding the target does not implement; compute-bound keeps only formats with a
    matrix rate on the target and ranks by that rate (then fewer bits); memory-bound ranks by
    fewer bits (then more range). Accumulators consider floats only; tf32 only when compute-bound
    (it is a matrix-core input mode, not a storage format).
    """
    if inp.role not in ROLES:
        raise ValueError(f"unknown tensor role {inp.role!r}; choose from {', '.join(ROLES)}")
    if inp.bound not in BOUNDS:
        raise ValueError(f"bound must be 'memory' or 'compute', got {inp.bound!r}")
    if not inp.rel_error > 0 or not inp.range_decades >= 0:
        raise ValueError("precision needed must be a positive relative error and range a non-negative "
                         f"number of decades, got {inp.rel_error} and {inp.range_decades}")
    wrong_fp8 = set(OCP_FP8 + FP8_ENCODING["mi300x"]) - set(fp8_formats_for(inp.gpu_key))
    found = []
    for name in CANDIDATES:
        fmt = get_format(name)
        if name in wrong_fp8 or (inp.role == "accumulator" and not isinstance(fmt, FloatFormat)):
            continue
        if name in COMPUTE_ONLY and inp.bound == "memory":
            continue
        u, dec = unit_roundoff(fmt), decades_at(fmt, inp.rel_error)
        peak = inp.accelerator.peak_tflops.get(PEAK_KEY.get(name, ""), math.nan)
        if u > inp.rel_error or dec < inp.range_decades:
            continue
        if inp.bound == "compute" and not peak > 0:
            continue
        found.append(Candidate(name, fmt.bits, u, dec, peak))
    if inp.bound == "compute":
        found.sort(key=lambda c: (-c.peak, c.bits))
    else:
        found.sort(key=lambda c: (c.bits, -c.decades))
    return found


def custom_facts(inp: Inputs) -> dict[str, Any]:
    """The custom scenario: the best candidate, its margins and the next wider fallback."""
    found = candidates(inp)
    if not found:
        raise ValueError(f"no format meets {inp.range_decades:g} decades at relative error {inp.rel_error:g} "
                         f"for {inp.bound}-bound {inp.role} on {inp.accelerator.name}")
    best = found[0]
    wider = [c for c in found[1:] if c.roundoff <= best.roundoff and c.decades >= best.decades]
    fallback = wider[0].name if wider else "fp64"
    fmt = get_format(best.name)
    ref = get_format("bf16")
    scaled = isinstance(fmt, IntFormat) or fmt.bits <= 8
    if inp.bound == "compute":
        throughput = (f"compute-bound: {inp.accelerator.name} runs {best.name} at {best.peak:g} TFLOP/s against "
                      f"{inp.accelerator.peak_tflops.get('bf16', math.nan):g} for bf16")
    else:
        throughput = (f"memory-bound: {best.bits} bits per value against {ref.bits} for bf16, "
                      f"{best.bits / ref.bits:g}× the bytes to move")
    notes = [ROLE_NOTES[inp.role].format_map(template_fields())]
    if scaled:
        notes.append("needs a scale per tensor or block (range is relative to it)")
    if best.name in OCP_FP8 + FP8_ENCODING["mi300x"] or inp.role == "checkpoint":
        notes.append("tag the file with its exact encoding (OCP e4m3 and FNUZ e4m3 differ by a factor of two)")
    return {
        "format": best.name, "role": inp.role, "bound": inp.bound, "need_decades": inp.range_decades,
        "need_rel": inp.rel_error, "have_decades": best.decades, "max_finite": fmt.max_finite,
        "roundoff": best.roundoff, "range_margin": best.decades / inp.range_decades if inp.range_decades else math.inf,
        "precision_margin": inp.rel_error / best.roundoff, "throughput_text": throughput,
        "notes": "; ".join(notes), "fallback": fallback,
        "gpu": inp.accelerator.name, "considered": ", ".join(c.name for c in found),
    }


# ---- the rules table ----------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule(
        scenario="pretrain", title="Pre-training a large model ({model}, {params_b:.3g}B parameters)",
        recommend="bf16 weights, activations and gradients on the matrix cores; fp32 master weights, optimizer "
                  "moments and accumulation",
        range="bf16 spans {fmt[bf16].min_normal:.3g} to {fmt[bf16].max_finite:.3g} ({bf16_decades:.0f} decades, "
              "fp32's exponent): no loss scaling. fp16 tops out at {fmt[fp16].max_finite:.0f} and flushes below "
              "{fmt[fp16].min_subnormal:.3g}, so its gradients need a loss scale",
        precision="bf16 unit roundoff {u[bf16]:.3g} (about {fmt[bf16].decimal_digits:.2g} digits) against fp16's "
                  "{u[fp16]:.3g}: an update below {u[bf16]:.3g}·|w| vanishes in a bf16 weight, hence the fp32 "
                  "master copy (u = {u[fp32]:.3g})",
        throughput="{gpu}: bf16 at {rate_bf16} dense against tf32 at {rate_tf32} and fp32 at {rate_fp32}. "
                   "Memory: {bytes_per_param:.0f} bytes/param (bf16 weights and grads, "
                   "fp32 master and two Adam moments) = {train_tb:.3g} TB, at least {min_gpus} × {gpu_mem:.0f} GB "
                   "devices before activations",
        risk="rounding noise {noise_ratio:.0f}× fp16's in activations and gradients; fp8 (e4m3, max "
             "{fmt[e4m3].max_finite:.0f}) would raise the matrix rate to {rate_fp8} but needs per-block "
             "scales and a validated loss curve",
        revert="a loss spike or a gap to an fp32/tf32 reference run beyond seed-to-seed noise, traced to a bf16 "
               "reduction (softmax, norm, loss) → run that op in fp32; a stalled loss with updates below "
               "{u[bf16]:.3g}·|w| → check the fp32 master copy",
        facts=pretrain_facts,
    ),
    Rule(
        scenario="serve", title="Serving {model} on one {gpu}",
        recommend="int4 weight-only (g{int4_group} scales, W4A16, GPTQ/AWQ) with bf16 math and an fp8 KV cache",
        range="weights need little range: one fp16 scale per {int4_group} weights maps each group's max|w| onto "
              "±{qmax} levels ({int4_bits:.3g} bits per weight with scale and zero point)",
        precision="a step of max|w|/{qmax} per group: worst rounding error {int4_rel:.3g} of the group's max, "
                  "against bf16's {u[bf16]:.3g} relative",
        throughput="single-sequence decode runs at {intensity:.2g} FLOP/byte against a ridge of {ridge:.0f}: bandwidth-"
                   "bound, so tokens/s follow bytes: bf16 {tps_bf16:.0f} → int4 {tps_int4:.0f} tokens/s "
                   "(×{speedup:.2g}) at {ctx} context; weights {w_bf16:.3g} → {w_int4:.3g} GB of {gpu_mem:.0f} "
                   "lifts the batch at {ctx} tokens (fp8 KV) from {batch_bf16} to {batch_int4}{fit_note}",
        risk="int4 rounding error in the weights (task quality; needs calibration); prefill stays compute-bound at "
             "the bf16 rate: time to first token for {prompt} tokens {ttft_bf16_ms:.0f} → {ttft_int4_ms:.0f} ms",
        revert="the task-level eval drops beyond its budget against bf16, or the workload is prefill-dominated → "
               "fp8 W8A8 (e4m3 at {rate_fp8} against {rate_bf16} for bf16) or bf16",
        facts=serve_facts,
    ),
    Rule(
        scenario="reduction", title="A reduction or LayerNorm statistic (hidden size {hidden})",
        recommend="accumulate in fp32 (storage may stay bf16/fp16); two-pass or Welford variance",
        range="a sum of squares over {hidden} values overflows fp16 ({fmt[fp16].max_finite:.0f}) once their RMS "
              "passes {overflow_rms:.3g}; fp32 holds {fmt[fp32].max_finite:.3g}",
        precision="an fp16 running sum of {count:.0e} terms of {term:g} stalls at {stall:g} (half an ulp there is "
                  "{half_ulp:.3g} > {term:g}): {stall_err:.1%} error; an fp32 sum stalls only at {stall_fp32:.3g}",
        throughput="reductions are bandwidth-bound ({reduce_intensity:.2g} FLOP/byte on {storage_bytes:.0f}-byte "
                   "elements against a ridge of {ridge:.0f} on {gpu}): the wide accumulator costs registers, not "
                   "bytes",
        risk="none worth naming: a few registers. E(x²) − E(x)² still cancels when |mean| ≫ std, which the "
             "two-pass or Welford form avoids",
        revert="never for the accumulator; if the error against an fp64 reference exceeds √n·u = {sqrt_n_u:.2g} "
               "for n = {count:.0e} in fp32, move to pairwise or Kahan summation rather than narrower",
        facts=reduction_facts,
    ),
    Rule(
        scenario="kv_cache", title="A KV cache at long context ({model}, {ctx_label} tokens{past_max})",
        recommend="fp8 (e4m3) KV cache with per-tensor scales; int8/int4 groups or two-bit KIVI when memory still "
                  "binds",
        range="e4m3 reaches {fmt[e4m3].max_finite:.0f} after a per-tensor scale amax/{fmt[e4m3].max_finite:.0f}; "
              "its normals span {e4m3_decades:.2g} decades, enough for K and V once key outlier channels share a "
              "scale (per-channel key scales, as KIVI uses, if they do not)",
        precision="e4m3 unit roundoff {u[e4m3]:.3g} (about {fmt[e4m3].decimal_digits:.2g} digits) against fp16's "
                  "{u[fp16]:.3g}; attention averages over many tokens, diluting independent rounding errors",
        throughput="{kv_fp16_kib:.4g} KiB/token in fp16 → {kv_fp8_kib:.4g} in fp8; one {ctx_label} sequence holds "
                   "{seq_fp16_gib:.3g} → {seq_fp8_gib:.3g} GiB, so the batch on {gpu} grows {batch_fp16} → "
                   "{batch_fp8}. The fp16 cache outweighs the {w_gb:.3g} GB of weights from {cross_1} tokens for "
                   "one sequence and {cross_b} at batch {batch}; decode at batch {dbatch}: {tps_fp16:.0f} → "
                   "{tps_fp8:.0f} tokens/s",
        risk="attention-score error that grows with context, and a quantize/dequantize step on the attention path",
        revert="a long-context eval (retrieval at {ctx_label}, perplexity) regresses beyond budget against the fp16 "
               "cache → keep keys in fp16, or int8 with per-head g{int8_group} scales ({kv_int8_kib:.4g} "
               "KiB/token)",
        facts=kv_facts,
    ),
    Rule(
        scenario="fp8_portability", title="Moving an fp8 checkpoint between vendors (OCP ↔ FNUZ)",
        recommend="ship bf16 (or fp32) with an explicit format tag (float8_e4m3fn or float8_e4m3fnuz in the "
                  "metadata) and quantize at load for the target: {target_fp8} on {gpu}",
        range="OCP e4m3: bias {fmt[e4m3].bias}, max {fmt[e4m3].max_finite:.0f}; e4m3fnuz: bias "
              "{fmt[e4m3fnuz].bias}, max {fmt[e4m3fnuz].max_finite:.0f}. OCP values above "
              "{fmt[e4m3fnuz].max_finite:.0f} do not exist on the FNUZ side",
        precision="the same {fmt[e4m3].man_bits} mantissa bits (u = {u[e4m3]:.3g} in both): precision is not the "
                  "problem. All {finite_codes} finite non-zero codes shared by both decode exactly "
                  "{code_ratio:g}× apart, and {nan_code_hex} is {ocp_meaning} in OCP but NaN in FNUZ",
        throughput="a bf16 checkpoint of {model} is {ckpt_bf16_gb:.0f} GB against {ckpt_fp8_gb:.0f} GB in fp8 "
                   "(×{ckpt_ratio:.2g} on disk and network); re-quantizing at load is one pass, about "
                   "{requant_s:.2g} s of memory traffic at {gpu}'s bandwidth",
        risk="{ckpt_ratio:.2g}× storage and transfer, and a load-time pass that recomputes scales for the target's "
             "max ({fmt[e4m3fnuz].max_finite:.0f} or {fmt[e4m3].max_finite:.0f}). Without a tag there is no error "
             "message: outputs are plausibly wrong by {code_ratio:g}×",
        revert="both ends verified to use the same encoding (the tag matches the target's native fp8) → ship the "
               "fp8 checkpoint directly and save the ×{ckpt_ratio:.2g}",
        facts=fp8_portability_facts,
    ),
    Rule(
        scenario="custom", title="Custom: {role}, {need_decades:g} decades at relative error {need_rel:g}, "
                                 "{bound}-bound on {gpu}",
        recommend="{format} (meeting the needs: {considered})",
        range="needs {need_decades:g} decades; {format} keeps relative error ≤ {need_rel:g} over {have_decades:.3g} "
              "decades (max finite {max_finite:.4g}), a margin of ×{range_margin:.3g}",
        precision="unit roundoff {roundoff:.3g} against {need_rel:g} needed, a margin of ×{precision_margin:.3g}",
        throughput="{throughput_text}",
        risk="{notes}",
        revert="an observed dynamic range beyond {have_decades:.3g} decades, or a task-level error above "
               "{need_rel:g} → {fallback}",
        facts=custom_facts,
    ),
)

SCENARIOS = tuple(rule.scenario for rule in RULES)
FIXED_SCENARIOS = tuple(s for s in SCENARIOS if s != "custom")


def get_rule(scenario: str) -> Rule:
    for rule in RULES:
        if rule.scenario == scenario:
            return rule
    raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")


def template_fields() -> dict[str, Any]:
    """The fields every template may use besides scenario facts: fmt[NAME] and u[NAME]."""
    return {"fmt": _Formats(), "u": _Roundoff()}


def advise(scenario: str, inputs: Inputs) -> Advice:
    """Fill one rule's templates with its computed facts."""
    rule = get_rule(scenario)
    facts = rule.facts(inputs)
    values = {**template_fields(), **facts}
    cells = {column: getattr(rule, column).format_map(values) for column in Rule.COLUMNS}
    return Advice(scenario=rule.scenario, title=rule.title.format_map(values), format=str(facts["format"]),
                  facts=facts, **cells)


__all__ = [
    "BOUNDS", "CANDIDATES", "FIXED_SCENARIOS", "FP8_ENCODING", "OCP_FP8", "PEAK_KEY", "ROLES", "ROLE_NOTES",
    "RULES",
    "SCENARIOS", "Advice", "Candidate", "Inputs", "Rule", "advise", "candidates", "decades_at", "float_format",
    "fp8_formats_for", "get_rule", "stall_point", "template_fields", "unit_roundoff",
]
