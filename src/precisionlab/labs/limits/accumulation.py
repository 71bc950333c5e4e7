"""Limits lab, accumulator precision: a dot product's error as n grows, and the stall of a repeated sum."""

from __future__ import annotations

import math

import numpy as np

from precisionlab.formats import get_format
from precisionlab.numerics.accumulate import kahan_sum, pairwise_sum, sequential_sum
from precisionlab.numerics.stall import repeated_sum
from precisionlab.results import Figure, Part, Scalar, Series, Table
from precisionlab.rounding import round_to, ulp

DOT_ACCUMULATORS = ("fp16", "bf16", "fp32", "fp64")
DOT_FIXES = ("fp16", "bf16")


def dot_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """x, y iid U[0, 1) (numpy default_rng(seed).random), stored in fp32."""
    rng = np.random.default_rng(seed)
    return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)


def dot_error_section(min_log2_n: int, max_log2_n: int, seed: int) -> Part:
    findings: dict[str, Scalar] = {}
    n_max = 1 << max_log2_n
    x, y = dot_inputs(n_max, seed)
    terms = x.astype(np.float64) * y.astype(np.float64)  # exact: 24 + 24 bits fit in 53
    running = sequential_sum(terms, list(DOT_ACCUMULATORS), cumulative=True)
    kahan = kahan_sum(terms, list(DOT_FIXES), cumulative=True)
    labels = [*DOT_ACCUMULATORS, *(f"{f}_pairwise" for f in DOT_FIXES), *(f"{f}_kahan" for f in DOT_FIXES)]
    ns = [1 << k for k in range(min_log2_n, max_log2_n + 1)]
    errors: dict[str, list[float]] = {label: [] for label in labels}
    rows: list[list[Scalar]] = []
    for n in ns:
        exact = math.fsum(terms[:n])
        pair = pairwise_sum(terms[:n], list(DOT_FIXES))
        values = [*running[:, n - 1], *pair, *kahan[:, n - 1]]
        rel = [abs(float(v) - exact) / exact for v in values]
        for label, e in zip(labels, rel, strict=True):
            errors[label].append(e)
        floors = [abs(float(round_to(exact, f)) - exact) / exact for f in DOT_FIXES]
        rows.append([n, exact, *rel, *floors])
    for label in labels:
        findings[f"dot_relative_error.{label}"] = errors[label][-1]
    table = Table(
        key="dot_error",
        title="Accumulator precision: relative error of a sequential dot product as n grows",
        columns=["n", "exact (fsum)", *labels, *(f"{f}_nearest" for f in DOT_FIXES)],
        rows=rows,
        note=("x, y iid U[0,1) from numpy default_rng(seed), stored in fp32; products exact in float64 (as an "
              "FMA forms them); the same sequential order in every column, each addition rounded once to the "
              "accumulator. Reference: math.fsum (the exact sum, rounded once). fp16/bf16 errors grow with n "
              "(the sum stalls once ulp/2 exceeds a term) while fp32 stays far below its n·u bound. Fixes beside "
              "them: pairwise (tree, error ~log2 n·u) and Kahan (compensated) in the same narrow format stay "
              "within a few ulps of what the format can hold at all; only a wider accumulator goes further, "
              "which is why matrix cores accumulate in fp32. Past n ≈ 2^18 the exact sum (≈ n/4) exceeds "
              "fp16's max 65504: pairwise and Kahan fp16 overflow (inf / NaN) and only the stalled sequential "
              "sum stays finite, being wrong. "
              "*_nearest: the error of the exact sum rounded once to that format (the best it can hold)."),
        formats={"exact (fsum)": ".10g"} | {label: ".3g" for label in labels}
        | {f"{f}_nearest": ".3g" for f in DOT_FIXES},
    )
    series = [Series(label, [float(n) for n in ns], [e if e > 0 else math.nan for e in errors[label]],
                     style="--o" if "_" in label else "-o") for label in labels]
    for name in ("fp16", "fp32"):
        u = get_format(name).eps / 2
        series.append(Series(f"n·u ({name} bound scale)", [float(n) for n in ns], [n * u for n in ns], style=":"))
    figure = Figure(
        key="dot_error",
        title="Relative error of a length-n dot product against the accumulator format",
        xlabel="n (terms)",
        ylabel="relative error vs exact",
        series=series,
        xscale="log",
        yscale="log",
        note="Zero errors (exact results) are not drawn on the log scale.",
    )
    return Part([table], [figure], findings)


def stall_section(count: int) -> Part:
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for name in ("fp16", "bf16", "fp32", "fp64"):
        r = repeated_sum(0.01, name, count)
        rows.append([f"{name} sequential", r.term, count, r.value, r.exact, r.relative_error, r.stall_step,
                     float(ulp(r.value, name)) / 2])
        findings[f"stall_sum.{name}"] = r.value
        findings[f"stall_step.{name}"] = r.stall_step
    for name in ("fp16", "bf16"):
        term = float(round_to(0.01, name))
        total = float(pairwise_sum(np.full(count, term), name))
        exact = count * term
        rows.append([f"{name} pairwise (fix)", term, count, total, exact, abs(total - exact) / exact, None,
                     float(ulp(total, name)) / 2])
        findings[f"stall_sum.{name}_pairwise"] = total
    term32 = np.float32(0.01)
    numpy_sum = float(np.sum(np.full(count, term32, dtype=np.float32)))
    exact32 = count * float(term32)
    rows.append(["fp32 numpy np.sum (blocked pairwise)", float(term32), count, numpy_sum, exact32,
                 abs(numpy_sum - exact32) / exact32, None, float(ulp(numpy_sum, "fp32")) / 2])
    table = Table(
        key="stall",
        title=f"The stall: {count} sequential additions of 0.01 (as stored in each format)",
        columns=["accumulation", "term (stored)", "additions", "result", "exact", "rel error",
                 "first addition lost", "ulp(result)/2"],
        rows=rows,
        note=("A sequential sum stops moving once ulp(s)/2 > term: fp16 at exactly 32 (ulp(32)/2 = 2^-6 = 0.0156 "
              "> 0.0100), bf16 at 4 (ulp(4)/2 = 2^-6); fp32 does not stall but ends near 9865 (1.3% low). "
              "numpy's np.sum is pairwise and hides the effect: test accumulation with an explicit sequential "
              "loop. Fix: pairwise (tree) sums or, better, a wider accumulator."),
        formats={"term (stored)": ".8g", "result": ".10g", "exact": ".10g", "rel error": ".3g",
                 "ulp(result)/2": ".3g"},
    )
    return Part([table], findings=findings)
