"""`precisionlab profile`: one linear layer under every way of running it on this CPU (fp32, bf16, unfused and
fused int8 / int4, llama.cpp's Q8_0 / Q4_0), timed and broken down with torch.profiler, and Amdahl on a real
model's decode step.

    precisionlab profile [--size 4096] [--repeats 5] [--threads 1] [--model smollm2-135m|none]
        [--decode-steps 8] [--quick] [--json] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import emit, lab_output_options

DEFAULT_MODEL = "smollm2-135m"


@click.command("profile")
@click.option("--size", type=int, default=4096, show_default=True,
              help="N = K of the square layer (a multiple of 64).")
@click.option("--repeats", type=int, default=5, show_default=True,
              help="Timed calls per variant (interleaved); half as many again under the profiler.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="torch threads, pinned for every timing (1: what a shared machine reproduces).")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True,
              help="The causal LM whose block linears and decode step are profiled; 'none' skips them (as "
                   "--quick does unless a model is named).")
@click.option("--decode-steps", type=int, default=8, show_default=True,
              help="Decode steps profiled per variant and round (Amdahl).")
@click.option("--quick", is_flag=True,
              help="A 256 x 256 layer, few repeats, no model (the form `precisionlab run --quick` uses).")
@lab_output_options
def COMMAND(size: int, repeats: int, threads: int, model: str, decode_steps: int, quick: bool, as_json: bool,
            out_dir: Path | None) -> None:
    """Does the quantized layer run faster? Every kernel variant, at decode and prefill shapes."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.labs import profile

    options: dict[str, Any] = (dict(profile.LAB.quick) if quick else
                               {"size": size, "repeats": repeats, "decode_steps": decode_steps})
    options["threads"] = threads
    if not quick or model != DEFAULT_MODEL:  # --quick leaves the model out unless one is named
        options["model"] = None if model.strip().lower() == "none" else model
    profile.check_options(**{k: v for k, v in options.items() if k != "model"})  # before anything is timed
    with StepProgress() as progress:
        result = profile.run(**options, stage=progress.note)
    emit(result, as_json, out_dir)
