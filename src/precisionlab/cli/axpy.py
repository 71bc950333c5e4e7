"""`precisionlab axpy`: y = a·x + y in fp32, fp16 and bf16 against the measured copy bandwidth."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import activity, emit, lab_output_options, positive_int


@click.command("axpy")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="cpu: torch when installed, else numpy (its 16-bit rows are software); gpu: Triton, torch on CUDA.")
@click.option("--n", "n", type=int, default=1 << 24, show_default=True, callback=positive_int,
              help="Elements per vector.")
@click.option("--time-budget", type=float, default=0.3, show_default=True,
              help="Seconds of repeats per timing.")
@lab_output_options
def COMMAND(backend: str, n: int, time_budget: float, as_json: bool, out_dir: Path | None) -> None:
    """Bandwidth: narrower storage moves fewer bytes; a memory-bound kernel speeds up by the byte ratio."""
    from precisionlab.labs import axpy

    activity("loading the array libraries")
    emit(axpy.run(n=n, time_budget=time_budget, backend=backend, progress=activity), as_json, out_dir)
