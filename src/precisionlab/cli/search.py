"""`precisionlab search`: the best per-layer mix of formats under a byte budget, with the frontier and its intervals
(see precisionlab.search and docs/search.md).

    precisionlab search --model smollm2-135m --formats int4:g128,int8:row,bf16 --budget 6 --max-drop 1 \\
        [--budget-unit bits|MB] [--frontier 4.75,5,6,8] [--tasks ppl] [--blocks 1-4] [--fuse qkv] [--embeddings] \\
        [--sensitivity direct|proxy] [--workers N | --scheduler ADDR] [--json] [--out DIR]

With --out, DIR/recipe.json is the chosen recipe (what `export --from` reads) and DIR/recipe_frontier_<i>.json
each frontier point's; every direct sensitivity is saved to DIR/search-sensitivities.jsonl as it finishes, and the
same command run again (after Ctrl-C, a crash, or a time limit) measures only the rest.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import (
    StepProgress,
    current_outputs,
    emit,
    lab_output_options,
    positive_int,
    set_torch_threads,
    split_commas,
)
from precisionlab.results import Scalar

DEFAULT_FORMATS = "int4:g128,int8:row,bf16"
CALIB_SEQ_LEN = 512


@click.command("search")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m), a Hugging Face directory or a .gguf file.")
@click.option("--formats", "-f", multiple=True,
              help=f"Formats a layer may take: quant schemes and bf16 / fp16, comma-separated (default "
                   f"{DEFAULT_FORMATS}).")
@click.option("--budget", type=float, required=True, help="The budget, in --budget-unit.")
@click.option("--budget-unit", type=click.Choice(["bits", "MB"]), default="bits", show_default=True,
              help="bits: bits per weight of the searched layers; MB: the whole model's bytes (10^6).")
@click.option("--frontier", default=None, help="More budgets (same unit), comma-separated, each solved and "
                                              "evaluated, e.g. 4.75,5,6,8.")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Threshold declared before the run (percent increase for perplexity, points for accuracy).")
@click.option("--tasks", "-t", multiple=True, help="Tasks (ppl, choice, generate, or a file). Default: ppl.")
@click.option("--size", type=float, default=1.0, show_default=True,
              help="Multiplier of the built-in sets' sizes (1: 40 perplexity documents).")
@click.option("--blocks", default=None, help="Search only these transformer blocks, e.g. 1,2 or 0-3 (the rest "
                                            "stays in float).")
@click.option("--fuse", default="qkv", show_default=True,
              help="Layers that must share a format: qkv, gate_up, both (qkv,gate_up) or none.")
@click.option("--embeddings", is_flag=True, help="Search the embeddings and lm_head too (default: kept in float).")
@click.option("--sensitivity", type=click.Choice(["direct", "proxy"]), default="direct", show_default=True,
              help="What the solver minimises: the direct KL per (layer, format), or the one-backward proxy.")
@click.option("--uniform", default=None,
              help="Formats evaluated uniformly beside the recipe (default: every --formats entry; none: no one).")
@click.option("--calib-size", type=int, default=512, show_default=True, callback=positive_int,
              help="Calibration tokens (the built-in calibration part) of the sensitivities and measured KL.")
@click.option("--workers", "-w", default=1, show_default=True, callback=positive_int,
              help="Processes for the sensitivity pass (each loads the model).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="A Dask scheduler (tcp://host:8786) for the sensitivity pass; the model must load on its workers.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the choice data.")
@click.option("--resamples", type=int, default=10_000, show_default=True, help="Bootstrap resamples.")
@click.option("--no-cache", is_flag=True, help="Score the reference again instead of reading it from the cache.")
@click.option("--threads", type=int, default=None, help="torch threads (default: fewer on a busy machine).")
@lab_output_options
def COMMAND(model: str, formats: tuple[str, ...], budget: float, budget_unit: str, frontier: str | None,
            max_drop: float, tasks: tuple[str, ...], size: float, blocks: str | None, fuse: str, embeddings: bool,
            sensitivity: str, uniform: str | None, calib_size: int, workers: int, scheduler: str | None, seed: int,
            resamples: int, no_cache: bool, threads: int | None, as_json: bool, out_dir: Path | None) -> None:
    """The best per-layer mix of formats under a byte budget, evaluated with intervals, with its frontier."""
    from precisionlab.cli.ptq import parse_blocks
    from precisionlab.eval.data import task_sizes
    from precisionlab.eval.overlap import BUILTIN, calibration_data, check_calibration
    from precisionlab.eval.runner import check_max_drop, check_resamples
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.search.costs import parse_formats
    from precisionlab.search.run import capacity_bytes
    from precisionlab.search.units import parse_fuse

    chosen = parse_formats(split_commas(formats) or [DEFAULT_FORMATS])
    budgets = [budget, *_budgets(frontier)]
    for b in budgets:  # sign and unit mix-ups before the model loads (the capacity itself needs the model)
        capacity_bytes(b, budget_unit, 1, 0)
    check_max_drop(max_drop)
    check_resamples(resamples)
    task_sizes(size)
    task_names = split_commas(tasks) or ["ppl"]
    check_task_names(task_names)
    block_ids = parse_blocks(blocks)
    fused = parse_fuse(fuse)
    uniform_formats = None if uniform is None else ([] if uniform.strip().lower() == "none"
                                                    else parse_formats([uniform]))
    if scheduler is not None and workers != 1:
        raise click.UsageError("give --workers or --scheduler, not both")
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {threads}")
    calib_docs = calibration_data(BUILTIN)
    check_calibration(calib_docs, task_names, option="the search's calibration data")
    client = None
    if scheduler is not None:
        from precisionlab.interop.distribute import connect_scheduler

        client = connect_scheduler(scheduler)
    try:
        with StepProgress() as progress:
            run = _run(model, chosen, budget, budget_unit, budgets[1:], task_names, max_drop, size, block_ids, fused,
                       embeddings, sensitivity, uniform_formats, calib_size, workers, client, seed, resamples,
                       not no_cache, threads, progress, calib_docs, out_dir)
    except KeyboardInterrupt:
        kept = (f"; the measured sensitivities are kept in {out_dir}: run the same command again to resume"
                if out_dir is not None else "; give --out DIR to keep measured sensitivities")
        click.echo(f"interrupted{kept}", err=True)
        click.get_current_context().exit(130)
    finally:
        if client is not None:
            client.close()
    from precisionlab.labs.search import search_lab

    params: dict[str, Scalar] = {
        "model": model, "formats": ",".join(chosen), "budget": float(budget), "budget_unit": budget_unit,
        "frontier": ",".join(f"{b:g}" for b in budgets[1:]), "max_drop": float(max_drop),
        "tasks": ",".join(task_names), "size": float(size), "blocks": blocks or "all",
        "fuse": ",".join(fused) or "none", "embeddings": embeddings, "sensitivity": sensitivity,
        "calib_size": calib_size, "seed": seed,
        "workers": workers, "scheduler": scheduler or "",
        "command": _command(model, chosen, budget, budget_unit, budgets[1:], task_names, max_drop, blocks)}
    lab = search_lab(run, params)
    outputs = current_outputs()
    if outputs is not None and outputs.out_stage is not None and outputs.out is not None:
        from precisionlab.search.recipes import save_recipe

        meta = {"model": model, "model_fingerprint": run.model["fingerprint"], "budget_unit": budget_unit,
                "command": params["command"]}
        for name, point in [("recipe.json", run.chosen),
                            *((f"recipe_frontier_{i}.json", p) for i, p in enumerate(run.frontier))]:
            save_recipe(outputs.out_stage / name, point.recipe, budget=point.budget,
                        bits_per_weight=point.bits_per_weight, **meta)
            outputs.written.append(outputs.out / name)
    emit(lab, as_json, out_dir, findings=False)


def _budgets(text: str | None) -> list[float]:
    if text is None:
        return []
    out = []
    for part in text.split(","):
        if part.strip():
            try:
                out.append(float(part))
            except ValueError:
                raise ValueError(f"--frontier: expected budgets like 4.5,5,6, got {part.strip()!r}") from None
    if not out:
        raise ValueError("--frontier: an empty list; give budgets like 4.5,5,6 or leave the option out")
    return out


def _run(model: str, formats: list[str], budget: float, budget_unit: str, frontier: list[float], task_names: list[str],
         max_drop: float, size: float, block_ids: list[int] | None, fused: tuple[str, ...], embeddings: bool,
         sensitivity: str, uniform: list[str] | None, calib_size: int, workers: int, client: Any, seed: int,
         resamples: int, cache: bool, threads: int | None, progress: Any, calib_docs: Any,
         out_dir: Path | None) -> Any:
    import warnings

    from precisionlab.cli.ptq import load_causal_lm, warning_lines
    from precisionlab.ptq import token_batches
    from precisionlab.search.log import LOG_NAME
    from precisionlab.search.run import search

    loaded = load_causal_lm(model, "search", progress)
    busy = set_torch_threads(threads)
    if busy:
        progress.note(busy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = token_batches(loaded.tokenizer, calib_docs, calib_size, CALIB_SEQ_LEN)
    for line in sorted(set(warning_lines(caught))):
        progress.note(f"warning: {line}")
    return search(loaded, formats, budget, task_names, max_drop, calibration=calibration, budget_unit=budget_unit,
                  frontier=frontier, blocks=block_ids, fuse=fused, embeddings=embeddings, sensitivity=sensitivity,
                  uniform=uniform, workers=workers, client=client, model_spec=model, size=size, seed=seed,
                  n_resamples=resamples, cache=cache, progress=progress,
                  log_path=out_dir / LOG_NAME if out_dir is not None else None)


def _command(model: str, formats: list[str], budget: float, unit: str, frontier: list[float], tasks: list[str],
             max_drop: float, blocks: str | None) -> str:
    parts = ["precisionlab", "search", "--model", model, "--formats", ",".join(formats), "--budget", f"{budget:g}",
             "--budget-unit", unit, "--max-drop", f"{max_drop:g}", "--tasks", ",".join(tasks)]
    if frontier:
        parts += ["--frontier", ",".join(f"{b:g}" for b in frontier)]
    if blocks:
        parts += ["--blocks", blocks]
    return " ".join(shlex.quote(p) for p in parts)
