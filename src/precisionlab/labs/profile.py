"""The profile lab: does a quantized layer run faster on this CPU, and by how much does a whole decode step?

One linear layer (a size × size one, 4096 by default, and every block linear of SmolLM2) under each way of
running it (models.profiling: fp32, bf16, unfused dequantize-then-matmul int8 / int4, torch's fused int8 / int4
kernels, llama.cpp's Q8_0 / Q4_0), at decode (M = 1) and prefill (M = 512) shapes, with torch threads pinned
to `threads` (1 by default): time per call, the share spent converting, the weight bytes read, the achieved
bandwidth against this machine's copy bandwidth and the FLOP rate against its matmul ceiling. Then Amdahl
on the real model: the share of a SmolLM2 decode step spent in its linears, and the step's measured speedup
when the block linears run the fused int4 kernel beside what that share predicts.

Skipped with a reason (never an error): everything without torch; llama.cpp's rows without
llama-cpp-python; the SmolLM2 parts without the packaged model (or with model=None).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from precisionlab.labs import Lab
from precisionlab.labs.profile_lessons import PREFILL, lessons_part, summary
from precisionlab.peers import install_hint, missing_reason, optional_import
from precisionlab.results import Figure, LabResult, Part, Scalar, Series, Table

MS = (1, PREFILL)
MAX_SIZE = 16384
LAYER_ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MODEL_KEYS = {"smollm2-135m": "smollm2"}
"""The findings prefix of a model's layers (profile.smollm2.<layer>...); any other model: 'model'."""
DEFAULT_MODEL = "smollm2-135m"
Stage = Callable[[str], None]


