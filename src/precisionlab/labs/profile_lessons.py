"""The profile lab's lessons: the fused kernels' ratios against fp32, each printed with the conditions it was
measured under (threads, load average at the start and the end, N x K and M, the activations' and weights'
dtypes, the op torch.profiler saw run, torch's CPU capability, whether the fp32 weight fits the cache).

A ratio without its conditions is a claim: the same 4-bit GEMV gains about what its bytes say on a large
layer streamed from memory and can lose on a small one that sits in cache, and torch's int4 kernel has an
AVX-512 body and a slower AVX2 one. So every ratio here comes with the findings
`profile.lesson.conditions.*` and a sentence that reads it in those conditions: a weight that fits the
last-level cache is not streamed from memory, so the bytes do not bound its GEMV and the call's fixed costs
(the casts to and from bf16: the fused call's conversion share) can outweigh them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from precisionlab.results import Part, Scalar, Table

PREFILL = 512
FUSED = ("fused_int4", "fused_int8")


def conditions(rows: Sequence[Any], machine: Any, loads: tuple[tuple[float, ...], tuple[float, ...]],
               cache_mb: float | None) -> dict[str, Scalar]:
    """The conditions of the size x size layer's ratios (see the module), keyed as under
    profile.lesson.conditions."""
    from precisionlab.models.kernels import cpu_capability

    by = {(r.variant, r.m): r for r in rows}
    fp32 = by.get(("fp32", 1))
    out: dict[str, Scalar] = {"threads": machine.threads, "load_average_start": loads[0][0],
                              "load_average_end": loads[1][0], "cpu_capability": cpu_capability()}
    if fp32 is not None:
        out.update({"n": fp32.n, "k": fp32.k, "m": f"1 and {PREFILL}", "fp32_weight_mb": fp32.weight_bytes / 1e6,
                    "fp32_op": fp32.op, "fp32_activations": fp32.activation})
    out["last_level_cache_mb"] = cache_mb
    for variant in FUSED:
        r = by.get((variant, 1))
        if r is not None:
            out.update({f"{variant}_op": r.op, f"{variant}_activations": r.activation,
                        f"{variant}_weights": r.weights, f"{variant}_conversion_share_m1": r.conversion_share})
    return out


def conditions_line(c: dict[str, Scalar]) -> str:
    """The conditions in one sentence."""
    def number(key: str, spec: str = ".3g") -> str:
        value = c.get(key)
        return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"

    kernels = "; ".join(f"{v}: {c.get(f'{v}_op') or 'not run'} on {c.get(f'{v}_weights')} with "
                        f"{c.get(f'{v}_activations')} activations (cast from and back to float32)"
                        for v in FUSED if f"{v}_op" in c)
    cache = f", last-level cache {number('last_level_cache_mb')} MB" if c.get("last_level_cache_mb") else ""
    return (f"Conditions: {c['threads']} torch thread{'s' if c['threads'] != 1 else ''}; load average (1 min) "
            f"{number('load_average_start', '.2f')} at the start, {number('load_average_end', '.2f')} at the end; "
            f"N x K = {c.get('n')} x {c.get('k')}, M = {c.get('m')}; fp32: {c.get('fp32_op')}, float32 weight "
            f"({number('fp32_weight_mb')} MB) and activations; {kernels}; torch CPU capability "
            f"{c['cpu_capability']}{cache}.")


def int4_reading(values: dict[str, float], c: dict[str, Scalar]) -> str:
    """What fused_int4_speedup_m1 says under these conditions (whether the bytes can bound the GEMV)."""
    speedup, share = values["fused_int4_speedup_m1"], c.get("fused_int4_conversion_share_m1")
    weight, cache = c.get("fp32_weight_mb"), c.get("last_level_cache_mb")
    text = "fp32 / fused int4 at M = 1: the GEMV's gain"
    if isinstance(weight, float) and isinstance(cache, (int, float)) and weight < cache:
        text += (f"; here the {weight:.3g} MB fp32 weight fits the {cache:.3g} MB last-level cache, so bytes do not "
                 "bound this GEMV and the call's fixed costs weigh more")
    if isinstance(share, float) and math.isfinite(share):
        text += f" (the casts take {share:.0%} of the fused call)"
    if math.isfinite(speedup) and speedup < 1:
        text += "; < 1: slower than fp32 at this shape"
    return text + " ..."


def lessons_part(rows: Sequence[Any], machine: Any, loads: tuple[tuple[float, ...], tuple[float, ...]],
                 cache_mb: float | None) -> Part:
    """The lessons as measured numbers from the size × size layer, with their conditions (findings
    profile.lesson.<name> and profile.lesson.conditions.<name>)."""
    by = {(r.variant, r.m): r for r in rows}

    def ratio(a: tuple[str, int], b: tuple[str, int]) -> float:
        top, bottom = by.get(a), by.get(b)
        return top.ms / bottom.ms if top is not None and bottom is not None and bottom.ms > 0 else math.nan

    def bytes_ratio(variant: str) -> float:
        fp32, other = by.get(("fp32", 1)), by.get((variant, 1))
        return fp32.weight_bytes / other.weight_bytes if fp32 is not None and other is not None else math.nan

    values = {
        "unfused_int4_over_fused_m1": ratio(("dequant_int4", 1), ("fused_int4", 1)),
        "unfused_int4_over_fp32_m1": ratio(("dequant_int4", 1), ("fp32", 1)),
        "unfused_int8_over_fp32_m1": ratio(("dequant_int8", 1), ("fp32", 1)),
        "fused_int4_speedup_m1": ratio(("fp32", 1), ("fused_int4", 1)),
        "fused_int4_bytes_ratio": bytes_ratio("fused_int4"),
        "fused_int8_speedup_m1": ratio(("fp32", 1), ("fused_int8", 1)),
        "fused_int8_bytes_ratio": bytes_ratio("fused_int8"),
        f"fused_int4_speedup_m{PREFILL}": ratio(("fp32", PREFILL), ("fused_int4", PREFILL)),
        f"fused_int8_speedup_m{PREFILL}": ratio(("fp32", PREFILL), ("fused_int8", PREFILL)),
    }
    c = conditions(rows, machine, loads, cache_mb)
    says = {
        "unfused_int4_over_fused_m1": "unfused int4 time / fused int4 time at M = 1 (> 1: fusing pays)",
        "unfused_int4_over_fp32_m1": "unfused int4 / fp32 at M = 1 (> 1: the unfused dequantization costs more "
                                     "than the smaller weight saves)",
        "unfused_int8_over_fp32_m1": "unfused int8 / fp32 at M = 1",
        "fused_int4_speedup_m1": int4_reading(values, c),
        "fused_int4_bytes_ratio": "... beside what the bytes say (fp32 weight bytes / int4 weight bytes)",
        "fused_int8_speedup_m1": "fp32 / fused int8 at M = 1 ...",
        "fused_int8_bytes_ratio": "... beside fp32 bytes / int8 bytes",
        f"fused_int4_speedup_m{PREFILL}": f"fp32 / fused int4 at M = {PREFILL} (the kernel dequantizes per 4 rows: "
                                          "little gain or a loss)",
        f"fused_int8_speedup_m{PREFILL}": f"fp32 / fused int8 at M = {PREFILL}",
    }
    table = Table(key="lessons", title="What the measurements say", columns=["finding", "measured", "reads as"],
                  rows=[[f"profile.lesson.{k}", v, says[k]] for k, v in values.items()],
                  note=(f"{conditions_line(c)} Ratios of the fastest times in the same run (the size x size layer); "
                        "the conditions are the findings profile.lesson.conditions.*."),
                  formats={"measured": ".3g"})
    findings: dict[str, Scalar] = {f"profile.lesson.{k}": v for k, v in values.items()}
    findings.update({f"profile.lesson.conditions.{k}": v for k, v in c.items()})
    return Part([table], findings=findings)


def summary(findings: dict[str, Scalar], size: Scalar) -> str:
    """The lab's one-line summary: the ratios and, beside them, the conditions they hold under."""
    def number(key: str, spec: str = ".3g") -> str:
        value = findings.get(key)
        return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"

    c = "profile.lesson.conditions."
    threads = findings.get(f"{c}threads")
    text = (f"{size}x{size} at M=1: fp32 / fused int4 = {number('profile.lesson.fused_int4_speedup_m1')} (bytes say "
            f"{number('profile.lesson.fused_int4_bytes_ratio')}), fp32 / fused int8 = "
            f"{number('profile.lesson.fused_int8_speedup_m1')}, unfused int4 "
            f"{number('profile.lesson.unfused_int4_over_fused_m1')}x slower than fused; at M={PREFILL} fp32 / fused "
            f"int4 = {number(f'profile.lesson.fused_int4_speedup_m{PREFILL}')} ({threads} thread"
            f"{'s' if threads != 1 else ''}, load {number(f'{c}load_average_start', '.1f')} -> "
            f"{number(f'{c}load_average_end', '.1f')}, {findings.get(f'{c}fused_int4_op')} with "
            f"{findings.get(f'{c}fused_int4_activations')} activations, {findings.get(f'{c}cpu_capability')})")
    if "profile.decode.linear_share" in findings:
        text += (f"; decode step: linears {number('profile.decode.linear_share')} of the time, int4 step speedup "
                 f"{number('profile.decode.int4_step_speedup')}x (Amdahl: "
                 f"{number('profile.decode.int4_amdahl_speedup')}x)")
    return text
