"""The advise lab: a recommended format per scenario, with range, precision, throughput, risk and revert."""

from __future__ import annotations

from pathlib import Path

from precisionlab.advise.advisor import FIXED_SCENARIOS, SCENARIOS, Advice, Inputs, advise
from precisionlab.capacity.memory import DEFAULT_RESERVE
from precisionlab.capacity.models import finding_key
from precisionlab.formats import get_format
from precisionlab.labs import Lab
from precisionlab.labs.capacity import resolve_accelerator, resolve_model
from precisionlab.labs.formats_table import format_table, two_e4m3_table
from precisionlab.results import LabResult, Scalar, Table

ADVICE_COLUMNS = ["scenario", "recommend", "range", "precision", "throughput", "risk accepted", "revert if"]
CITED_FORMATS = ("fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "int8", "int4")

# Numbers each scenario reports as findings: advise.<scenario>.<fact>.
FINDING_FACTS: dict[str, tuple[str, ...]] = {
    "pretrain": ("bytes_per_param", "train_tb", "min_gpus"),
    "serve": ("tps_bf16", "tps_int4", "speedup", "w_bf16", "w_int4", "batch_bf16", "batch_int4"),
    "reduction": ("stall", "stall_err", "overflow_rms"),
    "kv_cache": ("batch_fp16", "batch_fp8", "cross_1", "cross_b", "tps_fp16", "tps_fp8"),
    "fp8_portability": ("code_ratio", "distinct_ratios", "ckpt_bf16_gb", "ckpt_fp8_gb"),
    "custom": ("have_decades", "roundoff"),
}


def advice_table(items: list[Advice]) -> Table:
    rows: list[list[Scalar]] = [[f"{a.title}", f"{a.format}: {a.recommend}", a.range, a.precision, a.throughput,
                                 a.risk, a.revert] for a in items]
    return Table(key="advice", title="Format advice: every cell filled from the format engine and capacity model",
                 columns=ADVICE_COLUMNS, rows=rows,
                 note="Rules are data (precisionlab.advise.advisor.RULES); their templates hold no numbers, "
                      "each is computed from get_format(...) limits, ulp/decode and the capacity model.")


def run(scenario: str = "all", model: str | None = None, config: str | Path | None = None, name: str | None = None,
        gpu: str = "h100", memory: float | None = None, bandwidth: float | None = None,
        peak_tflops: float | None = None, batch: int = 32, reserve: float = DEFAULT_RESERVE, tp: int = 1,
        context: int = 8192, long_context: int = 131072, role: str = "activations", range_decades: float = 4.0,
        rel_error: float = 1e-2, bound: str = "memory") -> LabResult:
    """Advice for one scenario, all fixed scenarios ('all'), or 'custom' from role/range/precision/bound."""
    if scenario != "all" and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from all, {', '.join(SCENARIOS)}")
    if batch <= 0 or context <= 0 or long_context <= 0:
        raise ValueError("batch, context and long context must be positive")
    names = [g.strip() for g in gpu.split(",") if g.strip()]
    if len(names) != 1:
        raise ValueError(f"advise takes one target accelerator, got {gpu!r}")
    gpu_name = names[0]
    key = finding_key(gpu_name)
    shape = resolve_model(model or "", config, name) if (model or config or name) else None
    inputs = Inputs(accelerator=resolve_accelerator(gpu_name, memory, bandwidth, peak_tflops), gpu_key=key,
                    model=shape, batch=batch, reserve=reserve, tp=tp, context=context, long_context=long_context,
                    role=role, range_decades=range_decades, rel_error=rel_error, bound=bound)
    chosen = [*FIXED_SCENARIOS, "custom"] if scenario == "all" else [scenario]
    items = [advise(s, inputs) for s in chosen]
    findings: dict[str, Scalar] = {}
    for item in items:
        findings[f"advise.{item.scenario}.format"] = item.format
        for fact in FINDING_FACTS.get(item.scenario, ()):
            value = item.facts[fact]
            findings[f"advise.{item.scenario}.{fact}"] = float(value) if isinstance(value, float) else value
    findings["advise.fp8_portability.target_e4m3"] = inputs.accelerator.fp8_formats[0]
    sections = [advice_table(items), two_e4m3_table(),
                format_table([get_format(f) for f in CITED_FORMATS])]
    return LabResult(
        name="advise", title="Advise: which format, argued with range, precision, throughput and risk",
        sections=sections, findings=findings,
        summary=("Recommended: " + "; ".join(f"{item.scenario} {item.format}" for item in items) + ". "
                 "Range first (does it fit?), then precision (is the error small enough?), then throughput (is "
                 "the kernel memory- or compute-bound?), then the risk accepted and what would make you revert."),
        params={"scenario": scenario, "gpu": gpu_name, "model": shape.name if shape else None, "batch": batch,
                "reserve": reserve, "tp": tp, "context": context, "long_context": long_context, "role": role,
                "range_decades": range_decades, "rel_error": rel_error, "bound": bound},
    )


LAB = Lab(name="advise", title="Format advisor", run=run, order=51, quick={})
