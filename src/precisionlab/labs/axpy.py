"""The bandwidth lab: y = a·x + y in fp32, fp16 and bf16 against the machine's copy bandwidth.

An axpy moves 3 elements per element (read x, read y, write y) for 2 FLOPs, so it is
memory-bound everywhere: halving the element width halves the bytes, and the speedup
should approach (but not reach) 2× while GB/s stays roughly equal across precisions.

That holds only for a path that runs the 16-bit arithmetic natively (torch on the CPU,
Triton on a GPU). numpy has no bf16 and emulates fp16 arithmetic in software, so without
torch the 16-bit rows measure numpy's emulation, not bandwidth: the table, the summary and
the findings `axpy.<precision>.software` say so, and the torch rows are listed as skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from precisionlab.gemm.timing import ELEMENT_BYTES, Timing, axpy_timing, copy_bandwidth, torch_available
from precisionlab.labs import Lab
from precisionlab.peers import install_hint, missing_reason
from precisionlab.results import Figure, LabResult, Scalar, Series, Table

PRECISIONS = ("fp32", "fp16", "bf16")
DEFAULT_N = 1 << 24
BYTES_PER_ELEMENT_MOVED = 3
NATIVE = "bandwidth"
SOFTWARE = "numpy software arithmetic"
SOFTWARE_NOTE = (" Rows measuring 'numpy software arithmetic' are not a bandwidth measurement: numpy's fp16 ufuncs "
                 "convert each element in software, and bf16 (which numpy lacks) runs as uint16 bit patterns widened "
                 "to fp32, added, and rounded back by precisionlab; their speedup says how slow that emulation is.")


MAX_N = 1 << 28
"""Largest vector length: three float32 vectors of 2^28 elements already take 3 GiB."""


def run(n: int = DEFAULT_N, time_budget: float = 0.3, backend: str = "cpu",
        progress: Callable[[str], None] | None = None) -> LabResult:
    """Time axpy per precision and the copy ceiling (CPU: fastest of numpy and torch; GPU: Triton and torch).

    progress (optional) is called with what is timed next ("the copy ceiling", "the fp16 axpy"): each timing
    allocates its vectors and warms up first, a few seconds under load."""
    step = progress or (lambda text: None)
    if not 0 < n <= MAX_N:
        raise ValueError(f"n must be a positive integer up to {MAX_N} (2^28), got {n}")
    if not (math.isfinite(time_budget) and time_budget > 0):
        raise ValueError(f"time_budget must be positive seconds, got {time_budget}")
    if backend == "gpu":
        return run_gpu(n)
    if backend != "cpu":
        raise ValueError(f"backend must be 'cpu' or 'gpu', got {backend!r}")
    step(f"timing the copy ceiling ({n} elements)")
    copy = copy_bandwidth(n, time_budget)
    timings = []
    for precision in PRECISIONS:
        step(f"timing the {precision} axpy ({n} elements)")
        timings.append(axpy_timing(precision, n, time_budget))
    result = assemble(timings, copy.gbps, f"CPU ({copy.name} ceiling)", {"n": n, "backend": backend})
    if not torch_available():
        result.skip("torch_axpy", "torch axpy rows (the native 16-bit CPU path)", missing_reason("torch"),
                    install_hint("torch"), section="axpy")
    return result


def assemble(timings: list[Timing], copy_gbps: float, machine: str, params: dict[str, Scalar]) -> LabResult:
    base = next(t for t in timings if t.precision == "fp32")
    software = [t.precision for t in timings if t.software]
    findings: dict[str, Scalar] = {"machine.copy_gbps": copy_gbps}
    rows: list[list[Scalar]] = []
    for t in timings:
        speedup = base.seconds / t.seconds
        fraction = t.gbps / copy_gbps
        width = ELEMENT_BYTES[t.precision]
        rows.append([t.precision, t.name, SOFTWARE if t.software else NATIVE, width * BYTES_PER_ELEMENT_MOVED,
                     t.seconds * 1e3, t.gbps, speedup, float(base.bytes / t.bytes), fraction])
        findings[f"axpy.{t.precision}.path"] = t.name
        findings[f"axpy.{t.precision}.software"] = t.software
        findings[f"axpy.{t.precision}.ms"] = t.seconds * 1e3
        findings[f"axpy.{t.precision}.gbps"] = t.gbps
        findings[f"axpy.{t.precision}.fraction_of_copy"] = fraction
        if t.precision != "fp32":
            findings[f"axpy.{t.precision}_speedup"] = speedup
    table = Table(
        key="axpy", title=f"y = a·x + y over {params['n']} elements on {machine}",
        columns=["precision", "path", "measures", "bytes/elem", "ms/iter", "GB/s", "speedup vs fp32", "byte ratio",
                 "fraction of copy"],
        rows=rows,
        note=("GB/s = 3·n·w / time (read x, read y, write y). A memory-bound kernel's speedup is at most the byte "
              "ratio; equal GB/s across rows is the signature of the bandwidth limit. fraction of copy: against the "
              "measured copy bandwidth of the same machine." + (SOFTWARE_NOTE if software else "")),
        formats={"ms/iter": ".3f", "GB/s": ".3g", "speedup vs fp32": ".2f", "byte ratio": ".2f",
                 "fraction of copy": ".2f"},
    )
    figure = Figure(
        key="axpy_bandwidth", title="axpy bandwidth against the measured copy ceiling",
        xlabel="bytes moved per element (3·w)", ylabel="GB/s",
        series=[Series(t.precision, [ELEMENT_BYTES[t.precision] * BYTES_PER_ELEMENT_MOVED], [t.gbps], kind="scatter")
                for t in timings],
        hlines=[(copy_gbps, f"copy {copy_gbps:.3g} GB/s")],
    )
    fp16 = findings.get("axpy.fp16_speedup")
    return LabResult(
        name="axpy", title="Bandwidth: axpy in fp32, fp16 and bf16", sections=[table], figures=[figure],
        findings=findings, params=params,
        summary=summary(fp16, copy_gbps, software),
    )


def summary(fp16: Scalar, copy_gbps: float, software: list[str]) -> str:
    if not isinstance(fp16, float):
        return ""
    if not software:
        return f"fp16 runs {fp16:.2g}× the fp32 speed (byte ratio 2); copy ceiling {copy_gbps:.3g} GB/s."
    fp16_path = "numpy's software fp16" if "fp16" in software else "fp16"
    speed = (f"{fp16_path} runs {fp16:.2g}× the fp32 speed, though it moves half the bytes (byte ratio 2); copy "
             f"ceiling {copy_gbps:.3g} GB/s.")
    return (f"{speed} The {' and '.join(software)} rows measure numpy's software 16-bit arithmetic, not bandwidth "
            "(numpy emulates fp16 element by element and has no bf16, run here as uint16 bit patterns with fp32 math): "
            f"install torch for the native 16-bit path: {install_hint('torch')}.")


def run_gpu(n: int, device: str = "cuda") -> LabResult:
    """Triton and torch axpy on the CUDA device, the faster of the two per precision
    (device='cpu' exists only for the smoke test under TRITON_INTERPRET=1)."""
    from precisionlab.labs.gemm_gpu import load_gpu_bench

    bench = load_gpu_bench(device)
    rows, copy_gbps = bench.axpy_rows(n, device)
    best: dict[str, Timing] = {}
    for r in rows:
        if r.error or not math.isfinite(r.ms):
            continue
        timing = Timing(r.name, r.kind, r.precision, r.ms / 1e3, 2.0 * n, r.bytes, str(n))
        if r.precision not in best or timing.seconds < best[r.precision].seconds:
            best[r.precision] = timing
    missing = [p for p in PRECISIONS if p not in best]
    if missing or not math.isfinite(copy_gbps):
        failed = "; ".join(f"{r.name}: {r.error}" for r in rows if r.error)
        raise ValueError(f"GPU axpy could not measure {', '.join(missing) or 'the copy bandwidth'} ({failed})")
    return assemble([best[p] for p in PRECISIONS], copy_gbps, device.upper(), {"n": n, "backend": "gpu"})


LAB = Lab(name="axpy", title="Bandwidth: axpy", run=run, order=31, quick={"n": 1 << 16, "time_budget": 0.01})
