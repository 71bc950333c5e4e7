"""Limits lab, summation order: one fp32 sum reduced as B blocks, each result against its error bound."""

from __future__ import annotations

import math

import numpy as np

from precisionlab.labs.limits.options import MAX_BLOCKS
from precisionlab.numerics.blocked import additions_on_longest_path, blocked_sum_fp32, gamma, worst_case_bound
from precisionlab.results import Figure, Part, Scalar, Series, Table


def order_values(n: int, seed: int) -> np.ndarray:
    """U[0, 1) values from default_rng(seed + 1), stored in fp32."""
    return np.random.default_rng(seed + 1).random(n).astype(np.float32)


def summation_order_section(n: int, seed: int) -> Part:
    findings: dict[str, Scalar] = {}
    values = order_values(n, seed)
    exact = math.fsum(values.astype(np.float64))
    blocks = [4**k for k in range(7) if 4**k <= MAX_BLOCKS]
    rows: list[list[Scalar]] = []
    results: list[float] = []
    for b in blocks:
        total = blocked_sum_fp32(values, b)
        bound = worst_case_bound(values, b) / exact
        rel = abs(total - exact) / exact
        results.append(total)
        rows.append([b, n // b, total, total - exact, rel, bound, rel <= bound])
    spread = (max(results) - min(results)) / exact
    findings["summation_order.distinct_results"] = len(set(results))
    findings["summation_order.relative_spread"] = spread
    findings["summation_order.max_relative_error"] = max(abs(r - exact) / exact for r in results)
    findings["summation_order.worst_case_bound"] = gamma(additions_on_longest_path(n, 1))
    table = Table(
        key="summation_order",
        title=f"Summation order: one fp32 sum of {n} U[0,1) values, reduced as B blocks",
        columns=["blocks B", "block length", "fp32 result", "error vs exact", "rel error", "bound γ_k",
                 "within bound"],
        rows=rows,
        note=(f"Each block is summed sequentially in fp32, then the B partials sequentially in fp32. "
              f"{len(set(results))} distinct results, spread {spread:.2e} of the sum: fp32 addition is not "
              "associative, so every partition rounds differently and all are correct. A test must not compare "
              "reductions bit for bit: compare with a float64 reference, |s - ref| <= γ_k·Σ|x| with "
              "γ_k = k·u/(1 - k·u), k = n/B + B - 2 additions on the longest path, u = 2^-24 (or the tighter "
              "typical ~sqrt(k)·u·Σ|x|)."),
        formats={"fp32 result": ".10g", "error vs exact": ".4g", "rel error": ".3g", "bound γ_k": ".3g"},
    )
    figure = Figure(
        key="summation_order",
        title="The same fp32 sum, reduced as B blocks",
        xlabel="blocks B",
        ylabel="relative error vs exact",
        series=[Series("fp32 blocked sum", [float(b) for b in blocks],
                       [abs(r - exact) / exact if r != exact else math.nan for r in results]),
                Series("worst-case bound γ_k (k = n/B + B - 2)", [float(b) for b in blocks],
                       [float(row[5]) for row in rows if isinstance(row[5], float)], style="--")],
        xscale="log",
        yscale="log",
    )
    return Part([table], [figure], findings)
