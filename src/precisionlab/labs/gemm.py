"""The GEMM lab: storage × accumulator variants, fp8 accumulation, bit widths and the roofline.

CPU backend: exact emulation (errors) plus timings of the real CPU matmul libraries
(hardware) and the machine's copy bandwidth (the measured roofline). GPU backend
(labs.gemm_gpu): the Triton kernels and library paths of precisionlab.gemm.kernels (needs CUDA).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from precisionlab.gemm import ceilings as ceiling_options
from precisionlab.gemm.roofline import Ceilings
from precisionlab.gemm.study import VariantResult, k_sweep, predicted_from_ulp, run_variants
from precisionlab.gemm.timing import Timing, copy_bandwidth, matmul_timings, torch_available
from precisionlab.gemm.traffic import check_sizes
from precisionlab.gemm.variants import (
    BLOCK_K,
    GEMV_VARIANTS,
    NARROW_ACC_BITS,
    NARROW_ACC_ROUNDING,
    Variant,
    bit_width_variants,
    standard_variants,
)
from precisionlab.labs import Lab
from precisionlab.labs.gemm_roofline import roofline_figure
from precisionlab.peers import install_hint, missing_reason
from precisionlab.results import Figure, LabResult, Part, Scalar, Series, Table

Stage = Callable[[str], None]
K_SWEEP = (128, 256, 512, 1024, 2048, 4096)
MAX_SIZES = {"size": 4096, "gemv_size": 16384, "k_max": 1 << 16, "sweep_outputs": 256, "ceiling_size": 8192,
             "gpu_size": 32768}
"""Upper bounds of the size options: beyond them the arrays outgrow memory or the emulation runs for days."""
STAGES = 7


def math_precision(variant: Variant) -> str:
    """The math unit a GPU kernel for this variant uses: fp8 for 8-bit storage, else the storage."""
    bits = variant.storage_format.bits
    return "fp8" if bits == 8 else variant.storage


def run(size: int = 256, gemv_size: int = 2048, tile: int = 32, acc_bits: int = NARROW_ACC_BITS,
        acc_rounding: str = NARROW_ACC_ROUNDING, k_max: int = 4096, sweep_outputs: int = 32, ceiling_size: int = 1024,
        time_budget: float = 0.1, seed: int = 0, backend: str = "cpu", accelerator: str | None = None,
        peak_tflops: tuple[str, ...] = (), bandwidth: float | None = None, gpu_size: int = 8192,
        stage: Stage | None = None) -> LabResult:
    """Run the lab. `stage` (optional) is called with a description as each of STAGES stages starts."""
    datasheet = check_options(size, gemv_size, tile, acc_bits, acc_rounding, k_max, sweep_outputs, ceiling_size,
                              time_budget, backend, accelerator, peak_tflops, bandwidth, gpu_size, seed)
    if backend == "gpu":
        from precisionlab.labs.gemm_gpu import run_gpu

        return run_gpu(gpu_size, seed, datasheet=datasheet)
    note = stage or (lambda _: None)
    variants = standard_variants(acc_bits, acc_rounding)
    by_name = {v.name: v for v in variants}
    note(f"emulating {len(variants)} variants at {size}³")
    square = run_variants(variants, size, size, size, tile, seed)
    note(f"emulating GEMV 1×{gemv_size}×{gemv_size}")
    gemv = run_variants([by_name[n] for n in GEMV_VARIANTS], 1, gemv_size, gemv_size, tile, seed)
    note("storage bit-width sweep")
    done = {r.variant.name: r for r in square}
    bits = [done.get(v.name) or run_variants([v], size, size, size, tile, seed)[0] for v in bit_width_variants()]
    note(f"fp8 accumulation sweep up to K={k_max}")
    ks = [k for k in K_SWEEP if k <= k_max] + ([k_max] if k_max not in K_SWEEP else [])
    sweep_names = ("e4m3_tensor", "e4m3_narrowacc", "e4m3_narrowacc_promoted")
    sweeps = {name: k_sweep(by_name[name], ks, sweep_outputs, seed) for name in sweep_names}
    note("timing CPU matmul libraries")
    hardware = distinct_timings([*matmul_timings(size, size, size, time_budget),
                                 *matmul_timings(1, gemv_size, gemv_size, time_budget),
                                 *matmul_timings(ceiling_size, ceiling_size, ceiling_size, time_budget)])
    note("measuring copy bandwidth")
    copy = copy_bandwidth(budget_s=time_budget)
    note("building the roofline")
    measured = measured_ceilings(hardware, copy)
    result = assemble(square, gemv, bits, sweeps, hardware, copy, measured, datasheet,
                      params={"size": size, "gemv_size": gemv_size, "tile": tile, "acc_bits": acc_bits,
                              "acc_rounding": acc_rounding, "k_max": k_max, "sweep_outputs": sweep_outputs,
                              "seed": seed, "backend": backend})
    if not torch_available():
        result.skip("torch_matmul", "torch fp32 / bf16 / fp16 matmul timings (and their roofline ceilings)",
                    missing_reason("torch"), install_hint("torch"), section="hardware")
    return result


def check_options(size: int = 256, gemv_size: int = 2048, tile: int = 32, acc_bits: int = NARROW_ACC_BITS,
                  acc_rounding: str = NARROW_ACC_ROUNDING, k_max: int = 4096, sweep_outputs: int = 32,
                  ceiling_size: int = 1024, time_budget: float = 0.1, backend: str = "cpu",
                  accelerator: str | None = None, peak_tflops: tuple[str, ...] = (), bandwidth: float | None = None,
                  gpu_size: int = 8192, seed: int = 0) -> Ceilings | None:
    """Every option checked before any work (one-line ValueError); returns the datasheet ceilings, if any.

    Sizes positive and at most MAX_SIZES (beyond them the arrays alone outgrow memory, or the exact
    emulation would run for days); size, gemv N=K multiples of the tile; k_max >= 128; gpu_size a
    multiple of 128; time_budget a positive finite number of seconds; seed non-negative."""
    check_sizes(size, size, size, tile)
    check_sizes(1, gemv_size, gemv_size, tile)
    if k_max < K_SWEEP[0]:
        raise ValueError(f"k_max must be at least {K_SWEEP[0]}, got {k_max}")
    given = {"size": size, "gemv_size": gemv_size, "k_max": k_max, "sweep_outputs": sweep_outputs,
             "ceiling_size": ceiling_size, "gpu_size": gpu_size}
    for label, value in given.items():
        if not 0 < value <= MAX_SIZES[label]:
            raise ValueError(f"{label} must be a positive integer up to {MAX_SIZES[label]}, got {value}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    if backend not in ("cpu", "gpu"):
        raise ValueError(f"backend must be 'cpu' or 'gpu', got {backend!r}")
    if backend == "gpu" and gpu_size % BLOCK_K:
        raise ValueError(f"gpu_size={gpu_size} is not a multiple of {BLOCK_K} (the fp8 block edge)")
    if not (math.isfinite(time_budget) and time_budget > 0):
        raise ValueError(f"time_budget must be positive seconds, got {time_budget}")
    standard_variants(acc_bits, acc_rounding)  # accumulator bits and rounding
    return ceiling_options.datasheet(accelerator, peak_tflops, bandwidth)


def distinct_timings(timings: list[Timing]) -> list[Timing]:
    """One timing per (library, precision, shape): a kernel too slow for the budget at a large size
    is timed at a smaller one (`gemm.timing.fitting_shape`), which another request may share."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for t in timings:
        if (t.library, t.precision, t.shape) not in seen:
            seen.add((t.library, t.precision, t.shape))
            kept.append(t)
    return kept


