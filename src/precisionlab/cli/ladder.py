"""`precisionlab ladder`: the escalation ladder on a real model, cheapest quantization first, stopping at the
first step whose task-level verdict is PASS (see precisionlab.ptq.ladder for the steps and the rule).

    precisionlab ladder --model smollm2-135m --target int4 --max-drop 1.0 [--tasks ppl] [--examples 40] \\
        [--grow] [--max-examples 160] [--blocks 0,1] [--calib-size 2048] [--json] [--out DIR]
"""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import emit, lab_output_options, split_commas
from precisionlab.results import Scalar


@click.command("ladder")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m), a Hugging Face directory or a .gguf file.")
@click.option("--target", default="int4", show_default=True,
              help="The bit width to reach: int4, int8, int2, fp4 or fp8.")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Threshold declared before the run (percent increase for perplexity, points for accuracy).")
@click.option("--tasks", "-t", multiple=True,
              help="Tasks (ppl, choice, generate, or a file), comma-separated or repeated. Default: ppl.")
@click.option("--examples", type=int, default=None,
              help="Examples of the first task at the start (default: its built-in size, 40 ppl documents).")
@click.option("--grow", is_flag=True, help="Evaluate an INCONCLUSIVE step again with twice the examples, up to "
                                           "--max-examples, before moving on.")
@click.option("--max-examples", type=int, default=None,
              help="Largest evaluation --grow may reach (default: 4 × --examples).")
@click.option("--blocks", default=None,
              help="Limit every step to these transformer blocks, e.g. 0,1 (quick runs; embeddings and lm_head "
                   "then stay in float).")
@click.option("--calib-size", type=int, default=2048, show_default=True,
              help="Calibration tokens (built-in calibration part) for the outlier columns and GPTQ.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the choice data.")
@click.option("--resamples", type=int, default=10_000, show_default=True, help="Bootstrap resamples.")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's own choice).")
@lab_output_options
def COMMAND(model: str, target: str, max_drop: float, tasks: tuple[str, ...], examples: int | None, grow: bool,
            max_examples: int | None, blocks: str | None, calib_size: int, seed: int, resamples: int,
            threads: int | None, as_json: bool, out_dir: Path | None) -> None:
    """Climb from the cheapest quantization at --target to the first step that passes the evaluation."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.cli.ptq import parse_blocks
    from precisionlab.eval.runner import check_max_drop, check_resamples
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.ptq.ladder import check_ladder_options, ladder_steps

    steps = ladder_steps(target)
    check_max_drop(max_drop)
    check_resamples(resamples)
    task_names = split_commas(tasks) or ["ppl"]
    check_task_names(task_names)
    block_ids = parse_blocks(blocks)
    if examples is not None:
        check_ladder_options(examples, grow, max_examples, max_drop)
    if max_examples is not None and max_examples < 2:
        raise ValueError(f"--max-examples must be at least 2, got {max_examples}")
    if calib_size < 1:
        raise ValueError(f"--calib-size must be a positive number of tokens, got {calib_size}")
    from precisionlab.eval.overlap import BUILTIN, calibration_data, check_calibration

    check_calibration(calibration_data(BUILTIN), task_names, option="the ladder's calibration data")
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be a positive integer, got {threads}")
        from precisionlab.models import peers

        peers.torch().set_num_threads(threads)
    with StepProgress() as progress:
        result, loaded_info, lines = _climb(model, steps, task_names, max_drop, examples, grow, max_examples,
                                            block_ids, calib_size, seed, resamples, target, progress)
    for line in lines:
        click.echo(f"warning: {line}", err=True)
    params: dict[str, Scalar] = {
        "model": model, "target": target, "max_drop": float(max_drop), "tasks": ",".join(task_names),
        "grow": grow, "max_examples": result.max_examples, "blocks": blocks or "all", "calib_size": calib_size,
        "seed": seed, "command": _command(model, target, max_drop, task_names, examples, grow, max_examples, blocks)}
    from precisionlab.labs.ptq import ladder_lab

    lab = ladder_lab(result, params, loaded_info)
    emit(lab, as_json, out_dir)
    if out_dir is not None:
        _write_html(lab, out_dir, quiet=as_json)
    if not as_json:
        if result.stopped_at:
            click.echo(f"stopped at {result.stopped_at}: the first step that passes at --max-drop {max_drop:g}")
        else:
            click.echo(f"no step passed at --max-drop {max_drop:g}; the remaining option is {result.remaining}")


def _climb(model: str, steps: list[Any], task_names: list[str], max_drop: float, examples: int | None, grow: bool,
           max_examples: int | None, block_ids: list[int] | None, calib_size: int, seed: int, resamples: int,
           target: str, progress: Any) -> tuple[Any, dict[str, Any], list[str]]:
    from precisionlab.cli.ptq import CALIB_SEQ_LEN, load_causal_lm, warning_lines
    from precisionlab.eval.overlap import BUILTIN, calibration_data  # checked in COMMAND
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder import ModelEvaluator, run_ladder

    loaded = load_causal_lm(model, "ladder", progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = token_batches(loaded.tokenizer, calibration_data(BUILTIN), calib_size, CALIB_SEQ_LEN)
        evaluator = ModelEvaluator(loaded, task_names, max_drop, calibration, blocks=block_ids, seed=seed,
                                   n_resamples=resamples, progress=progress)
        start = examples if examples is not None else evaluator.base_examples

        def report(record: Any) -> None:
            o = record.outcome
            progress.note(f"step {record.index} {record.step.name} ({record.step.scheme}): {o.difference:+.3g} "
                          f"[{o.ci_low:+.3g}, {o.ci_high:+.3g}] {record.verdict.upper()}, {o.examples} examples, "
                          f"{record.seconds:.0f} s")

        result = run_ladder(steps, evaluator, examples=start, max_drop=max_drop, target=target, grow=grow,
                            max_examples=max_examples, report=report)
    info = {"name": loaded.name, "grid_note": loaded.grid_note, "bytes": loaded.nbytes}
    return result, info, sorted(set(warning_lines(caught)))


def _write_html(lab: Any, out_dir: Path, quiet: bool = False) -> None:
    """ladder.html beside ladder.json and its PNG: the ladder's section of the report."""
    from precisionlab.report.outputs import atomic_write_text, figure_stem, render_html

    figures = {}
    for fig in lab.figures:
        png = out_dir / f"{figure_stem(lab, fig.key)}.png"
        if png.exists():
            from precisionlab.report.html import FigureFile

            width, height = _png_size(png)
            figures[(lab.name, fig.key)] = FigureFile(png.name, width, height)
    atomic_write_text(out_dir / "ladder.html", render_html([lab], figures))
    if not quiet:
        click.echo(f"wrote {out_dir / 'ladder.html'}")


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _command(model: str, target: str, max_drop: float, tasks: list[str], examples: int | None, grow: bool,
             max_examples: int | None, blocks: str | None) -> str:
    parts = ["precisionlab", "ladder", "--model", model, "--target", target, "--max-drop", f"{max_drop:g}",
             "--tasks", ",".join(tasks)]
    if examples is not None:
        parts += ["--examples", str(examples)]
    if grow:
        parts.append("--grow")
    if max_examples is not None:
        parts += ["--max-examples", str(max_examples)]
    if blocks:
        parts += ["--blocks", blocks]
    return " ".join(shlex.quote(p) for p in parts)
