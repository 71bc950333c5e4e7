"""`precisionlab lossscale`: the full loss-scaling lab, or one of its parts as a verb.

    precisionlab lossscale                    census + training runs + memory bill
    precisionlab lossscale census [FILE]      underflow census of a .npy array or magnitude,count .csv
    precisionlab lossscale train              the emulated-precision training variants and traps
    precisionlab lossscale bill --params 7e9 --optimizer adam [--devices N --zero STAGE]
"""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import busy, emit, lab_output_options, positive_int
from precisionlab.labs.lossscale import LAB, run

_STEPS = click.option("--steps", default=400, show_default=True, callback=positive_int,
                      help="Training steps per variant.")
_SAMPLES = click.option("--samples", default=16384, show_default=True, callback=positive_int,
                        help="Samples in the toy regression (the loss is their mean).")


@click.group("lossscale", invoke_without_command=True)
@_STEPS
@_SAMPLES
@click.option("--quick", is_flag=True, help="The lab's small settings (as `precisionlab run --quick`).")
@lab_output_options
@click.pass_context
def COMMAND(ctx: click.Context, steps: int, samples: int, quick: bool, as_json: bool, out_dir: Path | None) -> None:
    """Gradient underflow in fp16, loss scaling, master weights and the memory bill of training.

    Without a verb: the whole lab (census of the built-in example, every training variant, and the
    bill for 7e9 parameters with Adam over 8 devices).
    """
    if ctx.invoked_subcommand is not None:
        return
    given = [f"--{name}" for name in ("steps", "samples")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if quick and given:
        raise click.UsageError(f"--quick sets the sizes itself; drop {' and '.join(given)} or --quick")
    options = dict(LAB.quick) if quick else {"steps": steps, "samples": samples}
    with busy("training every variant in emulated precision"):
        result = run(**options)
    emit(result, as_json, out_dir)


@COMMAND.command("census")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@lab_output_options
def census_command(file: Path | None, as_json: bool, out_dir: Path | None) -> None:
    """Fraction of gradients that are subnormal, flushed to zero or overflow in fp16, bf16, e5m2.

    FILE: a .npy array of gradient values, or a .csv of magnitude,count rows (one optional header);
    without FILE, the built-in example histogram.
    """
    emit(run(parts=("census",), census_file=file), as_json, out_dir)


@COMMAND.command("train")
@_STEPS
@_SAMPLES
@lab_output_options
def train_command(steps: int, samples: int, as_json: bool, out_dir: Path | None) -> None:
    """Train a toy regression in fp32, fp16 (plain, + master, + loss scaling), bf16, and the two traps."""
    with busy("training every variant in emulated precision"):
        result = run(parts=("train",), steps=steps, samples=samples)
    emit(result, as_json, out_dir)


@COMMAND.command("bill")
@click.option("--params", type=float, default=7e9, show_default=True, help="Parameter count, e.g. 7e9.")
@click.option("--optimizer", default="adam", show_default=True, help="adam | adamw | sgd | adafactor | adam8bit")
@click.option("--devices", type=int, default=1, show_default=True, help="Devices to shard over (ZeRO).")
@click.option("--zero", "zero_stage", type=int, default=0, show_default=True, help="ZeRO stage 0-3.")
@click.option("--matrix-dim", type=int, default=4096, show_default=True,
              help="Side of the square weight matrices Adafactor factors.")
@lab_output_options
def bill_command(params: float, optimizer: str, devices: int, zero_stage: int, matrix_dim: int, as_json: bool,
                 out_dir: Path | None) -> None:
    """Bytes per parameter and totals for fp32, mixed precision, bf16 without master, and fp8 recipes."""
    emit(run(parts=("bill",), params=params, optimizer=optimizer, devices=devices, zero_stage=zero_stage,
             matrix_dim=matrix_dim), as_json, out_dir)
