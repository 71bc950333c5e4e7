"""The limits lab: what each format can and cannot represent, every hazard beside its fix.

Sections: (1) derived format table, (2) one value's round trip, (3) exp overflow and the
max-subtracted softmax, (4) 1 + t and fp32 master weights, (5) accumulator precision and
the stall, with pairwise and Kahan beside them, (6) summation order, (7) cancellation in
variance, (8) the two E4M3s and the vendor cross-check. All arithmetic is emulated
exactly (numerics); nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from precisionlab.formats import FloatFormat, get_format, list_formats
from precisionlab.labs import Lab
from precisionlab.labs.formats_table import custom_format_note, format_table, two_e4m3_table
from precisionlab.numerics.accumulate import kahan_sum, pairwise_sum, sequential_sum
from precisionlab.numerics.blocked import additions_on_longest_path, blocked_sum_fp32, gamma, worst_case_bound
from precisionlab.numerics.crosscheck import all_codes, vendor_mismatches
from precisionlab.numerics.overflow import exp_overflow, softmax_in_format
from precisionlab.numerics.stall import repeated_sum
from precisionlab.numerics.updates import POWERS_OF_TEN, apply_updates, one_plus, smallest_surviving_update
from precisionlab.numerics.variance import (
    one_pass_variance_fp32,
    reference_variance,
    shifted_variance_fp32,
    two_pass_variance_fp32,
    welford_variance_fp32,
)
from precisionlab.peers import install_hint, missing_reason
from precisionlab.results import Figure, LabResult, Scalar, Series, Table
from precisionlab.rounding import encode, round_to, ulp

Progress = Callable[[str], None]

MAX_BLOCKS = 4096
MAX_ORDER_N = 1 << 24
"""Largest summation-order sum (64 MiB of fp32 values plus a float64 copy for the exact sum)."""
MAX_VALUES = 10**7
"""Largest variance / drift / stall size: Welford is a per-value Python loop (~3 µs a value)
and the pairwise stall fix holds every term in memory."""
HEADLINE_FORMATS = ("fp16", "bf16", "fp32")
"""Formats whose exp-overflow and 1 + t findings are always reported, whatever --formats shows."""
SECTION_STEPS = 7
"""Progress callbacks per run (one at the start of sections 2 to 8)."""
DOT_ACCUMULATORS = ("fp16", "bf16", "fp32", "fp64")
DOT_FIXES = ("fp16", "bf16")
SOFTMAX_LOGITS = (0.0, 5.0, 10.0, 11.1, 12.0)
FTZ_NOTE = ("Flush-to-zero: CUDA's -ftz=true (implied by --use_fast_math) flushes fp32 subnormals to zero, HIP's "
            "-fgpu-flush-denormals-to-zero does the same on AMD, and x86 sets MXCSR FTZ/DAZ under -ffast-math. "
            "numpy runs with them off, so every value here is IEEE gradual underflow; 'with FTZ' is what a "
            "flushing kernel would keep.")


def run(value: float = 0.1, formats: Sequence[str] | None = None, min_log2_n: int = 6, max_log2_n: int = 16,
        order_n: int = 1 << 20, variance_n: int = 100_000, drift_n: int = 1_000_000, stall_count: int = 1_000_000,
        seed: int = 0, progress: Progress | None = None) -> LabResult:
    """Run every section. Sizes: dot products of n = 2^min_log2_n .. 2^max_log2_n, an
    order_n-value sum (a multiple of 4096), variance of variance_n values (and of drift_n
    values to show the drift of the fixes; 0 skips), stall_count repeated additions.
    formats: float formats for sections 2-4 (default: every float)."""
    chosen = _float_formats(formats)
    _check_sizes(value, min_log2_n, max_log2_n, order_n, variance_n, drift_n, stall_count, seed)
    say = progress or (lambda _: None)
    findings: dict[str, Scalar] = {}
    sections: list[Table] = [format_table()]
    figures: list[Figure] = []

    say("round trip")
    sections.append(round_trip_table(value, chosen, findings))
    say("exp overflow")
    table, figure = exp_overflow_section(chosen, findings)
    sections += [table, softmax_table(findings)]
    figures.append(figure)
    say("1 + t")
    sections += [one_plus_table(chosen, findings), update_fix_table(seed)]
    say("accumulator precision")
    table, figure = dot_error_section(min_log2_n, max_log2_n, seed, findings)
    sections += [table, stall_table(stall_count, findings)]
    figures.append(figure)
    say("summation order")
    table, figure = summation_order_section(order_n, seed, findings)
    sections.append(table)
    figures.append(figure)
    say("cancellation")
    sections.append(variance_table(variance_n, drift_n, seed, findings))
    say("fp8 variants")
    sections += [fp8_trap_table(findings), fp8_crosscheck_table(findings)]
    result = LabResult(
        name="limits",
        title="Limits: what each format can and cannot represent, every hazard beside its fix",
        sections=sections,
        figures=figures,
        findings=findings,
        params={"value": value, "formats": ",".join(f.name for f in chosen), "min_log2_n": min_log2_n,
                "max_log2_n": max_log2_n, "order_n": order_n, "variance_n": variance_n,
                "drift_n": drift_n, "stall_count": stall_count, "seed": seed},
        summary=("".join(f"{note}. " for note in _custom_notes(formats)) + _headline(findings, max_log2_n) + " "
                 "Every number is measured on emulated arithmetic with one exact rounding per operation. "
                 "Read each hazard with the fix printed beside it: subtract the max before exp, keep fp32 master "
                 "weights, accumulate in fp32 (or pairwise), compare reductions with a tolerance, subtract the "
                 "mean before squaring, and know which E4M3 your hardware means."),
    )
    checked = str(findings["vendor_crosscheck.libraries"]).split(", ")
    for library in VENDOR_LIBRARIES:
        if library not in checked:
            result.skip(f"vendor_crosscheck.{library}", f"the {library} column of the fp8 code cross-check",
                        missing_reason(library), install_hint(library), section="fp8_crosscheck")
    return result


def _custom_notes(names: Sequence[str] | None) -> list[str]:
    """'custom format e4m4: ...' for each name given that is not a registered format."""
    notes = [custom_format_note(name, get_format(name)) for name in names or ()]
    return list(dict.fromkeys(note for note in notes if note))


def _headline(findings: dict[str, Scalar], max_log2_n: int) -> str:
    """The lab's headline: three of its hazards in numbers (the headline formats are always measured)."""
    exp16, keep16 = findings["exp_overflow_x.fp16"], findings["smallest_surviving_update.bf16"]
    dot16 = findings["dot_relative_error.fp16"]
    dot = f"{dot16:.0%}" if isinstance(dot16, float) else str(dot16)
    keep = f"{keep16:g}" if isinstance(keep16, float) else str(keep16)
    return (f"exp(x) overflows fp16 from x = {exp16}, in bf16 1.0 + t stays 1.0 for every power of ten t below "
            f"{keep}, and a sequential fp16 dot product of 2^{max_log2_n} terms is off by {dot}.")