def measured_ceilings(hardware: list[Timing], copy: Timing) -> Ceilings:
    """This machine's roofs: copy bandwidth and the best measured matmul rate per precision."""
    peaks: dict[str, float] = {}
    for t in hardware:
        peaks[t.precision] = max(peaks.get(t.precision, 0.0), t.gflops)
    return Ceilings("this CPU (measured)", copy.gbps, peaks)


def assemble(square: list[VariantResult], gemv: list[VariantResult], bits: list[VariantResult],
             sweeps: dict[str, list], hardware: list[Timing], copy: Timing, measured: Ceilings,
             datasheet: Ceilings | None, params: dict[str, Scalar]) -> LabResult:
    findings: dict[str, Scalar] = {}
    for r in square:
        findings.update(variant_findings(r.variant.name, r))
    for r in gemv:
        findings.update(variant_findings(f"gemv_{r.variant.name}", r))
    err = {r.variant.name: r.max_rel_err for r in square}
    findings["gemm.bf16_over_fp16_error_ratio"] = err["bf16"] / err["fp16"]
    findings["gemm.fp16_acc_error_ratio"] = err["fp16_acc16"] / err["fp16"]
    last = {name: points[-1] for name, points in sweeps.items()}
    findings["gemm.fp8_promotion_error_gain"] = (last["e4m3_narrowacc"].max_rel_err
                                                 / last["e4m3_narrowacc_promoted"].max_rel_err)
    findings["gemm.fp8_promotion_acc_only_gain"] = (last["e4m3_narrowacc"].acc_only_max_rel_err
                                                    / last["e4m3_narrowacc_promoted"].acc_only_max_rel_err)
    findings["gemm.traffic.fp32_read_intensity"] = _by_name(square, "fp32").traffic.read_intensity
    findings["gemm.traffic.fp16_read_intensity"] = _by_name(square, "fp16").traffic.read_intensity
    findings.update(roof_findings("measured", measured, square, gemv))
    if datasheet is not None:
        findings.update(roof_findings("datasheet", datasheet, square, gemv))
    findings["machine.copy_gbps"] = copy.gbps
    for precision, peak in measured.peaks_gflops.items():
        findings[f"machine.{precision}_matmul_gflops"] = peak
    result = LabResult(
        name="gemm",
        title="Mixed-precision GEMM: storage vs accumulator, fp8 accumulation, roofline",
        params=params,
        summary=(f"bf16/fp16 error ratio {findings['gemm.bf16_over_fp16_error_ratio']:.3g} "
                 f"(ulp(1) ratio 8); fp16 accumulator {findings['gemm.fp16_acc_error_ratio']:.3g}× worse than "
                 f"fp16 storage; promotion every 128 cuts the narrow-accumulator error "
                 f"{findings['gemm.fp8_promotion_error_gain']:.3g}× at K={params['k_max']}. "
                 "Errors are exact emulation; timings in the hardware table are real CPU libraries."),
    )
    result.add(Part([
        variant_table("variants", f"GEMM variants, {_shape(square[0])} (exact CPU emulation)", square, datasheet),
        variant_table("gemv", f"Decode-like GEMV, {_shape(gemv[0])} (exact CPU emulation)", gemv, datasheet),
    ], findings=findings))
    result.add(bits_section(bits))
    result.add(Part([sweep_table(sweeps, params)]))
    result.add(hardware_section(hardware, measured))
    result.add(Part([ceilings_table(measured, datasheet)],
                    [bits_figure(bits), sweep_figure(sweeps), roofline_figure(hardware, measured, datasheet, params)]))
    return result


