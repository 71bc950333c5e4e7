"""`precisionlab export`: write the evaluated model as GGUF or compressed-tensors, verified by loading it back.

    precisionlab export --model smollm2-135m --scheme gguf_q4_0 --to gguf --out smollm2-q4_0.gguf
    precisionlab export --model DIR --from out/ptq.json --to compressed-tensors --out DIR-gptq
    precisionlab export --model smollm2-135m --from ladder/ladder.json --step 3 --to compressed-tensors --out X
    precisionlab export --model DIR --from recipe.json --to gguf --out X.gguf
    precisionlab export --model smollm2-135m --scheme none --float-dtype f32 --to gguf --out smollm2-f32.gguf

See docs/export.md.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from precisionlab.cli.common import NonEmptyPath, check_writable, set_torch_threads, split_commas
from precisionlab.results import Scalar


@click.command("export")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m), a Hugging Face directory or a .gguf file: the model the result "
                   "was evaluated on.")
@click.option("--scheme", "-s", default=None,
              help="A quant scheme to export (gguf_q4_0, int4:g128, e4m3:row ...), or none: every tensor in float "
                   "(at --float-dtype; the reference of `eval --runtime llamacpp`).")
@click.option("--from", "from_path", type=NonEmptyPath(dir_okay=False, path_type=Path), default=None,
              help="A saved result: ptq.json (with --save weights), a ptq --save .safetensors file, ladder.json "
                   "(with --step), or a recipe.json.")
@click.option("--step", type=int, default=None, help="With a ladder result: the step to ship.")
@click.option("--to", "to", required=True, type=click.Choice(["gguf", "compressed-tensors"]), help="The format.")
@click.option("--out", "out", required=True, type=NonEmptyPath(path_type=Path),
              help="The .gguf file, or the compressed-tensors directory.")
@click.option("--include", multiple=True, metavar="PATTERN", help="With --scheme: layers to quantize (glob).")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="With --scheme: layers left in float (default: lm_head and embeddings).")
@click.option("--float-dtype", default="auto", show_default=True,
              type=click.Choice(["auto", "f32", "f16", "bf16"]),
              help="Float layers: auto (the narrowest type holding their values exactly; a GGUF source's own "
                   "type), or one type (refused where it would change a value).")
@click.option("--tokenizer-pre", default=None,
              help="GGUF from a Hugging Face directory: llama.cpp's pre-tokenizer name, when the converter's hash "
                   "does not recognise the tokenizer.")
@click.option("--force", is_flag=True, help="Replace --out when it exists.")
@click.option("--no-verify", is_flag=True, help="Skip reading the export back.")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's own choice).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as strict JSON.")
def COMMAND(model: str, scheme: str | None, from_path: Path | None, step: int | None, to: str, out: Path,
            include: tuple[str, ...], exclude: tuple[str, ...], float_dtype: str, tokenizer_pre: str | None,
            force: bool, no_verify: bool, threads: int | None, as_json: bool) -> None:
    """Export the evaluated weights (a scheme or a saved result) and read them back."""
    if (scheme is None) == (from_path is None):
        raise ValueError("give --scheme or --from (one of them)")
    check_writable(out)  # before anything is read or loaded: an unwritable --out costs nothing

    from precisionlab.cli.eval import StepProgress
    from precisionlab.cli.ptq import load_causal_lm
    from precisionlab.export import Recipe, export_model, precheck, read_result
    from precisionlab.export.plan import FLOAT
    from precisionlab.quant import parse_scheme

    if from_path is not None and (include or exclude):
        raise ValueError("--include / --exclude apply to --scheme; a saved result says which layers it quantized")
    if step is not None and from_path is None:
        raise ValueError("--step selects a step of a ladder result given with --from")
    if scheme is not None and scheme.strip().lower() == "none":
        if include or exclude:
            raise ValueError("--include / --exclude choose layers to quantize; --scheme none quantizes none")
        recipe = Recipe(FLOAT, "float (no layer quantized)")
    elif scheme is not None:
        canonical = str(parse_scheme(scheme))
        recipe = Recipe("scheme", canonical, scheme=canonical, include=tuple(split_commas(include)),
                        exclude=tuple(split_commas(exclude)) if exclude else None)
    else:
        assert from_path is not None
        recipe = read_result(from_path, step)
    precheck(model, to, recipe, out, force)
    if threads is not None:
        set_torch_threads(threads)  # for this command (restored when it ends); without: the busy-machine rule
    with StepProgress() as progress:
        loaded = load_causal_lm(model, "export", progress)
        result = export_model(loaded, recipe, to, out, float_dtype=float_dtype, force=force,
                              tokenizer_pre=tokenizer_pre, verify=not no_verify, progress=progress)
    params: dict[str, Scalar] = {"model": model, "to": to, "out": str(out), "scheme": scheme or "",
                                 "from": str(from_path or ""), "step": step, "float_dtype": float_dtype,
                                 "command": _command(model, scheme, from_path, step, to, out, include, exclude,
                                                     float_dtype)}
    from precisionlab.cli.common import emit
    from precisionlab.labs.export import export_lab

    emit(export_lab(result, params), as_json)
    v = result.verification
    if v is not None and not v.ok:
        raise click.ClickException(f"{out} does not read back as the evaluated values (see the verify table); "
                                   "the file was written, and is wrong: please report this")


def _command(model: str, scheme: str | None, from_path: Path | None, step: int | None, to: str, out: Path,
             include: tuple[str, ...], exclude: tuple[str, ...], float_dtype: str) -> str:
    parts = ["precisionlab", "export", "--model", model]
    if scheme:
        parts += ["--scheme", scheme]
    if from_path:
        parts += ["--from", str(from_path)]
    if step is not None:
        parts += ["--step", str(step)]
    parts += ["--to", to, "--out", str(out)]
    for p in include:
        parts += ["--include", p]
    for p in exclude:
        parts += ["--exclude", p]
    if float_dtype != "auto":
        parts += ["--float-dtype", float_dtype]
    return " ".join(shlex.quote(p) for p in parts)