# --- options ------------------------------------------------------------------------------


def _float_formats(names: Sequence[str] | None) -> list[FloatFormat]:
    if names is None:
        return [f for f in list_formats("float") if isinstance(f, FloatFormat)]
    chosen: list[FloatFormat] = []
    for name in names:
        fmt = get_format(name)
        if not isinstance(fmt, FloatFormat):
            raise ValueError(f"{fmt.name} is an integer format; the limits lab compares float formats")
        if fmt not in chosen:  # an alias or a repeat names the same format once
            chosen.append(fmt)
    if not chosen:
        raise ValueError("give at least one format")
    return chosen


def _check_sizes(value: float, min_log2_n: int, max_log2_n: int, order_n: int, variance_n: int, drift_n: int,
                 stall_count: int, seed: int) -> None:
    """ValueError (one line, naming the option) for any option the lab cannot run with."""
    if not math.isfinite(value):
        raise ValueError(f"value must be a finite number, got {value}")
    if not 1 <= min_log2_n <= max_log2_n <= 24:
        raise ValueError(f"need 1 <= min_log2_n <= max_log2_n <= 24, got {min_log2_n} and {max_log2_n}")
    if not 0 < order_n <= MAX_ORDER_N or order_n % MAX_BLOCKS:
        raise ValueError(f"order_n must be a positive multiple of {MAX_BLOCKS} up to {MAX_ORDER_N}, got {order_n}")
    if not 2 <= variance_n <= MAX_VALUES:
        raise ValueError(f"variance_n must be between 2 and {MAX_VALUES}, got {variance_n}")
    if drift_n != 0 and not 2 <= drift_n <= MAX_VALUES:
        raise ValueError(f"drift_n must be 0 (skip) or between 2 and {MAX_VALUES}, got {drift_n}")
    if not 1 <= stall_count <= MAX_VALUES:
        raise ValueError(f"stall_count must be between 1 and {MAX_VALUES}, got {stall_count}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")