def roof_findings(label: str, roof: Ceilings, square: list[VariantResult],
                  gemv: list[VariantResult]) -> dict[str, Scalar]:
    """Which roof (measured on this machine, or datasheet) a tiled kernel of each variant sits under, by its
    analytic intensity, and the rate that roof allows; variants whose math unit the roof lacks are skipped."""
    findings: dict[str, Scalar] = {}
    for prefix, results in (("", square), ("gemv_", gemv)):
        for r in results:
            precision = math_precision(r.variant)
            if precision in roof.peaks_gflops:
                key = f"roofline.{label}.{prefix}{r.variant.name}"
                findings[f"{key}.bound"] = roof.bound(precision, r.traffic.intensity)
                findings[f"{key}.attainable_tflops"] = roof.attainable(precision, r.traffic.intensity) / 1e3
    return findings


def _by_name(results: list[VariantResult], name: str) -> VariantResult:
    return next(r for r in results if r.variant.name == name)


def _shape(r: VariantResult) -> str:
    m, n, k = r.shape
    return f"M={m} N={n} K={k}"


def variant_findings(key: str, r: VariantResult) -> dict[str, Scalar]:
    """A variant's error findings: gemm.<key>.max_rel_err, .mean_rel_err, .passed."""
    return {f"gemm.{key}.max_rel_err": r.max_rel_err, f"gemm.{key}.mean_rel_err": r.mean_rel_err,
            f"gemm.{key}.passed": r.passed}