def check_options(size: int = 4096, repeats: int = 5, threads: int = 1, decode_steps: int = 8,
                  prompt_tokens: int = 64, budget: float = 0.3) -> None:
    """ValueError (one line) for a bad option, before any work: size a multiple of 64 up to MAX_SIZE (the
    int4 kernel's groups and llama.cpp's blocks), repeats 2..1000, threads, decode steps and prompt tokens
    positive, budget positive seconds."""
    for label, value, low, high in (("size", size, 64, MAX_SIZE), ("repeats", repeats, 2, 1000),
                                    ("threads", threads, 1, 1024), ("decode_steps", decode_steps, 1, 4096),
                                    ("prompt_tokens", prompt_tokens, 1, 4096)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{label} must be an integer from {low} to {high}, got {value!r}")
    if size % 64:
        raise ValueError(f"size must be a multiple of 64 (the int4 kernel's groups, llama.cpp's blocks), got {size}")
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number of seconds, got {budget!r}")


def run(size: int = 4096, repeats: int = 5, threads: int = 1, model: str | None = DEFAULT_MODEL,
        decode_steps: int = 8, prompt_tokens: int = 64, budget: float = 0.3, seed: int = 0,
        stage: Stage | None = None) -> LabResult:
    """Run the lab (see the module docstring). `stage` (optional) is called with a line as each part starts."""
    check_options(size, repeats, threads, decode_steps, prompt_tokens, budget)
    params: dict[str, Scalar] = {"size": size, "repeats": repeats, "threads": threads, "model": model or "none",
                                 "decode_steps": decode_steps, "prompt_tokens": prompt_tokens, "seed": seed}
    if optional_import("torch") is None:
        return _skipped_result(params)
    from precisionlab.models import ggml_matmul, profiling

    note = stage or (lambda _line: None)
    loaded, why, install = _load(model, note)  # a model that does not load fails before any timing
    load_start = os.getloadavg()
    note("measuring copy bandwidth and matmul ceilings")
    machine = profiling.measure_machine(threads, budget)
    case = profiling.LinearCase(f"{size}x{size}", profiling.random_weight(size, size, seed))
    note(f"profiling the {size}x{size} layer")
    big, skipped = profiling.profile_linears([case], MS, profiling.VARIANTS, repeats, threads, seed, note)
    layers: list[Any] = []
    decode: dict[str, float] = {}
    prefix = MODEL_KEYS.get(model or "", "model")
    if loaded is not None:
        cases = model_cases(loaded.model)
        note(f"profiling {len(cases)} {loaded.name} layers")
        layers, more = profiling.profile_linears(cases, MS, profiling.VARIANTS, repeats, threads, seed, note)
        skipped.update(more)
        note(f"profiling {decode_steps} decode steps of {loaded.name}")
        decode = decode_amdahl(loaded, decode_steps, prompt_tokens, threads)
    load_end = os.getloadavg()
    machine = with_observed_ceilings(machine, [*big, *layers])
    result = assemble(big, layers, decode, machine, prefix, params, (load_start, load_end), model)
    llama_why = ggml_matmul.missing_reason()
    if llama_why:
        result.skip("llamacpp", "llama.cpp's Q8_0 / Q4_0 rows", llama_why, install_hint("llama_cpp"), section="layer")
    others = {k: v for k, v in skipped.items() if not k.split("/")[1].startswith("llamacpp") or not llama_why}
    if others:
        result.section("layer").note += " Not run: " + "; ".join(f"{k}: {v}" for k, v in sorted(others.items())) + "."
    if loaded is None and model is not None:
        result.skip("model", f"the {model} layers and the decode step (Amdahl)", why, install)
    elif loaded is None:
        result.summary += "; no model asked for (model=None: the quick form), so no model layers and no Amdahl"
    return result


def with_observed_ceilings(machine: Any, rows: Sequence[Any]) -> Any:
    """The machine with each matmul ceiling raised to the best rate its plain library matmul (the fp32 and
    bf16 variants) reached in this run: a loaded machine can slow the ceiling's own measurement more than a
    later call, and a ceiling below an observed rate would read as a fraction above 1."""
    import dataclasses

    best = dict(machine.matmul_gflops)
    for r in rows:
        if r.variant in ("fp32", "bf16") and math.isfinite(r.gflops):
            best[r.variant] = max(best.get(r.variant, 0.0), r.gflops)
    shapes = {p: machine.matmul_shapes.get(p, "") if best[p] == machine.matmul_gflops.get(p) else
              "observed in the profile" for p in best}
    return dataclasses.replace(machine, matmul_gflops=best, matmul_shapes=shapes)


def _skipped_result(params: dict[str, Scalar]) -> LabResult:
    table = Table(key="skipped", title="Kernel profile: skipped", columns=["lab", "status"],
                  rows=[["profile", f"skipped: {missing_reason('torch')}"]],
                  note="The profile lab times torch's and llama.cpp's kernels; nothing else in the report needs them.")
    result = LabResult(name="profile", title="Kernel profile on this CPU (skipped)", sections=[table], params=params,
                       summary=f"skipped: {missing_reason('torch')}")
    result.skip("profile", "the kernel profile", missing_reason("torch"), install_hint("torch"), section="skipped")
    return result


def _load(model: str | None, note: Stage) -> tuple[Any, str, str]:
    """(loaded model, "", "") or (None, why not, how to get it). A packaged name that is not installed, or
    missing model peers, is a skip; any other failure to load is the user's error (ValueError)."""
    if model is None:
        return None, "model=None", "pass --model smollm2-135m"
    from precisionlab.models.packaged import PACKAGED, packaged_path

    missing = [name for name in ("transformers", "gguf", "safetensors") if optional_import(name) is None]
    if missing:
        return None, f"{', '.join(missing)} not installed", "pip install 'precisionlab[models]'"
    if model in PACKAGED and packaged_path(model) is None:
        return None, f"the packaged model {model} is not installed", PACKAGED[model].install
    from precisionlab.models import load_model

    loaded = load_model(model, progress=note)
    if loaded.kind != "causal-lm":
        raise ValueError(f"the profile's decode step needs a causal LM; {loaded.name} is a {loaded.kind}")
    return loaded, "", ""


def model_cases(model: Any) -> list[Any]:
    """The first block's linears (q, k, v, o, gate, up, down where the model has them), with their weights."""
    from precisionlab.models import profiling
    from precisionlab.models.weights import LINEAR, layer_kind

    first: dict[str, Any] = {}
    for name, module in model.named_modules():
        leaf = name.rpartition(".")[2]
        if layer_kind(module) == LINEAR and ".0." in f".{name}." and leaf not in first and "lm_head" not in name:
            first[leaf] = module
    order = [n for n in LAYER_ORDER if n in first] + [n for n in first if n not in LAYER_ORDER]
    return [profiling.LinearCase(n, first[n].weight.detach()) for n in order]


def decode_amdahl(loaded: Any, steps: int, prompt_tokens: int, threads: int, rounds: int = 2) -> dict[str, float]:
    """Decode-step profile of the reference and of the block linears on the fused int4 kernel, alternated
    `rounds` times: the linears' share of a step, and the step speedup beside Amdahl's prediction from the
    measured speedup of the block linears alone."""
    from precisionlab import peers
    from precisionlab.eval.speed import prompt_ids
    from precisionlab.models import kernels, profiling
    from precisionlab.models.weights import linear_layers

    torch = peers.torch()
    model = loaded.model
    blocks = list(linear_layers(model))
    prompt = torch.tensor([prompt_ids(loaded, prompt_tokens)])
    swap = kernels.prepare_swap(model, profiling.INT4_SCHEME)
    reference, fused = [], []
    with peers.torch_threads(threads):
        for _ in range(rounds):
            reference.append(profiling.decode_profile(model, prompt, steps, blocks))
            swap.install()
            try:
                fused.append(profiling.decode_profile(model, prompt, steps, list(swap.swapped)))
            finally:
                swap.remove()

    def total(profiles: list[Any], attr: str) -> float:
        return sum(sum(getattr(p, attr)) for p in profiles)

    step, linear, block = (total(reference, a) for a in ("step_us", "linear_us", "block_us"))
    step_k, linear_k, block_k = (total(fused, a) for a in ("step_us", "linear_us", "block_us"))
    share = block / step
    gemm_speedup = block / block_k if block_k > 0 else math.nan

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    return {"linear_share": linear / step, "block_linear_share": share,
            "step_ms": statistics.median([u for p in reference for u in p.step_us]) / 1e3,
            "int4_step_ms": statistics.median([u for p in fused for u in p.step_us]) / 1e3,
            "int4_linear_speedup": gemm_speedup, "int4_step_speedup": step / step_k,
            "int4_amdahl_speedup": 1.0 / ((1.0 - share) + share / gemm_speedup),
            "int4_other_linear_speedup": ratio(linear - block, linear_k - block_k),
            "int4_rest_speedup": ratio(step - linear, step_k - linear_k),
            "swapped_layers": len(swap.swapped), "steps": steps * rounds}


# --------------------------------------------------------------------------- the result
COLUMNS = ["M", "variant", "activations / math", "ms", "median ms", "profiler ms", "conversion share", "weight MB",
           "GB/s", "copy fraction", "GFLOP/s", "FLOP fraction", "speedup vs fp32", "rel diff vs own grid"]
"""The layer tables' columns (a model's layers add `layer N×K` first). Activations and the math's precision share
one column, and a layer's shape its name's, so that the table fits a 1280 px report without scrolling."""
SHORT = {"float32": "fp32", "bfloat16": "bf16"}
"""The activations' dtype as the math column spells it."""
LAYER_TABLE_DROPS = ("median ms", "GFLOP/s")
"""Columns the model's layer table leaves out, so that it fits a 1280 px report (its FLOP fraction stays)."""
FORMATS = {"ms": ".4g", "median ms": ".4g", "profiler ms": ".4g", "conversion share": ".3f", "weight MB": ".4g",
           "GB/s": ".4g", "copy fraction": ".3f", "GFLOP/s": ".4g", "FLOP fraction": ".3f", "speedup vs fp32": ".3g",
           "rel diff vs own grid": ".2e"}


def _by(rows: Sequence[Any]) -> dict[tuple[str, str, int], Any]:
    return {(r.case, r.variant, r.m): r for r in rows}


def _row_values(r: Any, machine: Any, fp32: Any) -> dict[str, float]:
    from precisionlab.models.profiling import MATH

    math_unit = MATH.get(r.variant, "fp32")
    ceiling = machine.ceiling(math_unit)
    return {"ms": r.ms, "conversion_share": r.conversion_share, "gbps": r.gbps,
            "copy_fraction": r.gbps / machine.copy_gbps if machine.copy_gbps > 0 else math.nan,
            "gflops": r.gflops, "flop_fraction": r.gflops / ceiling if ceiling > 0 else math.nan,
            "speedup_vs_fp32": fp32.ms / r.ms if fp32 is not None and r.ms > 0 else math.nan,
            "weight_bytes": float(r.weight_bytes), "rel_diff": r.rel_diff}


FINDING_FIELDS = ("ms", "conversion_share", "gbps", "copy_fraction", "flop_fraction", "speedup_vs_fp32",
                  "weight_bytes", "rel_diff")


def _rows_part(key: str, title: str, rows: Sequence[Any], machine: Any, base: Callable[[Any], str],
               with_layer: bool, note: str) -> Part:
    from precisionlab.models.profiling import FP32_ACTIVATION, MATH

    shadow = {v: k for k, v in FP32_ACTIVATION.items()}
    by = _by(rows)
    table_rows: list[list[Scalar]] = []
    findings: dict[str, Scalar] = {}
    for r in rows:
        values = _row_values(r, machine, by.get((r.case, "fp32", r.m)))
        if r.variant in shadow:  # the float32-activation run of a fused kernel
            fast = by.get((r.case, shadow[r.variant], r.m))
            prefix = base(fast if fast is not None else r)
            findings[f"{prefix}.fp32_activations_ms"] = r.ms
            if fast is not None:
                findings[f"{prefix}.fp32_activations_slowdown"] = r.ms / fast.ms
        else:
            findings.update({f"{base(r)}.{f}": values[f] for f in FINDING_FIELDS})
            findings[f"{base(r)}.op"] = r.op
        math_dtype = MATH.get(shadow.get(r.variant, r.variant), "fp32")
        cells: list[Scalar] = [r.m, r.variant, f"{SHORT.get(r.activation, r.activation)} / {math_dtype}", r.ms,
                               r.median_ms, r.profiler_ms, r.conversion_share, r.weight_bytes / 1e6, values["gbps"],
                               values["copy_fraction"], values["gflops"], values["flop_fraction"],
                               values["speedup_vs_fp32"], r.rel_diff]
        if with_layer:  # the widest table: its median and GFLOP/s are left to the single-layer table's note
            cells = [c for c, name in zip(cells, COLUMNS, strict=True) if name not in LAYER_TABLE_DROPS]
        head: list[Scalar] = [f"{r.case} {r.n}×{r.k}"] if with_layer else []
        table_rows.append(head + cells)
    columns = (["layer N×K", *(c for c in COLUMNS if c not in LAYER_TABLE_DROPS)] if with_layer else COLUMNS)
    ran = {r.variant: (r.op, r.weights) for r in rows}
    note += (" What ran (the matmul op torch.profiler saw take the most self time; the weight as held): "
             + "; ".join(f"{v} {op or 'no torch op'} on {weights}" for v, (op, weights) in ran.items()) + ".")
    flagged = sorted({f"{r.variant}: {r.note}" for r in rows if r.note})
    if flagged:
        note += " " + " ".join(flagged)
    return Part([Table(key=key, title=title, columns=columns, rows=table_rows, note=note, formats=FORMATS)],
                findings=findings)


def _layer_note(machine: Any, repeats: Scalar) -> str:
    from precisionlab.models.profiling import GEMV_BUDGET_S, GEMV_MAX_ROUNDS, GEMV_REPEATS

    return (f"torch threads pinned to {machine.threads}. The layer takes float32 activations and returns float32 "
            "(casts to and from bf16 included). ms: fastest of the interleaved repeats "
            f"({repeats} at M = {PREFILL}; at M = 1 at least {GEMV_REPEATS}, more until {GEMV_BUDGET_S:g} s or "
            f"{GEMV_MAX_ROUNDS} rounds; perf_counter, no profiler attached); "
            "median beside it; profiler ms: the call under "
            "torch.profiler. conversion share: the self CPU time torch.profiler gives the ops that are not a "
            "matmul (casts, unpacking, dequantization) over all the call's ops; llama.cpp: its activations' Q8_0 "
            "conversion run alone over the call. weight MB: the stored weight as the variant reads it (codes and "
            f"scales); GB/s = weight bytes / time; copy fraction: of this machine's {machine.copy_gbps:.3g} GB/s "
            f"copy bandwidth ({machine.copy_kernel}). FLOP fraction: of the best measured torch matmul of the math "
            "unit (fp32 / bf16). rel diff: ||y - x W_hat^T|| / ||x W_hat^T||, W_hat the variant's own weight grid "
            "(bf16 activations: ~2^-9 expected; llama.cpp's Q8_0 activations: ~1e-2). Unfused variants also write "
            "and re-read the dequantized weight (bf16), which the weight MB does not count.")


def assemble(big: Sequence[Any], layers: Sequence[Any], decode: dict[str, float], machine: Any, prefix: str,
             params: dict[str, Scalar], loads: tuple[tuple[float, ...], tuple[float, ...]],
             model: str | None) -> LabResult:
    size = params["size"]
    result = LabResult(name="profile", title="Kernel profile on this CPU: do the quantized layers run faster?",
                       params=params)
    result.add(_rows_part("layer", f"One {size}x{size} linear (random weights), every variant at M = 1 and "
                                   f"M = {PREFILL}", big, machine, lambda r: f"profile.{r.variant}.m{r.m}", False,
                          _layer_note(machine, params["repeats"])))
    if layers:
        result.add(_rows_part("model_layers", f"{model}'s block-0 linears (their own weights), every variant",
                              layers, machine, lambda r: f"profile.{prefix}.{r.case}.{r.variant}.m{r.m}", True,
                              "As the table above, on the model's own first-block weights (without its median ms "
                              "and GFLOP/s columns; the FLOP fraction is GFLOP/s over the same ceiling)."))
    result.add(lessons_part(big, machine, loads, last_level_cache_mb()))
    result.add(activations_part([*big, *layers]))
    if decode:
        result.add(decode_part(decode, str(model)))
    result.add(machine_part(machine, loads))
    result.figures += [bytes_figure([*big, *layers], machine, m) for m in MS]
    result.summary = summary(result.findings, size)
    return result


def activations_part(rows: Sequence[Any]) -> Part:
    """The fused kernels with bf16 against float32 activations at M = 1."""
    from precisionlab.models.profiling import FP32_ACTIVATION

    by = _by(rows)
    table_rows: list[list[Scalar]] = []
    for r in rows:
        if r.m == 1 and r.variant in FP32_ACTIVATION:
            slow = by.get((r.case, FP32_ACTIVATION[r.variant], 1))
            if slow is not None:
                table_rows.append([r.case, r.variant, r.ms, slow.ms, slow.ms / r.ms])
    table = Table(key="activations", title="The activations' dtype decides it: fused kernels at M = 1",
                  columns=["layer", "kernel", "bf16 activations ms", "fp32 activations ms", "fp32 / bf16"],
                  rows=table_rows,
                  note=("torch vectorises _weight_int8pack_mm and _weight_int4pack_mm_for_cpu for bf16 activations "
                        "only; float32 activations take a scalar loop. The candidates use bf16 (models.kernels). "
                        "Float32 activations are not run at M = 512: minutes per call."),
                  formats={"bf16 activations ms": ".4g", "fp32 activations ms": ".4g", "fp32 / bf16": ".3g"})
    return Part([table])


def decode_part(decode: dict[str, float], model: str) -> Part:
    labels = {"linear_share": "share of a decode step in nn.Linear calls (all, the output head too)",
              "block_linear_share": "share in the block linears (the ones the candidates quantize)",
              "step_ms": "reference decode step (ms, median)",
              "int4_step_ms": "decode step with the block linears on the fused int4 kernel (ms, median)",
              "int4_linear_speedup": "the block linears' speedup on the kernel (their time, reference / kernel)",
              "int4_step_speedup": "the whole step's speedup, measured",
              "int4_amdahl_speedup": "the step's speedup Amdahl predicts: 1 / ((1 - s) + s / k), s the block share, "
                                     "k the linears' speedup",
              "int4_other_linear_speedup": "the linears left in float (the output head): their time, reference / "
                                           "kernel path (Amdahl assumes 1)",
              "int4_rest_speedup": "everything that is not a linear (attention, norms, ...): reference / kernel "
                                   "path (Amdahl assumes 1)",
              "swapped_layers": "layers on the kernel", "steps": "decode steps profiled per variant"}
    table = Table(key="decode", title=f"Amdahl on {model}: where a decode step's time goes",
                  columns=["finding", "value", "what"],
                  rows=[[f"profile.decode.{k}", v, labels[k]] for k, v in decode.items()],
                  note=("Batch 1, greedy, over the KV cache of a prompt from the built-in text; torch.profiler (CPU) "
                        "regions around every step and every nn.Linear call; the reference and the kernel path "
                        "alternate. int4: models.profiling.INT4_SCHEME on the block linears, bf16 activations."),
                  formats={"value": ".4g"})
    return Part([table], findings={f"profile.decode.{k}": v for k, v in decode.items()})


def machine_part(machine: Any, loads: tuple[tuple[float, ...], tuple[float, ...]]) -> Part:
    start, end = loads
    findings: dict[str, Scalar] = {"profile.machine.copy_gbps": machine.copy_gbps, "profile.threads": machine.threads,
                                   "profile.machine.load_average_start": start[0],
                                   "profile.machine.load_average_end": end[0]}
    findings["profile.machine.read_gbps"] = machine.read_gbps
    from precisionlab.models.kernels import cpu_capability

    findings["profile.machine.cpu_capability"] = cpu_capability()
    rows: list[list[Scalar]] = [["copy bandwidth (GB/s)", machine.copy_gbps, f"{machine.copy_kernel}; 2 x 64 MB "
                                                                              "counted (read and write)"],
                                ["read bandwidth (GB/s)", machine.read_gbps, "torch.sum over 64 MB, fastest of "
                                                                             "15: a read-only stream, as a GEMV's"]]
    for precision, rate in machine.matmul_gflops.items():
        findings[f"profile.machine.{precision}_matmul_gflops"] = rate
        rows.append([f"torch {precision} matmul ceiling (GFLOP/s)", rate, machine.matmul_shapes[precision]])
    cache = last_level_cache_mb()
    if cache is not None:
        findings["profile.machine.last_level_cache_mb"] = cache
        rows.append(["last-level cache (MB)", cache, "a weight smaller than this can stream from cache faster than "
                                                     "the copy bandwidth, which moves 128 MB"])
    rows += [["torch CPU capability", findings["profile.machine.cpu_capability"],
              "the vector ISA torch's kernels dispatch to (the int4 kernel has an AVX-512 and an AVX2 body)"],
             ["torch threads", machine.threads, "pinned for every timing"],
             ["load average at the start (1, 5, 15 min)", start[0], ", ".join(f"{v:.2f}" for v in start)],
             ["load average at the end", end[0], ", ".join(f"{v:.2f}" for v in end)]]
    table = Table(key="machine", title="This machine, measured in the same run", columns=["what", "value", "detail"],
                  rows=rows, note="Timings on a shared machine vary; the ratios within one run are what to compare.",
                  formats={"value": ".4g"})
    return Part([table], findings=findings)


def last_level_cache_mb() -> float | None:
    """The largest CPU cache (Linux sysfs), in MB; None where it cannot be read."""
    from pathlib import Path

    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip() if path.is_file() else ""
        units = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}
        if text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]])
    return max(sizes) if sizes else None


