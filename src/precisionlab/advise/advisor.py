"""The format advisor: a scenario in, a recommended format out, every column argued with numbers.

The rules are data: `RULES` is one table of rows, one per scenario, whose cells are text
templates. Templates hold no numbers of their own; every number is a `{field}` filled from
facts that `scenario_facts` computes with the format engine (`get_format(...)` limits, `ulp`,
`decode`) and the capacity model (bytes, batch capacity, roofline). To add a scenario, add a
row here and a function there that computes its facts. The custom scenario's format choice
lives in `format_choice`.

Template fields: `{fmt[NAME].prop}` is any registered format's property (max_finite,
min_normal, bias, man_bits, decimal_digits, ...), `{u[NAME]}` its unit roundoff eps/2, and
every other field is a scenario fact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from precisionlab.advise.format_choice import template_fields
from precisionlab.advise.scenario_facts import (
    Inputs,
    custom_facts,
    fp8_portability_facts,
    kv_facts,
    pretrain_facts,
    reduction_facts,
    serve_facts,
)


@dataclass(frozen=True)
class Columns:
    """What a rule's templates and a filled advice share: the scenario, its title and six columns."""

    scenario: str
    title: str
    recommend: str
    range: str
    precision: str
    throughput: str
    risk: str
    revert: str

    COLUMNS = ("recommend", "range", "precision", "throughput", "risk", "revert")


@dataclass(frozen=True)
class Rule(Columns):
    """One row of the rules table: templates for every column, and the facts function that fills them."""

    facts: Callable[[Inputs], dict[str, Any]] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Advice(Columns):
    """A rule filled with its computed facts; `format` is the recommended format's name."""

    format: str
    facts: dict[str, Any]


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
        range="weights need little range: an fp16 scale and a {int4_zero_bits}-bit zero point per {int4_group} "
              "weights map each group's [min, max] onto {levels} levels ({int4_bits:.4g} bits per weight with "
              "scale and zero point)",
        precision="a step of (max − min)/{steps} per group: worst rounding error {int4_rel:.3g} of max|w| for a "
                  "group spanning ±max|w|, against bf16's {u[bf16]:.3g} relative",
        throughput="single-sequence decode runs at {intensity:.2g} FLOP/byte against a ridge of {ridge:.0f}: bandwidth-"
                   "bound, so tokens/s follow bytes: bf16 {tps_bf16:.0f}{bf16_note} → int4 {tps_int4:.0f} tokens/s "
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
                   "{batch_fp8}. The fp16 cache outweighs the {w_gb:.3g} GB of weights {cross_1_text} for "
                   "one sequence and {cross_b_text} at batch {batch}; decode at batch {dbatch}: {tps_fp16:.0f} → "
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
              "decades (max finite {max_finite:.4g}){range_margin_text}",
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


def advise(scenario: str, inputs: Inputs) -> Advice:
    """Fill one rule's templates with its computed facts."""
    rule = get_rule(scenario)
    facts = rule.facts(inputs)
    values = {**template_fields(), **facts}
    cells = {column: getattr(rule, column).format_map(values) for column in Rule.COLUMNS}
    return Advice(scenario=rule.scenario, title=rule.title.format_map(values), format=str(facts["format"]),
                  facts=facts, **cells)


__all__ = ["FIXED_SCENARIOS", "RULES", "SCENARIOS", "Advice", "Inputs", "Rule", "advise", "get_rule"]
