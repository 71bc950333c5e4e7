"""`precisionlab advise [SCENARIO]`: a recommended format, argued with range, precision, throughput and risk."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.advise.advisor import SCENARIOS
from precisionlab.advise.format_choice import BOUNDS, ROLES
from precisionlab.cli.capacity import capacity_options
from precisionlab.cli.common import emit, lab_output_options, positive_int


@click.command("advise")
@click.argument("scenario", required=False, type=click.Choice(["all", *SCENARIOS]))
@click.option("--role", type=click.Choice(ROLES), default=None,
              help="custom: the tensor's role.")
@click.option("--range-decades", type=float, default=None,
              help="custom: dynamic range needed, in decades (log10 of max|x| / smallest |x| that matters).")
@click.option("--rel-error", type=float, default=None,
              help="custom: precision needed, as the largest acceptable relative rounding error.")
@click.option("--bound", type=click.Choice(BOUNDS), default=None,
              help="custom: whether the kernel is memory- or compute-bound.")
@click.option("--long-context", type=int, default=131072, show_default=True, callback=positive_int,
              help="kv_cache: the long context to size the cache at.")
@capacity_options(model_default=None, model_help=" Default: each scenario's own (70B, 13B, 8B, DeepSeek-V3).")
@lab_output_options
def COMMAND(scenario: str | None, role: str | None, range_decades: float | None, rel_error: float | None,
            bound: str | None, long_context: int, model: str | None, config: Path | None, name: str | None,
            gpu: str, memory: float | None, bandwidth: float | None, peak_tflops: float | None, batch: int,
            reserve: float, tp: int, context: int, as_json: bool, out_dir: Path | None) -> None:
    """Recommend a format for SCENARIO (default: all) and fill every column with computed numbers.

    Scenarios: pretrain, serve, reduction, kv_cache, fp8_portability, custom. Any of --role,
    --range-decades, --rel-error or --bound without a SCENARIO selects custom.
    """
    from precisionlab.labs.advise import run

    custom_given = any(v is not None for v in (role, range_decades, rel_error, bound))
    if scenario is None:
        scenario = "custom" if custom_given else "all"
    elif custom_given and scenario not in ("custom", "all"):
        raise click.UsageError(f"--role, --range-decades, --rel-error and --bound describe the custom scenario; "
                               f"{scenario} has its own (drop them, or ask for custom)")
    result = run(scenario=scenario, model=model, config=config, name=name, gpu=gpu, memory=memory,
                 bandwidth=bandwidth, peak_tflops=peak_tflops, batch=batch, reserve=reserve, tp=tp, context=context,
                 long_context=long_context, role=role or "activations",
                 range_decades=4.0 if range_decades is None else range_decades,
                 rel_error=1e-2 if rel_error is None else rel_error, bound=bound or "memory")
    emit(result, as_json, out_dir)
