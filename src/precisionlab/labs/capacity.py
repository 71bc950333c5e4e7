"""The capacity lab: KV-cache bytes, batch capacity, cache-vs-weights crossover and the decode roofline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from precisionlab.capacity import (
    DEFAULT_RESERVE,
    GB,
    KV_DEFAULT,
    KV_SCHEMES,
    PRESETS,
    WEIGHT_DEFAULT,
    WEIGHT_SCHEMES,
    GiB,
    ModelShape,
    bare_decode,
    cache_exceeds_weights_context,
    decode_step,
    finding_key,
    get_model,
    head_split,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_per_layer,
    kv_shard_fraction,
    load_config,
    max_batch,
    prefill,
    roofline,
    splits_heads,
    weight_bytes,
)
from precisionlab.capacity.models import context_label
from precisionlab.formats import get_format
from precisionlab.hardware import Accelerator, get_accelerator
from precisionlab.labs import Lab
from precisionlab.results import Figure, LabResult, Part, Scalar, Series, Table

CONTEXTS = (4096, 32768, 131072)
PROMPTS = (512, 2048, 8192, 32768)
TP_DEGREES = (1, 2, 4, 8)
DECODE_KV = ("fp16", "fp8", "int4")

# The worked example of the “Precision & Quantization” course notes (module B04): a bare 13e9-parameter
# model on a GPU with 3 TB/s and ~1000 TFLOP/s.
WORKED_PARAMS = 13e9
WORKED_GPU = Accelerator("worked-example GPU (3 TB/s, 1000 TFLOP/s)", memory_gb=80, bandwidth_gbs=3000,
                       peak_tflops={"bf16": 1000, "fp16": 1000},
                       source="“Precision & Quantization” course notes, worked example")
WORKED_MODEL = "llama2_13b"  # a real 13B shape for the "what the KV cache changes" rows
WORKED_CONTEXT = 4096


def resolve_model(model: str = "llama3_8b", config: str | Path | None = None, name: str | None = None) -> ModelShape:
    """A preset by name, or the shape in a config.json file (which wins when given)."""
    if config is not None:
        return load_config(config, name)
    if name is not None:
        raise ValueError("--name names a --config model; a preset keeps its own name")
    return get_model(model)


def resolve_accelerator(gpu: str = "h100", memory: float | None = None, bandwidth: float | None = None,
                        peak_tflops: float | None = None) -> Accelerator:
    """A preset with datasheet numbers replaced; --peak-tflops sets the dense bf16/fp16 rate."""
    peaks = {"bf16": peak_tflops, "fp16": peak_tflops} if peak_tflops is not None else None
    return get_accelerator(gpu).with_overrides(memory_gb=memory, bandwidth_gbs=bandwidth, peak_tflops=peaks)


def gpu_key(gpu: str) -> str:
    return finding_key(gpu)


def _num(value: float) -> Scalar:
    """An integral float as int (byte counts read better), else the float."""
    return int(value) if math.isfinite(value) and float(value).is_integer() else value


# ---- sections -------------------------------------------------------------------------------------------

def model_section(shape: ModelShape, contexts: list[int], batch: int, context: int) -> Part:
    """The model's shape and its KV cache tables, with the byte findings of every preset's cache and the
    model's weights."""
    findings: dict[str, Scalar] = {}
    for m in [*PRESETS.values(), *([shape] if shape.key not in PRESETS else [])]:
        for kv in KV_DEFAULT:
            findings[f"kv.{m.key}.{kv}.bytes_per_token"] = _num(kv_bytes_per_token(m, kv))
            findings[f"kv.{m.key}.{kv}.bytes_per_seq_8k"] = _num(kv_bytes_per_sequence(m, kv, 8192))
    findings[f"kv.{shape.key}.fp16.bytes_per_token_per_layer"] = _num(kv_bytes_per_token_per_layer(shape, "fp16"))
    findings[f"weights.{shape.key}.params"] = shape.params().total
    findings[f"weights.{shape.key}.active_params"] = shape.params().active
    for w in WEIGHT_DEFAULT:
        findings[f"weights.{shape.key}.{w}.bytes"] = _num(weight_bytes(shape, w))
    return Part([model_table(shape), kv_table(shape, contexts, batch, context)], findings=findings)