def bytes_figure(rows: Sequence[Any], machine: Any, m: int) -> Figure:
    """Time per call against weight bytes at one M, one series per variant, with the copy-bandwidth line."""
    from precisionlab.models.profiling import VARIANTS

    series = []
    chosen = [r for r in rows if r.m == m and r.variant in VARIANTS]
    for variant in VARIANTS:
        points = [(r.weight_bytes / 1e6, r.ms) for r in chosen if r.variant == variant]
        if points:
            series.append(Series(variant, [p[0] for p in points], [p[1] for p in points], kind="scatter"))
    sizes = [r.weight_bytes / 1e6 for r in chosen]
    if sizes and machine.copy_gbps > 0:
        low, high = min(sizes) / 2, max(sizes) * 2
        series.append(Series(f"copy bandwidth ({machine.copy_gbps:.3g} GB/s)", [low, high],
                             [low / machine.copy_gbps, high / machine.copy_gbps], kind="line", style="--"))
    return Figure(key=f"bytes_m{m}", title=f"Time per call against weight bytes, M = {m}", xlabel="weight MB read",
                  ylabel="ms per call", series=series, xscale="log", yscale="log",
                  note="Points on the dashed line stream their weight at the copy bandwidth; above it, something "
                       "else (conversion, compute) bounds the call.")


LAB = Lab(name="profile", title="Kernel profile on this CPU", run=run, order=65,
          quick={"size": 256, "repeats": 3, "model": None, "budget": 0.05})
"""The quick form (`precisionlab run --quick`, `profile --quick`, the tests): a 256 x 256 layer and no model
(loading SmolLM2, packing its 210 layers for the kernel and profiling its decode took 2.5 minutes at load 13)."""