def variant_table(key: str, title: str, results: list[VariantResult], datasheet: Ceilings | None) -> Table:
    columns = ["variant", "pipeline", "max rel err", "mean rel err", "tolerance", "status", "emul ms",
               "emul GFLOP/s", "MB global", "FLOP/B", "emul GB/s"]
    if datasheet is not None:
        columns += [f"{datasheet.name} bound", f"{datasheet.name} TFLOP/s roof"]
    rows: list[list[Scalar]] = []
    for r in results:
        t = r.traffic
        row: list[Scalar] = [r.variant.name, r.variant.describe(), r.max_rel_err, r.mean_rel_err, r.tolerance,
                             r.status, r.seconds * 1e3, t.flops / r.seconds / 1e9, t.bytes / 1e6, t.intensity,
                             t.bytes / r.seconds / 1e9]
        if datasheet is not None:
            precision = math_precision(r.variant)
            if precision in datasheet.peaks_gflops:
                row += [datasheet.bound(precision, t.intensity), datasheet.attainable(precision, t.intensity) / 1e3]
            else:
                row += [None, None]
        rows.append(row)
    return Table(
        key=key, title=title, columns=columns, rows=rows,
        note=("Errors against the float64 product of the original fp32 inputs. tolerance = 2u_s + u_s² + K·u_fp32 "
              "(worst case for non-negative data, u = ulp(1)/2 of the storage); narrow accumulators are held to "
              "their storage's fp32-accumulation bound on purpose. 'emul' columns time the numpy emulation, not "
              "hardware. MB global and FLOP/B: analytic traffic of a T×T tiled kernel (intensity T/w reading, "
              "plus the fp32 C write)."),
        formats={"max rel err": ".3e", "mean rel err": ".3e", "tolerance": ".2e", "emul ms": ".1f",
                 "emul GFLOP/s": ".3f", "MB global": ".4g", "FLOP/B": ".3g", "emul GB/s": ".3f"},
    )


def bits_section(bits: list[VariantResult]) -> Part:
    """Error against storage bit width, each against the ulp(1) prediction anchored at fp16."""
    findings: dict[str, Scalar] = {}
    anchor = _by_name(bits, "fp16")
    anchor_m = anchor.variant.storage_format.man_bits
    rows: list[list[Scalar]] = []
    for r in bits:
        fmt = r.variant.storage_format
        predicted = predicted_from_ulp(anchor.max_rel_err, anchor_m, fmt.man_bits)
        ratio = r.max_rel_err / predicted
        rows.append([fmt.name, fmt.man_bits, fmt.eps, r.max_rel_err, r.mean_rel_err, predicted, ratio])
        findings[f"gemm.bits.{fmt.name}.max_rel_err"] = r.max_rel_err
        findings[f"gemm.bits.{fmt.name}.measured_over_predicted"] = ratio
    table = Table(
        key="bits", title="Error against storage bit width (fp32 accumulation; fp8 with per-tensor scales)",
        columns=["storage", "M", "ulp(1)", "max rel err", "mean rel err", "predicted", "measured/predicted"],
        rows=rows,
        note=("predicted = fp16's measured error × 2^(10 - M): storage error scales with ulp(1) = 2^-M. "
              "fp32 storage sits above the line because fp32 accumulation, not storage, limits it; "
              "fp8 sits above it where scaled values fall into the subnormal range."),
        formats={"ulp(1)": ".3g", "max rel err": ".3e", "mean rel err": ".3e", "predicted": ".3e",
                 "measured/predicted": ".3g"},
    )
    return Part([table], findings=findings)


def sweep_table(sweeps: dict[str, list], params: dict[str, Scalar]) -> Table:
    names = list(sweeps)
    columns = ["K"] + [f"{n} err" for n in names] + [f"{n} acc-only" for n in names]
    rows: list[list[Scalar]] = []
    for i, point in enumerate(sweeps[names[0]]):
        rows.append([point.k, *[sweeps[n][i].max_rel_err for n in names],
                     *[sweeps[n][i].acc_only_max_rel_err for n in names]])
    return Table(
        key="fp8_accumulation",
        title=(f"FP8 accumulation: a {params['acc_bits']}-bit accumulator ({params['acc_rounding']}) with and "
               "without fp32 promotion every 128 of K"),
        columns=columns, rows=rows,
        note=(f"{params['sweep_outputs']}² outputs, e4m3 per-tensor scales. 'err' is against the fp32 inputs; "
              "'acc-only' against the exact product of the stored operands, which isolates the accumulator. "
              "Without promotion the error grows with K; promoting every 128 keeps it flat (DeepSeek-V3's fix)."),
        formats={c: ".3e" for c in columns[1:]},
    )