# --- section 2: round trip ------------------------------------------------------------------


def _value_class(value: float, stored: float, fmt: FloatFormat) -> str:
    if math.isnan(stored):
        return "nan (overflow)" if abs(value) > fmt.max_finite else "nan (not representable)"
    if math.isinf(stored):
        return "inf (overflow)"
    if stored == 0:
        return "zero" if value == 0 else "zero (underflow)"
    if abs(stored) < fmt.min_normal:
        return "subnormal"
    return "normal"


def round_trip_table(value: float, formats: list[FloatFormat], findings: dict[str, Scalar]) -> Table:
    rows: list[list[Scalar]] = []
    for fmt in formats:
        stored = float(round_to(value, fmt, nan="zero"))
        code = int(encode(value, fmt, nan="zero"))
        width = (fmt.bits + 3) // 4
        finite = math.isfinite(stored)
        abs_err = abs(stored - value) if finite else math.inf
        rel_err = abs_err / abs(value) if value != 0 and finite else (0.0 if finite else math.inf)
        kind = "saturated (overflow)" if finite and abs(value) > fmt.max_finite else _value_class(value, stored, fmt)
        ftz = math.copysign(0.0, stored) if kind == "subnormal" else stored
        rows.append([fmt.name, stored, f"0x{code:0{width}x}", abs_err, rel_err, kind, ftz])
        findings[f"round_trip_relative_error.{fmt.name}"] = rel_err
    return Table(
        key="round_trip",
        title=f"Round trip of {value!r} through every format (nearest-even, each format's overflow policy)",
        columns=["format", "stored", "code", "abs error", "rel error", "class", "with FTZ"],
        rows=rows,
        note=("The stored value is the nearest member; rel error <= ulp/2 / |x| = 2^-(M+1) for normal values. "
              + FTZ_NOTE),
        formats={"stored": ".10g", "abs error": ".3g", "rel error": ".3g", "with FTZ": ".10g"},
    )


# --- section 3: exp overflow ------------------------------------------------------------------


def _with_headline(formats: list[FloatFormat]) -> list[FloatFormat]:
    """The shown formats, then any headline format they lack (its finding is reported, not shown)."""
    shown = {f.name for f in formats}
    return formats + [f for f in map(get_format, HEADLINE_FORMATS)
                      if f.name not in shown and isinstance(f, FloatFormat)]


def exp_overflow_section(formats: list[FloatFormat], findings: dict[str, Scalar]) -> tuple[Table, Figure]:
    rows: list[list[Scalar]] = []
    for fmt in _with_headline(formats):
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
    return table, figure