def model_table(model: ModelShape) -> Table:
    p = model.params()
    rows: list[list[Scalar]] = [
        ["parameters", p.total, "embedding + attention + MLP/experts + norms, from the shape"],
        ["active parameters per token", p.active, "MoE: only the routed experts a token uses"],
        ["layers", model.layers, ""],
        ["attention heads / KV heads / head dim", f"{model.heads} / {model.kv_heads} / {model.head_dim}",
         "MLA caches a latent instead" if model.is_mla else "GQA" if model.kv_heads < model.heads else "MHA"],
        ["cached values per token per layer", model.kv_values_per_token_per_layer,
         " + ".join(f"{c}×{n}" for c, n in model.cache_vectors())],
        ["max context", model.max_context, ""],
        ["sliding window", model.sliding_window, "caps the cache" if model.sliding_window else "none"],
        ["weights in bf16 (GB)", weight_bytes(model, "bf16") / GB, f"{weight_bytes(model, 'bf16') / GiB:.2f} GiB"],
    ]
    return Table(key="model", title=f"{model.name}: shape ({model.source})", columns=["quantity", "value", "note"],
                 rows=rows)


def kv_table(model: ModelShape, contexts: list[int], batch: int, context: int) -> Table:
    columns = ["KV format", "bits/value", "bytes/token/layer", "bytes/token", "KiB/token"]
    columns += [f"GiB/seq @{context_label(c)}" for c in contexts]
    columns += [f"GiB batch {batch} @{context_label(context)}", "scheme"]
    rows: list[list[Scalar]] = []
    for name in KV_DEFAULT:
        scheme = KV_SCHEMES[name]
        per_token = kv_bytes_per_token(model, scheme)
        row: list[Scalar] = [name, scheme.bits_per_value, _num(kv_bytes_per_token_per_layer(model, scheme)),
                             _num(per_token), per_token / 1024]
        row += [kv_bytes_per_sequence(model, scheme, c) / GiB for c in contexts]
        row += [batch * kv_bytes_per_sequence(model, scheme, context) / GiB, scheme.note]
        rows.append(row)
    formats = {c: ".4g" for c in columns if c.startswith("GiB") or c in ("KiB/token", "bits/value")}
    return Table(
        key="kv_cache", title=f"KV cache of {model.name}, scale bytes included", columns=columns, rows=rows,
        note=("per token per layer = Σ vectors × (length × value bits + groups × scale bits) / 8; GQA stores "
              "2 × KV heads × head dim values (K and V). kivi2's newest 128 tokens are fp16, so short "
              "sequences pay more per token; a sliding window caps the tokens held."),
        formats=formats)


def presets_table() -> Table:
    rows: list[list[Scalar]] = []
    for m in PRESETS.values():
        p = m.params()
        rows.append([m.key, p.total / 1e9, p.active / 1e9, m.kv_values_per_token_per_layer,
                     kv_bytes_per_token(m, "fp16") / 1024, kv_bytes_per_token(m, "fp8") / 1024,
                     weight_bytes(m, "bf16") / GB, m.max_context, m.sliding_window, m.source])
    return Table(
        key="presets", title="Model presets (published config.json values)",
        columns=["model", "params (B)", "active (B)", "KV values/token/layer", "KV KiB/token fp16",
                 "KV KiB/token fp8", "weights bf16 (GB)", "max context", "window", "source"],
        rows=rows, formats={"params (B)": ".4g", "active (B)": ".4g", "KV KiB/token fp16": ".4g",
                            "KV KiB/token fp8": ".4g", "weights bf16 (GB)": ".4g"},
        note="DeepSeek-V3 caches a 512-value latent + a 64-value RoPE key per layer (MLA), not K and V per head.")


