"""Limits lab, exp overflow: the first x whose exp(x) leaves each format, and the max-subtracted softmax."""

from __future__ import annotations

import numpy as np

from precisionlab.formats import FloatFormat
from precisionlab.labs.limits.options import with_headline
from precisionlab.numerics.overflow import exp_overflow, softmax_in_format
from precisionlab.results import Figure, Part, Scalar, Series, Table
from precisionlab.rounding import round_to

SOFTMAX_LOGITS = (0.0, 5.0, 10.0, 11.1, 12.0)


def exp_overflow_section(formats: list[FloatFormat]) -> Part:
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for fmt in with_headline(formats):
        result = exp_overflow(fmt)
        findings[f"exp_overflow_x.{fmt.name}"] = result.first_x
        if fmt in formats:
            rows.append([fmt.name, result.max_finite, result.ln_max, result.policy, result.first_saturated_x,
                         result.first_x, result.stored_at_first_x])
    table = Table(
        key="exp_overflow",
        title="exp(x) overflow: first x on a 0.01 grid whose exp(x), rounded to the format, is not finite",
        columns=["format", "max finite", "ln(max)", "overflow policy", "first x with exp(x) > max",
                 "first non-finite x", "stored exp at that x"],
        rows=rows,
        note=("exp(x) is rounded once to the format; it stops being finite past ln(max + ulp(max)/2) (fp16: "
              "ln 65520 = 11.090, so 11.10). Formats that saturate (no inf, no NaN) clamp to max instead: '—'. "
              "An attention logit of 11.1 is ordinary. Fix: subtract the row max first (next table)."),
        formats={"max finite": ".5g", "ln(max)": ".6g"},
    )
    xs = [i * 0.25 for i in range(0, 401)]
    exact = np.exp(np.asarray(xs))
    shown = [f for f in formats if f.name in ("fp16", "bf16", "fp32", "e4m3", "e5m2", "e4m3fnuz")] or formats
    series = [Series("exp(x)", xs, exact.tolist(), style="-")]
    if any(f.name == "fp16" for f in formats):
        stored = np.asarray(round_to(exact, "fp16"), dtype=np.float64)
        series.append(Series("exp(x) stored in fp16 (inf not drawn)", xs, stored.tolist(), style="o"))
    series += [Series(f"{f.name} max = {f.max_finite:.4g}", [xs[0], xs[-1]], [f.max_finite] * 2, style="--")
               for f in shown]
    figure = Figure(
        key="exp_overflow",
        title="exp(x) against each format's largest finite value",
        xlabel="x",
        ylabel="exp(x)",
        series=series,
        yscale="log",
        vlines=[(float(v), f"{name} overflows at {v}") for name in ("fp16", "fp32")
                if any(f.name == name for f in formats) and isinstance(v := findings[f"exp_overflow_x.{name}"], float)],
        note="Where the curve crosses a format's line, exp(x) stops being representable in that format.",
    )
    return Part([table], [figure], findings)


def softmax_section() -> Part:
    findings: dict[str, Scalar] = {}
    logits = list(SOFTMAX_LOGITS)
    naive = softmax_in_format(logits, "fp16", subtract_max=False)
    stable = softmax_in_format(logits, "fp16", subtract_max=True)
    findings["softmax.naive_fp16_finite"] = naive.finite
    findings["softmax.stable_fp16_max_abs_error"] = stable.max_abs_error
    rows: list[list[Scalar]] = [
        [s.method, ", ".join(f"{p:.4g}" for p in s.probabilities), s.finite, s.max_abs_error]
        for s in (naive, stable)
    ]
    table = Table(
        key="softmax",
        title=f"The fix: softmax of logits {logits} in fp16, naive and with the row max subtracted",
        columns=["method", "probabilities", "all finite", "max abs error vs fp64"],
        rows=rows,
        note=("Naive: exp(11.1) and exp(12) overflow to inf, the sum is inf and inf/inf is NaN. Subtracting "
              "max(z) makes every argument <= 0, so exp <= 1 and nothing overflows; the result is the same "
              "softmax mathematically. Every step is rounded to fp16."),
        formats={"max abs error vs fp64": ".3g"},
    )
    return Part([table], findings=findings)