def hardware_section(hardware: list[Timing], measured: Ceilings) -> Part:
    """The real CPU matmul timings against this machine's measured roofs."""
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for t in hardware:
        bound = measured.bound(t.precision, t.intensity)
        fraction = t.gflops / measured.attainable(t.precision, t.intensity)
        key = f"roofline.{t.library}_{t.precision}_{t.shape}"
        findings[f"{key}.bound"] = bound
        findings[f"{key}.fraction_of_roof"] = fraction
        rows.append([t.name, t.shape, t.seconds * 1e3, t.gflops, t.intensity, t.gbps, bound, fraction])
    table = Table(
        key="hardware", title="Hardware: real CPU matmul libraries on this machine (not emulation)",
        columns=["kernel", "MxNxK", "ms", "GFLOP/s", "FLOP/B", "GB/s", "bound", "fraction of roof"],
        rows=rows,
        note=("Median of repeated calls after a warm-up, warm-up and repeats within the time budget; a kernel "
              "too slow for the budget at the requested size (torch's CPU bf16 / fp16 matmul: seconds a call "
              "at 1024³) is timed at the largest halving that fits, shown in MxNxK. "
              "FLOP/B uses compulsory traffic (each operand once). "
              "bound and fraction: against this machine's measured roofs (copy bandwidth, best rate per "
              "precision). Timings on a shared CPU are noisy."),
        formats={"ms": ".3f", "GFLOP/s": ".4g", "FLOP/B": ".3g", "GB/s": ".3g", "fraction of roof": ".2f"},
    )
    return Part([table], findings=findings)


def ceilings_table(measured: Ceilings, datasheet: Ceilings | None) -> Table:
    rows: list[list[Scalar]] = []
    for roof in [measured] + ([datasheet] if datasheet is not None else []):
        for precision, peak in roof.peaks_gflops.items():
            rows.append([roof.name, precision, roof.bandwidth_gbs, peak / 1e3, roof.ridge(precision)])
    return Table(
        key="ceilings", title="Roofline ceilings",
        columns=["machine", "precision", "bandwidth GB/s", "peak TFLOP/s", "ridge FLOP/B"], rows=rows,
        note="Ridge point = peak / bandwidth: kernels left of it are memory-bound, right of it compute-bound.",
        formats={"bandwidth GB/s": ".4g", "peak TFLOP/s": ".4g", "ridge FLOP/B": ".3g"},
    )


def bits_figure(bits: list[VariantResult]) -> Figure:
    anchor = _by_name(bits, "fp16")
    m_anchor = anchor.variant.storage_format.man_bits
    ms = [r.variant.storage_format.man_bits for r in bits]
    grid = list(range(min(ms), max(ms) + 1))
    return Figure(
        key="error_vs_bits", title="GEMM error against storage mantissa bits",
        xlabel="mantissa bits M", ylabel="max relative error", yscale="log",
        series=[
            Series("measured", ms, [r.max_rel_err for r in bits], kind="scatter"),
            Series("ulp(1) prediction (anchored at fp16)", grid,
                   [predicted_from_ulp(anchor.max_rel_err, m_anchor, m) for m in grid], style="--"),
        ],
    )


def sweep_figure(sweeps: dict[str, list]) -> Figure:
    return Figure(
        key="fp8_accumulation", title="FP8 accumulation error against K", xlabel="K", ylabel="max relative error",
        xscale="log", yscale="log",
        series=[Series(f"{name} ({kind})", [p.k for p in points],
                       [p.max_rel_err if kind == "total" else p.acc_only_max_rel_err for p in points])
                for name, points in sweeps.items() for kind in ("total", "acc-only")],
    )


LAB = Lab(name="gemm", title="Mixed-precision GEMM", run=run, order=30,
          quick={"size": 64, "gemv_size": 256, "k_max": 512, "sweep_outputs": 8, "ceiling_size": 128,
                 "time_budget": 0.01})