def batch_section(model: ModelShape, accelerators: dict[str, Accelerator], contexts: list[int], reserve: float,
                  tp: int) -> Part:
    findings: dict[str, Scalar] = {}
    columns = ["GPU", "context", "weights", "weights GB", "weights GiB", "budget GB", "budget GiB"]
    columns += [f"max batch {kv}" for kv in KV_DEFAULT] + ["flags"]
    rows: list[list[Scalar]] = []
    for key, acc in accelerators.items():
        for context in contexts:
            for w in WEIGHT_DEFAULT:
                fits = [max_batch(model, acc, w, kv, context, reserve, tp) for kv in KV_DEFAULT]
                first = fits[0]
                rows.append([key, context_label(context), w, first.weight_bytes / GB, first.weight_bytes / GiB,
                             first.budget_bytes / GB, first.budget_bytes / GiB, *[f.batch for f in fits], first.flag])
                for kv, fit in zip(KV_DEFAULT, fits, strict=True):
                    findings[f"batch.{model.key}.{key}.{context_label(context)}.{w}.{kv}"] = fit.batch
    per = f" on {tp} tensor-parallel devices (each holds 1/{tp} of the weights)" if tp > 1 else ""
    table = Table(
        key="batch", title=f"Largest batch of {model.name} that fits{per}, after a {reserve:.0%} reserve",
        columns=columns, rows=rows,
        formats={"weights GB": ".4g", "weights GiB": ".4g", "budget GB": ".4g", "budget GiB": ".4g"},
        note=("max batch = floor((memory × (1 - reserve) - weights) / KV bytes per sequence); memory in the "
              "vendor's decimal GB (1e9 B), GiB = 2^30 B. Weight schemes quantize the block linears and keep "
              "embedding, lm_head and norms in bf16."))
    return Part([table], findings=findings)


def crossover_section(model: ModelShape, batch: int) -> Part:
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for w in WEIGHT_DEFAULT:
        for kv in KV_DEFAULT:
            one = cache_exceeds_weights_context(model, w, kv, 1)
            many = cache_exceeds_weights_context(model, w, kv, batch)
            rows.append([w, kv, weight_bytes(model, w) / GB, _num(one), _num(many),
                         model.max_context < one])
            findings[f"crossover.{model.key}.{w}.{kv}.context_batch1"] = _num(one)
            findings[f"crossover.{model.key}.{w}.{kv}.context_batch{batch}"] = _num(many)
    table = Table(
        key="crossover", title=f"Context at which the KV cache outweighs the weights ({model.name})",
        columns=["weights", "KV format", "weights GB", "context (batch 1)", f"context (batch {batch})",
                 "batch 1 beyond max context"],
        rows=rows, formats={"weights GB": ".4g"},
        note=("Smallest L with batch × KV(L) > weight bytes. Past it the cache is the larger read on every decode "
              "step, and quantizing it stops being optional; inf = never (a sliding window caps the cache)."))
    return Part([table], findings=findings)


def worked_decode_section() -> Part:
    """The 13e9-parameter worked example (from the course notes), then what scale bytes and a KV cache change."""
    findings: dict[str, Scalar] = {}
    ridge = WORKED_GPU.ridge_flop_per_byte("bf16")
    findings["decode.13b.ridge_flop_per_byte"] = ridge
    rows: list[list[Scalar]] = []

    def add(case: str, bits: float, roof_bytes: float, flops: float, key: str | None = None) -> None:
        roof = roofline(roof_bytes, flops, WORKED_GPU)
        rows.append([case, bits, roof.bytes / GB, 1 / roof.time, roof.intensity, roof.ridge,
                     roof.ridge / roof.intensity])
        if key:
            findings[f"decode.13b.{key}.tokens_per_s"] = 1 / roof.time
            findings[f"decode.13b.{key}.intensity_flop_per_byte"] = roof.intensity

    for fmt in ("fp16", "int8", "int4"):
        value_bits = get_format(fmt).bits
        roof = bare_decode(WORKED_PARAMS, value_bits, WORKED_GPU)
        add(f"bare 13e9 weights, {fmt}", value_bits, roof.bytes, roof.flops, fmt)
    for w in ("int8", "int4"):
        bits = WEIGHT_SCHEMES[w].bits_per_value
        add(f"bare 13e9, {w} + scales ({WEIGHT_SCHEMES[w].note})", bits, WORKED_PARAMS * bits / 8, 2 * WORKED_PARAMS,
            f"{w}_scaled")
    shape = PRESETS[WORKED_MODEL]
    for w_name, w_bits in (("fp16", float(get_format("fp16").bits)), ("int4", WEIGHT_SCHEMES["int4"].bits_per_value)):
        for kv in ("fp16", "fp8"):
            cache = kv_bytes_per_sequence(shape, kv, WORKED_CONTEXT)
            add(f"{w_name} weights + {kv} KV of {shape.name} @{context_label(WORKED_CONTEXT)}", w_bits,
                WORKED_PARAMS * w_bits / 8 + cache, 2 * WORKED_PARAMS + shape.attention_flops_per_token(WORKED_CONTEXT),
                f"{w_name}_kv{kv}_{context_label(WORKED_CONTEXT)}")
    table = Table(
        key="decode_13b", title="Worked example: batch-1 decode of 13e9 parameters at 3 TB/s, 1000 TFLOP/s",
        columns=["case", "weight bits/param", "GB read/token", "tokens/s", "FLOP/byte", "ridge FLOP/byte",
                 "ridge ÷ intensity"],
        rows=rows,
        formats={"weight bits/param": ".4g", "GB read/token": ".4g", "tokens/s": ".4g", "FLOP/byte": ".3g",
                 "ridge FLOP/byte": ".4g", "ridge ÷ intensity": ".3g"},
        note=("tokens/s = bandwidth ÷ bytes read per token; 2 FLOPs per weight. Two orders of magnitude below the "
              "ridge, so bytes set the speed. Scale bytes cost a few percent; one 4k-token fp16 KV cache of a "
              "real 13B shape (no GQA) adds more bytes per token than int4 weights themselves."))
    return Part([table], findings=findings)