def softmax_table(findings: dict[str, Scalar]) -> Table:
    logits = list(SOFTMAX_LOGITS)
    naive = softmax_in_format(logits, "fp16", subtract_max=False)
    stable = softmax_in_format(logits, "fp16", subtract_max=True)
    findings["softmax.naive_fp16_finite"] = naive.finite
    findings["softmax.stable_fp16_max_abs_error"] = stable.max_abs_error
    rows: list[list[Scalar]] = [
        [s.method, ", ".join(f"{p:.4g}" for p in s.probabilities), s.finite, s.max_abs_error]
        for s in (naive, stable)
    ]
    return Table(
        key="softmax",
        title=f"The fix: softmax of logits {logits} in fp16, naive and with the row max subtracted",
        columns=["method", "probabilities", "all finite", "max abs error vs fp64"],
        rows=rows,
        note=("Naive: exp(11.1) and exp(12) overflow to inf, the sum is inf and inf/inf is NaN. Subtracting "
              "max(z) makes every argument <= 0, so exp <= 1 and nothing overflows; the result is the same "
              "softmax mathematically. Every step is rounded to fp16."),
        formats={"max abs error vs fp64": ".3g"},
    )


# --- section 4: 1 + t ---------------------------------------------------------------------------


def one_plus_table(formats: list[FloatFormat], findings: dict[str, Scalar]) -> Table:
    ts = list(POWERS_OF_TEN)
    rows: list[list[Scalar]] = []
    for fmt in _with_headline(formats):
        results = one_plus(ts, fmt).tolist()
        smallest = smallest_surviving_update(fmt, ts)
        findings[f"smallest_surviving_update.{fmt.name}"] = smallest
        if fmt in formats:
            rows.append([fmt.name, fmt.eps / 2, *results, smallest])
    columns = ["format", "ulp(1)/2", *[f"1+1e-{k}" for k in range(1, 9)], "smallest surviving t"]
    return Table(
        key="one_plus",
        title="1.0 + t: the stored result, and the smallest power of ten that still changes 1.0",
        columns=columns,
        rows=rows,
        note=("1 + t leaves 1.0 only when t > ulp(1)/2 = 2^-(M+1). fp16 keeps 1e-3 and loses 1e-4, bf16 keeps "
              "1e-2 and loses 1e-3, fp32 keeps 1e-7: a 1e-3 update to a bf16 weight of 1.0 is not small, it "
              "is gone, every step. Fix: fp32 master weights (next table)."),
        formats={c: ".10g" for c in columns[2:-1]} | {"ulp(1)/2": ".3g", "smallest surviving t": ".0e"},
    )


def update_fix_table(seed: int) -> Table:
    count, update = 1000, 1e-3
    exact = 1.0 + count * update
    bf16_direct = float(apply_updates(1.0, update, count, "bf16")[0])
    fp16_direct = float(apply_updates(1.0, update, count, "fp16")[0])
    master = float(apply_updates(1.0, update, count, "fp32")[0])
    master_cast = float(round_to(master, "bf16"))
    lanes = 16
    stochastic = apply_updates(1.0, update, count, "bf16", rounding="stochastic", lanes=lanes, seed=seed)
    rows: list[list[Scalar]] = [
        ["bf16 weight, nearest-even", bf16_direct, abs(bf16_direct - exact) / exact],
        ["fp16 weight, nearest-even", fp16_direct, abs(fp16_direct - exact) / exact],
        ["fp32 master weight", master, abs(master - exact) / exact],
        ["fp32 master, cast to bf16 for the forward pass", master_cast, abs(master_cast - exact) / exact],
        [f"bf16 weight, stochastic rounding (mean of {lanes} runs)", float(stochastic.mean()),
         abs(float(stochastic.mean()) - exact) / exact],
    ]
    return Table(
        key="update_fix",
        title=f"The fix: {count} updates of {update:g} applied to a weight of 1.0 (exact result {exact:g})",
        columns=["weights kept in", "final weight", "rel error"],
        rows=rows,
        note=("In bf16 every update is rounded away; in fp16 each one is rounded to a multiple of the local "
              "spacing and the weight drifts. An fp32 master copy keeps them, and the bf16 cast of the master is "
              "the nearest bf16 to the right answer. Stochastic rounding keeps the update on average."),
        formats={"final weight": ".8g", "rel error": ".3g"},
    )


