"""`precisionlab quant`: the outlier demo, the per-group int8 drill, and schemes compared on your tensors.

    precisionlab quant demo [--cols N --ratio R --window W]
    precisionlab quant drill [--seed S]
    precisionlab quant compare FILE [--schemes int4:g128,mxfp4,nvfp4 ...]
    precisionlab quant save FILE --scheme int4:g128 --output q.safetensors
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from precisionlab.cli.common import NonEmptyPath, emit, lab_output_options, positive_int, progress, split_commas


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


F = TypeVar("F", bound=Callable[..., Any])


def selection_options(vectors: bool) -> Callable[[F], F]:
    """--include / --exclude / --min-size / --keep-embeddings (and, for save, --vectors): which tensors of a
    .safetensors model file are quantized (labs.quant_compare.Selection); the others pass through."""
    options = [
        click.option("--include", "include", multiple=True, metavar="PATTERN",
                     help="Quantize only tensors whose name matches one of these patterns (fnmatch: '*.mlp.*'); "
                          "repeatable."),
        click.option("--exclude", "exclude", multiple=True, metavar="PATTERN",
                     help="Never quantize tensors whose name matches (e.g. '*norm*'); repeatable."),
        click.option("--min-size", type=int, default=1, show_default=True, callback=positive_int,
                     help="Quantize only tensors of at least this many elements."),
        click.option("--keep-embeddings", is_flag=True,
                     help="Pass embeddings and lm_head through unchanged (*embed*, *lm_head*, *wte*, *wpe*, "
                          "output.weight)."),
    ]
    if vectors:
        options.append(click.option("--vectors", is_flag=True,
                                    help="Also quantize 1-D tensors (biases, norm scales); by default only matrices "
                                         "are quantized and 1-D tensors pass through unchanged."))

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def make_selection(include: tuple[str, ...], exclude: tuple[str, ...], min_size: int, keep_embeddings: bool,
                   matrices_only: bool) -> Any:
    from precisionlab.labs.quant_compare import Selection

    return Selection(include=tuple(split_commas(include)), exclude=tuple(split_commas(exclude)),
                     min_size=min_size, matrices_only=matrices_only, keep_embeddings=keep_embeddings)


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
    """Outlier demo: per-tensor vs per-row int8, an outlier row in fp16, block formats, FP8 delayed scaling."""
    from precisionlab.labs.quant_demo import run

    if not 0 < ratio <= 1e5:  # the outlier row (amax ~0.07 * ratio) must stay inside fp16 for outliers=1
        raise ValueError(f"--ratio must be in (0, 1e5] (outlier row amax over the others'), got {ratio}")
    emit(run(cols=cols, ratio=ratio, window=window, steps=max(24, window + 8)), as_json, out_dir)


@COMMAND.command("drill")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the deterministic matrix.")
@lab_output_options
def drill(seed: int, as_json: bool, out_dir: Path | None) -> None:
    """Per-group int8 drill: per-tensor, per-row and g = 128..8 int8 with fp16 scales; outlier alignment."""
    from precisionlab.labs.quant_drill import run

    emit(run(seed=seed), as_json, out_dir)


@COMMAND.command("compare")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--schemes", "-s", multiple=True,
              help="Scheme strings, comma-separated or repeated (default: int8:row, int4:g128, nf4:g64, mxfp8, "
                   "mxfp4, nvfp4, dsv3_weight).")
@selection_options(vectors=False)
@lab_output_options
def compare(file: Path, schemes: tuple[str, ...], include: tuple[str, ...], exclude: tuple[str, ...], min_size: int,
            keep_embeddings: bool, as_json: bool, out_dir: Path | None) -> None:
    """Every scheme on every float tensor of FILE (.npy or .safetensors, one tensor at a time; bf16 included).

    A tensor a scheme cannot take gets an empty row with the reason; --include / --exclude / --min-size /
    --keep-embeddings choose the tensors of a .safetensors file.
    """
    from precisionlab.labs import quant_compare

    chosen = list(quant_compare.split_schemes(schemes)) or list(quant_compare.DEFAULT_SCHEMES)
    selection = make_selection(include, exclude, min_size, keep_embeddings, matrices_only=False)
    with _one_line_messages():
        total = quant_compare.progress_total(file, chosen, selection)
        with progress(total, "quantizing") as advance:
            result = quant_compare.compare(file, chosen, progress=advance, selection=selection)
    emit(result, as_json, out_dir)


@COMMAND.command("save")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--scheme", "-s", required=True, help="One scheme string, e.g. int4:g128, mxfp4, nvfp4, dsv3_weight.")
@click.option("--output", "-o", required=True, type=NonEmptyPath(dir_okay=False, path_type=Path),
              help="The tagged .safetensors file to write (golden codes and scales).")
@selection_options(vectors=True)
@lab_output_options
def save(file: Path, scheme: str, output: Path, include: tuple[str, ...], exclude: tuple[str, ...], min_size: int,
         keep_embeddings: bool, vectors: bool, as_json: bool, out_dir: Path | None) -> None:
    """Quantize the weight matrices of FILE (.npy or .safetensors) with one scheme into a tagged safetensors file.

    Every tensor that is not quantized (integers, 1-D biases and norms, names left out by --include /
    --exclude / --min-size / --keep-embeddings, a tensor the scheme cannot take) is written through
    unchanged, and the file's tag records it as such, with the reason.
    """
    from precisionlab.labs import quant_compare

    selection = make_selection(include, exclude, min_size, keep_embeddings, matrices_only=not vectors)
    with _one_line_messages():
        total = len(quant_compare.file_tensors(file))
        with progress(total, "quantizing") as advance:
            result = quant_compare.quantize_file(file, scheme, output, progress=advance, selection=selection)
    emit(result, as_json, out_dir)
