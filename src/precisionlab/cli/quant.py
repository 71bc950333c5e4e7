"""`precisionlab quant`: Lab 3 (demo), Exercise 3 (drill), and schemes compared on your tensors.

    precisionlab quant demo [--cols N --ratio R --window W]
    precisionlab quant drill [--seed S]
    precisionlab quant compare FILE [--schemes int4:g128,mxfp4,nvfp4 ...]
    precisionlab quant save FILE --scheme int4:g128 --output q.safetensors
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click

from precisionlab.cli.common import NonEmptyPath, emit, lab_output_options, positive_int, progress_bar


@contextlib.contextmanager
def _one_line_messages() -> Iterator[None]:
    """A missing optional package is one `error:` line (exit 2); a QuantizationWarning is one `warning:` line
    on stderr (Python's default would print the warning's source line after it)."""
    from precisionlab.quant import QuantizationWarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        if issubclass(category, QuantizationWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            original(message, category, filename, lineno, file, line)

    original = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    except ModuleNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(2) from None
    finally:
        warnings.showwarning = original


@click.group("quant")
def COMMAND() -> None:
    """Quantization schemes with honest byte accounting (int, fp8/fp6/fp4, nf4, MX, NVFP4)."""


@COMMAND.command("demo")
@click.option("--cols", default=1024, show_default=True, callback=positive_int, help="Columns of the 64-row matrix.")
@click.option("--ratio", default=45.0, show_default=True, type=float,
              help="Outlier row amax over the median row amax.")
@click.option("--window", default=16, show_default=True, callback=positive_int,
              help="Delayed-scaling amax history length.")
@lab_output_options
def demo(cols: int, ratio: float, window: int, as_json: bool, out_dir: Path | None) -> None:
    """Lab 3: per-tensor vs per-row int8, an outlier row in fp16, block formats, FP8 delayed scaling."""
    from precisionlab.labs.quant_demo import run

    if not 0 < ratio <= 1e5:  # the outlier row (amax ~0.07 * ratio) must stay inside fp16 for outliers=1
        raise ValueError(f"--ratio must be in (0, 1e5] (outlier row amax over the others'), got {ratio}")
    emit(run(cols=cols, ratio=ratio, window=window, steps=max(24, window + 8)), as_json, out_dir)


@COMMAND.command("drill")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the deterministic matrix.")
@lab_output_options
def drill(seed: int, as_json: bool, out_dir: Path | None) -> None:
    """Exercise 3: per-tensor, per-row and g = 128..8 int8 with fp16 scales; outlier alignment."""
    from precisionlab.labs.quant_drill import run

    emit(run(seed=seed), as_json, out_dir)


@COMMAND.command("compare")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--schemes", "-s", multiple=True,
              help="Scheme strings, comma-separated or repeated (default: int8:row, int4:g128, nf4:g64, mxfp8, "
                   "mxfp4, nvfp4, dsv3_weight).")
@lab_output_options
def compare(file: Path, schemes: tuple[str, ...], as_json: bool, out_dir: Path | None) -> None:
    """Every scheme on every float tensor of FILE (.npy or .safetensors, one tensor at a time; bf16 included)."""
    from precisionlab.labs import quant_compare

    chosen = list(quant_compare.split_schemes(schemes)) or list(quant_compare.DEFAULT_SCHEMES)
    with _one_line_messages():
        total = quant_compare.progress_total(file, chosen)
        with progress_bar(total, "quantizing") as advance:
            result = quant_compare.compare(file, chosen, progress=advance)
    emit(result, as_json, out_dir)


@COMMAND.command("save")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--scheme", "-s", required=True, help="One scheme string, e.g. int4:g128, mxfp4, nvfp4, dsv3_weight.")
@click.option("--output", "-o", required=True, type=NonEmptyPath(dir_okay=False, path_type=Path),
              help="The tagged .safetensors file to write (golden codes and scales).")
@lab_output_options
def save(file: Path, scheme: str, output: Path, as_json: bool, out_dir: Path | None) -> None:
    """Quantize every float tensor of FILE (.npy or .safetensors) with one scheme into a tagged safetensors file."""
    from precisionlab.labs import quant_compare

    with _one_line_messages():
        total = len(quant_compare.iter_tensors(file)[0])
        with progress_bar(total, "quantizing") as advance:
            result = quant_compare.quantize_file(file, scheme, output, progress=advance)
    emit(result, as_json, out_dir)