@dataclass(frozen=True)
class Deployment:
    """One model on one accelerator (`key` names it in findings) at one context, batch, reserve and TP degree."""

    model: ModelShape
    accelerator: Accelerator
    key: str
    context: int
    batch: int
    reserve: float
    tp: int


def decode_section(d: Deployment) -> Part:
    model, acc, key, context, batch, reserve, tp = d.model, d.accelerator, d.key, d.context, d.batch, d.reserve, d.tp
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for b in sorted({1, batch}):
        for w in WEIGHT_DEFAULT:
            for kv in DECODE_KV:
                step = decode_step(model, acc, w, kv, context, b, tp)
                fit = max_batch(model, acc, w, kv, context, reserve, tp)
                rows.append([b, w, kv, step.roof.bytes / GB, step.tokens_per_s, step.tokens_per_s_per_seq,
                             1e3 * step.roof.time, step.roof.intensity, step.roof.ridge, step.roof.bound,
                             b <= fit.batch])
                findings[f"decode.{model.key}.{key}.{context_label(context)}.{w}.{kv}.batch{b}.tokens_per_s"] = (
                    step.tokens_per_s)
    past = f", past the model's {model.max_context}-token maximum" if context > model.max_context else ""
    table = Table(
        key="decode", title=f"Decode of {model.name} on {acc.name} at {context_label(context)} context (tp={tp}{past})",
        columns=["batch", "weights", "KV", "GB read/step/device", "tokens/s (all)", "tokens/s per seq",
                 "ms/step", "FLOP/byte", "ridge", "bound", "fits"],
        rows=rows,
        formats={"GB read/step/device": ".4g", "tokens/s (all)": ".4g", "tokens/s per seq": ".4g",
                 "ms/step": ".4g", "FLOP/byte": ".3g", "ridge": ".4g"},
        note=("bytes/step = weights read (MoE: the experts the batch touches) + batch × KV(context); the weights "
              "are shared by the batch, the cache is not, so batching raises intensity until the cache dominates."))
    return Part([table], findings=findings)