# --- section 5: accumulator precision -------------------------------------------------------------


def dot_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """x, y iid U[0, 1) (numpy default_rng(seed).random), stored in fp32."""
    rng = np.random.default_rng(seed)
    return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)


def dot_error_section(min_log2_n: int, max_log2_n: int, seed: int,
                      findings: dict[str, Scalar]) -> tuple[Table, Figure]:
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
    return table, figure


def stall_table(count: int, findings: dict[str, Scalar]) -> Table:
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
    return Table(
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


# --- section 6: summation order ----------------------------------------------------------------


def order_values(n: int, seed: int) -> np.ndarray:
    """U[0, 1) values from default_rng(seed + 1), stored in fp32."""
    return np.random.default_rng(seed + 1).random(n).astype(np.float32)


def summation_order_section(n: int, seed: int, findings: dict[str, Scalar]) -> tuple[Table, Figure]:
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
    return table, figure


# --- section 7: cancellation ---------------------------------------------------------------------


def variance_values(n: int, seed: int) -> np.ndarray:
    """1e6 + U(-1, 1) from default_rng(seed + 2), stored in fp32 (true variance about 1/3)."""
    return (1e6 + np.random.default_rng(seed + 2).uniform(-1.0, 1.0, n)).astype(np.float32)


def variance_table(n: int, drift_n: int, seed: int, findings: dict[str, Scalar]) -> Table:
    values = variance_values(n, seed)
    reference = reference_variance(values)
    methods = [
        ("one-pass mean(x²) - mean(x)², fp32, streaming sums", "variance.one_pass_fp32",
         one_pass_variance_fp32(values, "sequential")),
        ("one-pass mean(x²) - mean(x)², fp32, tree sums", "variance.one_pass_tree_fp32",
         one_pass_variance_fp32(values, "pairwise")),
        ("two-pass Σ(x-m)²/n, fp32, tree sums (fix)", "variance.two_pass_fp32", two_pass_variance_fp32(values)),
        ("Welford, fp32 (fix)", "variance.welford_fp32", welford_variance_fp32(values)),
        ("shifted one-pass on x - x[0], fp32, tree sums (fix at any n)", "variance.shifted_fp32",
         shifted_variance_fp32(values)),
        ("reference: fp64 two-pass of the stored data", "variance.reference_fp64", reference),
    ]
    rows: list[list[Scalar]] = []
    for label, key, result in methods:
        rel = abs(result - reference) / reference
        verdict = "reference" if key == "variance.reference_fp64" else "ok (< 5%)" if rel < 0.05 else "wrong"
        rows.append([label, n, result, rel, verdict])
        findings[key] = result
    if drift_n:
        drift_values = variance_values(drift_n, seed)
        drift_reference = reference_variance(drift_values)
        for label, key, result in (
            ("two-pass, fp32, tree sums, larger n", "variance.drift_two_pass_rel_error",
             two_pass_variance_fp32(drift_values)),
            ("Welford, fp32, larger n", "variance.drift_welford_rel_error", welford_variance_fp32(drift_values)),
            ("shifted one-pass, fp32, larger n", "variance.drift_shifted_rel_error",
             shifted_variance_fp32(drift_values)),
        ):
            rel = abs(result - drift_reference) / drift_reference
            rows.append([label, drift_n, result, rel, "ok (< 5%)" if rel < 0.05 else "wrong"])
            findings[key] = rel
    return Table(
        key="variance",
        title=f"Cancellation: variance of {n} values 1e6 + U(-1,1) stored in fp32 (true variance ≈ 1/3)",
        columns=["method", "n", "variance", "rel error vs fp64", "verdict"],
        rows=rows,
        note=("mean(x²) and mean(x)² are both ≈ 1e12, where fp32's spacing is 2^16 = 65536: their difference "
              "cannot hold 1/3, so one-pass returns a multiple of 65536 (zero, negative, or huge). The fix is "
              "algebraic: subtract the mean first (two-pass) or use Welford's update, as LayerNorm kernels do. "
              "Neither is immune as n grows. Two-pass errs by exactly (mean error)²: its fp32 mean (tree sum / n, "
              "spacing 1/16 near 1e6) can be a whole 1/16 off, about 1% of the variance (n = 30000: 1.2%). "
              "Welford's update m + (x - m)/k is lost once |x - m|/k < 1/32, so its mean freezes (the stall shown "
              "above) and the frozen mean's error squared lands in the variance (0.5% to 18% over seeds at "
              "n = 1e6). Shifting the data first (y = x - x[0], exact here by Sterbenz) leaves nothing large to "
              "cancel: even the one-pass formula is then accurate to ~1e-7 at any n."),
        formats={"variance": ".8g", "rel error vs fp64": ".3g"},
    )


# --- section 8: the two E4M3s -------------------------------------------------------------------


VENDOR_LIBRARIES = ("ml_dtypes", "torch")
"""The libraries the fp8 codes are cross-checked against (both optional)."""
def fp8_trap_table(findings: dict[str, Scalar]) -> Table:
    """The two-E4M3 table (shared with the advisor, see formats_table.two_e4m3_table) and its findings."""
    decoded = {name: all_codes(name) for name in ("e4m3", "e4m3fnuz")}
    ocp, fnuz = get_format("e4m3"), get_format("e4m3fnuz")
    findings["fnuz_vs_ocp.decode_ratio"] = float(decoded["e4m3"][0x40] / decoded["e4m3fnuz"][0x40])
    findings["fnuz_vs_ocp.max_e4m3"] = ocp.max_finite
    findings["fnuz_vs_ocp.max_e4m3fnuz"] = fnuz.max_finite
    findings["fnuz_vs_ocp.code_0x80_e4m3"] = float(decoded["e4m3"][0x80])
    findings["fnuz_vs_ocp.code_0x80_e4m3fnuz"] = float(decoded["e4m3fnuz"][0x80])
    return two_e4m3_table()


def fp8_crosscheck_table(findings: dict[str, Scalar]) -> Table:
    rows: list[list[Scalar]] = []
    total = 0
    checked: set[str] = set()
    for name in ("e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz"):
        fmt = get_format(name)
        values = all_codes(name)
        result = vendor_mismatches(name)
        cells: list[Scalar] = []
        for library in VENDOR_LIBRARIES:
            count = result[library]
            if count is None:
                cells.append("skipped: not installed")
            else:
                cells.append(count)
                total += count
                checked.add(library)
        rows.append([name, fmt.code_count, int(np.isnan(values).sum()), fmt.has_negative_zero, fmt.max_finite,
                     *cells])
    findings["vendor_crosscheck.mismatches"] = total if checked else "skipped: not installed"
    findings["vendor_crosscheck.libraries"] = ", ".join(sorted(checked)) if checked else "none"
    return Table(
        key="fp8_crosscheck",
        title="All 256 codes decoded by precisionlab, cross-checked against ml_dtypes and torch",
        columns=["format", "codes", "NaN codes", "-0", "max finite", "ml_dtypes mismatches", "torch mismatches"],
        rows=rows,
        note=("A mismatch is a code whose decoded values differ bit for bit (signed zero included; NaN matches "
              "NaN). Expected 0. A library that is not installed is reported as skipped, never as a pass."),
        formats={"max finite": ".6g"},
    )


LAB = Lab(
    name="limits",
    title="Numerics hazards: overflow, lost updates, accumulation, order, cancellation, fp8 variants",
    run=run,
    order=10,
    quick={"min_log2_n": 4, "max_log2_n": 10, "order_n": 1 << 14, "variance_n": 20_000, "drift_n": 0,
           "stall_count": 1_000_000},
)

__all__ = ["LAB", "run"]
