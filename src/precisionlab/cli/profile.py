"""`precisionlab profile`: one linear layer under every way of running it on this CPU (fp32, bf16, unfused and
fused int8 / int4, llama.cpp's Q8_0 / Q4_0), timed and broken down with torch.profiler, and Amdahl on a real
model's decode step.

    precisionlab profile [--size 4096] [--repeats 5] [--threads 1] [--model smollm2-135m|none]
        [--decode-steps 8] [--quick] [--json] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import emit, lab_output_options


@click.command("profile")
@click.option("--size", type=int, default=4096, show_default=True,
              help="N = K of the square layer (a multiple of 64).")
@click.option("--repeats", type=int, default=5, show_default=True,
              help="Timed calls per variant (interleaved); half as many again under the profiler.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="torch threads, pinned for every timing (1: what a shared machine reproduces).")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="The causal LM whose block linears and decode step are profiled; 'none' skips them.")
@click.option("--decode-steps", type=int, default=8, show_default=True,
              help="Decode steps profiled per variant and round (Amdahl).")
@click.option("--quick", is_flag=True, help="Small shapes and few repeats (the form `precisionlab run --quick` uses).")
@lab_output_options
def COMMAND(size: int, repeats: int, threads: int, model: str, decode_steps: int, quick: bool, as_json: bool,
            out_dir: Path | None) -> None:
    """Does the quantized layer run faster? Every kernel variant, at decode and prefill shapes."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.labs import profile

    options = dict(profile.LAB.quick) if quick else {}
    options.update({"threads": threads, "model": None if model.strip().lower() == "none" else model})
    if not quick:
        options.update({"size": size, "repeats": repeats, "decode_steps": decode_steps})
    profile.check_options(**{k: v for k, v in options.items() if k != "model"})  # before anything is timed
    with StepProgress() as progress:
        result = profile.run(**options, stage=progress.note)
    emit(result, as_json, out_dir)
