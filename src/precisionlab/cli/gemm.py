"""`precisionlab gemm`: storage × accumulator GEMM variants, fp8 accumulation, bit widths, roofline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import emit, lab_output_options, positive_int, progress
from precisionlab.gemm.variants import ACC_ROUNDINGS, NARROW_ACC_BITS, NARROW_ACC_ROUNDING


@click.command("gemm")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="cpu: exact emulation + CPU library timings; gpu: Triton kernels on a CUDA device.")
@click.option("--size", type=int, default=256, show_default=True, callback=positive_int,
              help="Square GEMM size M=N=K for the emulated variants (a multiple of --tile).")
@click.option("--gemv-size", type=int, default=2048, show_default=True, callback=positive_int,
              help="N=K of the decode-like GEMV (M=1).")
@click.option("--tile", type=int, default=32, show_default=True, callback=positive_int,
              help="Tile edge T of the analytic traffic model (intensity T/4 fp32, T/2 16-bit).")
@click.option("--acc-bits", type=int, default=NARROW_ACC_BITS, show_default=True,
              help="Significant bits of the narrow fp8 accumulator (format e8m<bits-1>).")
@click.option("--acc-rounding", type=click.Choice(list(ACC_ROUNDINGS)), default=NARROW_ACC_ROUNDING,
              show_default=True, help="How the narrow accumulator rounds each addition.")
@click.option("--k-max", type=int, default=4096, show_default=True, callback=positive_int,
              help="Largest K of the fp8 accumulation sweep.")
@click.option("--sweep-outputs", type=int, default=32, show_default=True, callback=positive_int,
              help="Output edge of the K sweep (outputs × outputs lanes).")
@click.option("--ceiling-size", type=int, default=1024, show_default=True, callback=positive_int,
              help="Square size at which the CPU matmul ceilings are measured.")
@click.option("--gpu-size", type=int, default=8192, show_default=True, callback=positive_int,
              help="Square size for --backend gpu (a multiple of 128).")
@click.option("--accelerator", default=None, help="Also draw a datasheet roofline: h100, h200, mi300x, ...")
@click.option("--peak-tflops", multiple=True, metavar="[PREC=]TFLOPS",
              help="Datasheet peak override (bare value: bf16); repeatable.")
@click.option("--bandwidth", type=float, default=None, help="Datasheet bandwidth override in GB/s.")
@click.option("--time-budget", type=float, default=0.1, show_default=True,
              help="Seconds of repeats per hardware timing.")
@click.option("--seed", type=int, default=0, show_default=True)
@lab_output_options
def COMMAND(backend: str, size: int, gemv_size: int, tile: int, acc_bits: int, acc_rounding: str, k_max: int,
            sweep_outputs: int, ceiling_size: int, gpu_size: int, accelerator: str | None,
            peak_tflops: tuple[str, ...], bandwidth: float | None, time_budget: float, seed: int, as_json: bool,
            out_dir: Path | None) -> None:
    """Mixed-precision GEMM: what narrow storage and narrow accumulators cost, and where kernels sit."""
    from precisionlab.labs import gemm

    options: dict[str, Any] = {
        "size": size, "gemv_size": gemv_size, "tile": tile, "acc_bits": acc_bits, "acc_rounding": acc_rounding,
        "k_max": k_max, "sweep_outputs": sweep_outputs, "ceiling_size": ceiling_size, "time_budget": time_budget,
        "backend": backend, "accelerator": accelerator, "peak_tflops": peak_tflops, "bandwidth": bandwidth,
        "gpu_size": gpu_size}
    gemm.check_options(**options, seed=seed)  # bad input fails here, before the progress bar starts
    with progress(gemm.STAGES, "gemm") as stage:
        result = gemm.run(**options, seed=seed, stage=stage)
    emit(result, as_json, out_dir)