def prefill_section(d: Deployment) -> Part:
    model, acc, key, tp = d.model, d.accelerator, d.key, d.tp
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for w in ("bf16", "int4"):
        for prompt in PROMPTS:
            roof = prefill(model, acc, w, "fp16", prompt, tp)
            step = decode_step(model, acc, w, "fp16", prompt, 1, tp)
            rows.append([w, context_label(prompt), 1e3 * roof.time, prompt / roof.time, roof.intensity, roof.ridge,
                         roof.bound, 1e3 * step.roof.time, prompt > model.max_context])
            findings[f"prefill.{model.key}.{key}.{w}.{context_label(prompt)}.ttft_s"] = roof.time
    table = Table(
        key="prefill", title=f"Prefill (time to first token) against decode, {model.name} on {acc.name}",
        columns=["weights", "prompt", "TTFT ms", "prefill tokens/s", "FLOP/byte", "ridge", "bound",
                 "decode ms/token (batch 1)", "past max context"],
        rows=rows,
        formats={"TTFT ms": ".4g", "prefill tokens/s": ".4g", "FLOP/byte": ".4g", "ridge": ".4g",
                 "decode ms/token (batch 1)": ".4g"},
        note=("Prefill reuses each weight across the whole prompt, so it sits at the compute ceiling: int4 "
              "weight-only quantization (bf16 math) barely moves TTFT while it cuts decode time per token."))
    return Part([table], findings=findings)


def tp_section(d: Deployment) -> Part:
    model, acc, key, context, batch, reserve, tp = d.model, d.accelerator, d.key, d.context, d.batch, d.reserve, d.tp
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    uneven = [n for n in sorted({*TP_DEGREES, tp}) if not splits_heads(model, n)]
    for n in sorted({*TP_DEGREES, tp} - set(uneven)):
        fit = max_batch(model, acc, "bf16", "fp16", context, reserve, n)
        one = decode_step(model, acc, "bf16", "fp16", context, 1, n)
        many = decode_step(model, acc, "bf16", "fp16", context, batch, n)
        rows.append([n, head_split(model, n), fit.weight_bytes / GB,
                     kv_bytes_per_token(model, "fp16") * kv_shard_fraction(model, n), fit.batch, one.tokens_per_s,
                     many.tokens_per_s])
        findings[f"tp.{model.key}.{key}.tp{n}.batch1.tokens_per_s"] = one.tokens_per_s
        findings[f"tp.{model.key}.{key}.tp{n}.max_batch_{context_label(context)}"] = fit.batch
    table = Table(
        key="tensor_parallel", title=f"Tensor parallelism: {model.name}, bf16 weights, fp16 KV, "
                                     f"{context_label(context)} context",
        columns=["devices", "heads", "weights GB/device", "KV bytes/token/device", "max batch (the N devices)",
                 "tokens/s batch 1", f"tokens/s batch {batch}"],
        rows=rows,
        formats={"weights GB/device": ".4g", "KV bytes/token/device": ".6g", "tokens/s batch 1": ".4g",
                 f"tokens/s batch {batch}": ".4g"},
        note=("Weights split evenly, query heads H/N per device, KV heads Hkv/N per device (replicated past Hkv; an "
              "MLA latent is replicated on every device). Every device holds its share of every sequence, so the "
              "max batch is that of the whole group of N. All-reduce time is ignored: these speeds are upper "
              "bounds." + (f" Not shown: {', '.join(map(str, uneven))} devices, which cannot split the "
                           f"{model.heads} query / {model.kv_heads} KV heads evenly." if uneven else "")))
    return Part([table], findings=findings)


# ---- figures --------------------------------------------------------------------------------------------

def batch_figure(model: ModelShape, acc: Accelerator, reserve: float, tp: int) -> Figure:
    contexts = [2**k for k in range(10, 18)]
    combos = [("bf16", kv) for kv in KV_DEFAULT] + [("fp8", "fp8"), ("int4", "int4")]
    series = [Series(f"weights {w}, KV {kv}", contexts,
                     [max_batch(model, acc, w, kv, c, reserve, tp).batch for c in contexts])
              for w, kv in combos]
    vlines = [(float(model.max_context), "model max context")]
    if model.sliding_window:
        vlines.append((float(model.sliding_window), "sliding window"))
    return Figure(key="batch_vs_context", title=f"Batch capacity of {model.name} on {acc.name}",
                  xlabel="context (tokens)", ylabel="largest batch that fits (0 = does not fit, not drawn)",
                  series=series, xscale="log", yscale="log", vlines=vlines)


def roofline_figure(model: ModelShape, acc: Accelerator, context: int, batch: int, tp: int) -> Figure:
    ridge = acc.ridge_flop_per_byte("bf16")
    batches = sorted({2**k for k in range(0, 11) if 2**k <= batch} | {batch})
    decodes = {w: [decode_step(model, acc, w, "fp16", context, b, tp) for b in batches] for w in ("bf16", "int4")}
    fills = [prefill(model, acc, "bf16", "fp16", p, tp) for p in PROMPTS]
    top = max([ridge * 10, *(r.intensity * 2 for r in fills)])
    xs = sorted({*(10 ** (k / 4) for k in range(-4, 4 * math.ceil(math.log10(top)) + 1)), ridge})
    series = [Series("roofline (bf16)", xs,
                     [min(acc.peak("bf16"), x * acc.bandwidth_bytes_per_s) / 1e12 for x in xs], style="-")]
    for w, steps in decodes.items():
        series.append(Series(f"decode, weights {w}, batch {batches[0]}..{batches[-1]}",
                             [s.roof.intensity for s in steps], [s.roof.attained_flops / 1e12 for s in steps],
                             kind="scatter"))
    series.append(Series("prefill, bf16, prompts 512..32k", [r.intensity for r in fills],
                         [r.attained_flops / 1e12 for r in fills], kind="scatter"))
    return Figure(key="decode_roofline", title=f"Decode and prefill of {model.name} on the {acc.name} roofline",
                  xlabel="arithmetic intensity (FLOP/byte)", ylabel="attained TFLOP/s per device", series=series,
                  xscale="log", yscale="log", vlines=[(ridge, f"ridge {ridge:.0f} FLOP/byte")])


# ---- the lab --------------------------------------------------------------------------------------------

def run(model: str = "llama3_8b", config: str | Path | None = None, name: str | None = None, gpu: str = "h100",
        memory: float | None = None, bandwidth: float | None = None, peak_tflops: float | None = None,
        batch: int = 32, reserve: float = DEFAULT_RESERVE, tp: int = 1, context: int = 8192) -> LabResult:
    """Capacity of one model (preset or config.json) on one or more GPUs (comma-separated)."""
    if batch <= 0 or context <= 0:
        raise ValueError(f"batch and context must be positive, got {batch} and {context}")
    shape = resolve_model(model, config, name)
    split = head_split(shape, tp)  # an uneven split is an error that names the degrees that work
    keys = [g.strip() for g in gpu.split(",") if g.strip()]
    if not keys:
        raise ValueError("no GPU given")
    accelerators = {gpu_key(k): resolve_accelerator(k, memory, bandwidth, peak_tflops) for k in keys}
    first_key, first = next(iter(accelerators.items()))
    contexts = sorted({*CONTEXTS, context})
    result = LabResult(
        name="capacity", title="Capacity: KV cache, batch capacity and the decode roofline",
        params={"model": shape.name, "config": str(config) if config else None, "gpu": ",".join(keys),
                "memory_gb": first.memory_gb, "bandwidth_gbs": first.bandwidth_gbs,
                "peak_tflops_bf16": first.peak_tflops.get("bf16"), "batch": batch, "reserve": reserve, "tp": tp,
                "context": context},
    )
    result.add(model_section(shape, contexts, batch, context))
    result.add(batch_section(shape, accelerators, list(CONTEXTS), reserve, tp))
    result.add(crossover_section(shape, batch))
    result.add(worked_decode_section())
    deployment = Deployment(shape, first, first_key, context, batch, reserve, tp)
    result.add(decode_section(deployment))
    result.add(prefill_section(deployment))
    result.add(tp_section(deployment))
    result.add(Part([presets_table()],
                    [batch_figure(shape, first, reserve, tp), roofline_figure(shape, first, context, batch, tp)]))
    fp16_tok = kv_bytes_per_token(shape, "fp16")
    summary = (f"{shape.name}: {fp16_tok / 1024:.4g} KiB of fp16 KV cache per token, "
               f"{kv_bytes_per_sequence(shape, 'fp16', context) / GiB:.3g} GiB per {context_label(context)} sequence "
               f"against {weight_bytes(shape, 'bf16') / GB:.3g} GB of bf16 weights. Memory reserve {reserve:.0%}."
               + (f" Tensor parallelism over {tp} devices: {split}." if tp > 1 else ""))
    result.summary = summary
    return result


LAB = Lab(name="capacity", title="KV cache, batch capacity and decode roofline", run=run, order=50, quick={})
