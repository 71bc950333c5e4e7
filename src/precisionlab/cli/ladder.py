"""`precisionlab ladder`: the escalation ladder on a real model, cheapest quantization first, stopping at the
first step whose task-level verdict is PASS (see precisionlab.ptq.ladder for the steps, the plan and the rule).

    precisionlab ladder --model smollm2-135m --target int4 --max-drop 1.0 [--tasks ppl] [--examples 40] \\
        [--grow] [--max-examples 160] [--blocks 1,2] [--calib-size 2048] [--alpha 0.025] [--json] [--out DIR]
    precisionlab ladder --quick            # a few minutes: one block, 8 documents, 1536 calibration tokens
    precisionlab ladder --qat-steps 100 --no-widen   # QAT at the target width after GPTQ / AWQ; no width step

With --out, every finished step is appended to DIR/ladder-steps.jsonl; after Ctrl-C (or a crash) the same
command resumes from the steps finished there.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import emit, lab_output_options, set_torch_threads, split_commas
from precisionlab.results import Scalar

ALPHA = 0.025
"""ptq.ladder.rule.ALPHA, typed here so that listing the commands imports no ptq module (a test checks them)."""

QUICK: dict[str, Any] = {"blocks": "1", "examples": 8, "calib_size": 1536}
"""--quick: these values for the options not given (1536 calibration tokens: the widest linear's inputs)."""


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
              help="Limit every step to these transformer blocks, e.g. 1,2 (quick runs; embeddings and lm_head "
                   "then stay in float; include a block other than the first and the last).")
@click.option("--calib-size", type=int, default=2048, show_default=True,
              help="Calibration tokens (built-in calibration part) for the outlier columns and GPTQ.")
@click.option("--alpha", type=float, default=ALPHA, show_default=True,
              help="Largest chance that the ladder stops at a step whose true difference is beyond --max-drop; "
                   "split over every planned step and look (Bonferroni), which widens each step's interval.")
@click.option("--quick", is_flag=True,
              help="A form that finishes in a few minutes: --blocks 1 --examples 8 --calib-size 1536 unless "
                   "given (it shows the climb; 8 documents decide little).")
@click.option("--qat-steps", type=int, default=0, show_default=True,
              help="Add a quantization-aware training step (this many training steps) at the target width after "
                   "GPTQ / AWQ, from the best of them (precisionlab qat; integer targets).")
@click.option("--no-widen", is_flag=True, help="End the ladder at the target width: no step one bit width up.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the choice data.")
@click.option("--resamples", type=int, default=10_000, show_default=True, help="Bootstrap resamples.")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's own choice).")
@click.option("--speed", is_flag=True,
              help="After the climb, measure every tried step's decode and prefill tokens/s on the real kernel of "
                   "its scheme against the reference, in one interleaved run (docs/profile.md); the step table "
                   "gains the decode ratio.")
@click.option("--recipe", "recipe_file", default=None, metavar="FILE",
              help="A recipe.json (precisionlab search --out): one more rung, after the uniform ones.")
@lab_output_options
def COMMAND(model: str, target: str, max_drop: float, tasks: tuple[str, ...], examples: int | None, grow: bool,
            max_examples: int | None, blocks: str | None, calib_size: int, alpha: float, quick: bool, qat_steps: int,
            no_widen: bool, seed: int, resamples: int, threads: int | None, speed: bool, recipe_file: str | None,
            as_json: bool,
            out_dir: Path | None) -> None:
    """Climb from the cheapest quantization at --target to the first step that passes the evaluation."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.cli.ptq import parse_blocks
    from precisionlab.eval.runner import check_max_drop, check_resamples
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.ptq.ladder import STEPS_NAME, check_blocks, check_ladder_options, ladder_steps

    if quick:
        ctx = click.get_current_context()
        given = {n for n in QUICK if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT}
        blocks = blocks if "blocks" in given else QUICK["blocks"]
        examples = examples if "examples" in given else QUICK["examples"]
        calib_size = calib_size if "calib_size" in given else QUICK["calib_size"]
    if qat_steps < 0:
        raise ValueError(f"--qat-steps must be 0 (no QAT step) or a positive number of training steps, got {qat_steps}")
    steps = ladder_steps(target, qat_steps, widen=not no_widen)
    recipe = None
    if recipe_file is not None:  # the search's recipe: one rung after the uniform ones (search.ladder_step)
        from precisionlab.search.ladder_step import recipe_step, with_recipe_step

        step, recipe = recipe_step(recipe_file)
        steps = with_recipe_step(steps, step)
    check_max_drop(max_drop)
    check_resamples(resamples)
    task_names = split_commas(tasks) or ["ppl"]
    check_task_names(task_names)
    block_ids = parse_blocks(blocks)
    if examples is None and max_examples is not None:  # the start is the first task's own size
        from precisionlab.eval.tasks import resolve_tasks

        check_ladder_options(len(resolve_tasks(task_names[:1], "causal-lm")[0].items), grow, max_examples, max_drop,
                             alpha)
    else:
        check_ladder_options(examples if examples is not None else 2, grow, max_examples, max_drop, alpha)
    if max_examples is not None and max_examples < 2:
        raise ValueError(f"--max-examples must be at least 2, got {max_examples}")
    if calib_size < 1:
        raise ValueError(f"--calib-size must be a positive number of tokens, got {calib_size}")
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {threads}")
    check_blocks(block_ids, block_count(model))  # before the model loads (None: known only then)
    from precisionlab.eval.overlap import BUILTIN, calibration_data, check_calibration

    check_calibration(calibration_data(BUILTIN), task_names, option="the ladder's calibration data")
    if threads is not None:
        set_torch_threads(threads)  # for this command (restored when it ends); without: the busy-machine rule
    log_path = out_dir / STEPS_NAME if out_dir is not None else None
    settings = {"target": target, "max_drop": float(max_drop), "tasks": [_task_identity(t) for t in task_names],
                "examples": examples, "grow": grow, "max_examples": max_examples, "blocks": block_ids,
                "calib_size": calib_size, "seed": seed, "resamples": resamples, "alpha": float(alpha)}
    if qat_steps or no_widen:  # only then: the logs of earlier runs keep their header
        settings.update({"qat_steps": qat_steps, "widen": not no_widen})
    try:
        with StepProgress() as progress:
            result, loaded_info, lines, evaluator = _climb(model, steps, task_names, max_drop, examples, grow,
                                                           max_examples, block_ids, calib_size, seed, resamples,
                                                           target, progress, alpha, log_path, settings,
                                                           **({"recipe": recipe} if recipe is not None else {}))
            measured = None
            if speed and result.steps:
                from precisionlab.ptq.ladder.speed import ladder_speed

                progress.start("speed: every tried step on its kernel, against the reference", 0)
                measured = ladder_speed(evaluator, result, threads=threads, progress=progress)
                progress.done("speed measured")
    except KeyboardInterrupt:
        kept = (f"; the finished steps are kept in {log_path}: run the same command again to resume"
                if log_path is not None and log_path.is_file() else "; give --out DIR to keep finished steps")
        click.echo(f"interrupted{kept}", err=True)
        click.get_current_context().exit(130)
    for line in lines:
        click.echo(f"warning: {line}", err=True)
    params: dict[str, Scalar] = {
        "model": model, "target": target, "max_drop": float(max_drop), "tasks": ",".join(task_names),
        "grow": grow, "max_examples": result.max_examples, "blocks": blocks or "all", "calib_size": calib_size,
        "seed": seed, "alpha": float(alpha), "qat_steps": qat_steps, "widen": not no_widen,
        "command": _command(model, target, max_drop, task_names, examples, grow, max_examples, blocks, calib_size,
                            alpha, qat_steps, no_widen) + (" --speed" if speed else "")}
    if recipe_file is not None:
        params["command"] = f"{params['command']} --recipe {shlex.quote(recipe_file)}"
        params["recipe"] = recipe_file
    from precisionlab.labs.ladder import ladder_lab

    lab = ladder_lab(result, params, loaded_info, speed=measured)
    from precisionlab.cli.common import current_outputs
    from precisionlab.export.ladder import step_findings

    outputs = current_outputs()  # each step's layers, and a calibrated step's codes beside ladder.json
    lab.findings.update(step_findings(evaluator, result, outputs.out_stage if outputs is not None else None))
    emit(lab, as_json, out_dir)
    if out_dir is not None:
        _write_html(lab, out_dir, quiet=as_json)
    if not as_json:
        if result.stopped_at:
            click.echo(f"stopped at {result.stopped_at}: the first step that passes at --max-drop {max_drop:g}")
        else:
            width = " at the target width (--no-widen)" if no_widen else ""
            click.echo(f"no step passed{width} at --max-drop {max_drop:g}; the remaining option is {result.remaining}")


def _climb(model: str, steps: list[Any], task_names: list[str], max_drop: float, examples: int | None, grow: bool,
           max_examples: int | None, block_ids: list[int] | None, calib_size: int, seed: int, resamples: int,
           target: str, progress: Any, alpha: float = ALPHA, log_path: Path | None = None,
           settings: dict[str, Any] | None = None, recipe: dict[str, str] | None = None
           ) -> tuple[Any, dict[str, Any], list[str], Any]:
    from precisionlab.cli.ptq import CALIB_SEQ_LEN, load_causal_lm, warning_lines
    from precisionlab.eval.overlap import BUILTIN, calibration_data  # checked in COMMAND
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder import ModelEvaluator

    loaded = load_causal_lm(model, "ladder", progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = token_batches(loaded.tokenizer, calibration_data(BUILTIN), calib_size, CALIB_SEQ_LEN)
        methods: dict[str, Any] = {}
        qat_steps = int((settings or {}).get("qat_steps", 0))  # --qat-steps (in the log's identity too)
        if qat_steps:
            from precisionlab.qat.ladder_step import QATStep

            methods["qat"] = QATStep(qat_steps, seed=seed, progress=progress)
        options: dict[str, Any] = {"blocks": block_ids, "seed": seed, "n_resamples": resamples, "progress": progress,
                                   "methods": methods}
        evaluator: Any
        if recipe is not None:
            from precisionlab.search.ladder_step import RecipeStepEvaluator

            evaluator = RecipeStepEvaluator(loaded, task_names, max_drop, calibration, recipe=recipe, **options)
        else:
            evaluator = ModelEvaluator(loaded, task_names, max_drop, calibration, **options)
        start = examples if examples is not None else evaluator.base_examples
        identity = {"model": loaded.fingerprint, **(settings or {})}
        result = climb_logged(steps, evaluator, evaluator.planned_bytes, start, max_drop, target, grow, max_examples,
                              alpha, progress, log_path, identity)
    info = {"name": loaded.name, "grid_note": loaded.grid_note, "bytes": loaded.nbytes}
    return result, info, sorted(set(warning_lines(caught))), evaluator


def climb_logged(steps: list[Any], evaluate: Any, planned_bytes: Callable[[Any], int] | None, examples: int,
                 max_drop: float, target: str, grow: bool, max_examples: int | None, alpha: float, progress: Any,
                 log_path: Path | None, identity: dict[str, Any]) -> Any:
    """Plan the steps by bytes, then run the ladder; with `log_path`, every finished step is appended to the log
    and the steps an earlier run with the same `identity` and plan finished are taken from it."""
    from precisionlab.ptq.ladder import StepLog, plan_steps, run_ladder

    plan = plan_steps(steps, planned_bytes)
    for line in plan.notes():
        progress.note(line)
    log = None
    done: list[Any] = []
    if log_path is not None:
        header = {**identity, "examples": examples,
                  "plan": [[s.name, s.scheme, s.method, s.keep_sensitive] for s in plan.steps]}
        log = StepLog(log_path, header)
        done = log.open()
        if hasattr(evaluate, "note_done"):  # the QAT step starts from the best calibrated step, resumed ones too
            evaluate.note_done(done)
        if done:
            progress.note(f"resuming: {len(done)} finished step(s) in {log_path}")

    def report(record: Any) -> None:
        if log is not None:
            log.append(record)
        o = record.outcome
        progress.note(f"step {record.index} {record.step.name} ({record.step.scheme}): {o.difference:+.3g} "
                      f"[{o.ci_low:+.3g}, {o.ci_high:+.3g}] {record.verdict.upper()}, {o.examples} examples, "
                      f"{record.seconds:.0f} s")

    try:
        return run_ladder(plan.steps, evaluate, examples=examples, max_drop=max_drop, target=target, grow=grow,
                          max_examples=max_examples, report=report, alpha=alpha, skipped=plan.skipped, done=done)
    finally:
        if log is not None:
            log.close()


# --------------------------------------------------------------------------- before the model loads
def block_count(spec: str) -> int | None:
    """The model's number of transformer blocks from its config alone (a directory's config.json, a GGUF's
    `<arch>.block_count`), without loading weights; None when it cannot be told so cheaply (a hub id, a file
    that does not parse: the loader reports those)."""
    from precisionlab.models.loading import resolve

    try:
        source = resolve(spec)
    except ValueError:
        return None  # the loader gives the error, with its own wording
    try:
        if source.form == "directory":
            config = json.loads((Path(source.location) / "config.json").read_text(encoding="utf-8"))
            config = config.get("text_config", config) if "num_hidden_layers" not in config else config
            value = config.get("num_hidden_layers")
            return int(value) if isinstance(value, int) and value > 0 else None
        if source.form == "gguf":
            return gguf_block_count(Path(source.location))
    except (OSError, ValueError, UnicodeDecodeError, struct.error):
        return None
    return None


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_block_count(path: Path, limit: int = 1 << 16) -> int | None:
    """`<general.architecture>.block_count` from a GGUF file's key-value header (little-endian, version 2 or 3),
    reading keys in order and stopping at the answer; None when it is not among the first `limit` keys.
    gguf's own GGUFReader parses every key and tensor (about 13 s for SmolLM2's 49k-token vocabulary on a busy
    machine); this header walk reads a few hundred bytes."""
    with open(path, "rb") as handle:
        def read(fmt: str) -> Any:
            size = struct.calcsize("<" + fmt)
            raw = handle.read(size)
            if len(raw) != size:
                raise ValueError("truncated GGUF header")
            return struct.unpack("<" + fmt, raw)[0]

        def string() -> str:
            return bytes(handle.read(read("Q"))).decode("utf-8")

        def skip(kind: int) -> None:
            if kind in _GGUF_SCALARS:
                handle.seek(struct.calcsize("<" + _GGUF_SCALARS[kind]), 1)
            elif kind == _GGUF_STRING:
                handle.seek(read("Q"), 1)
            elif kind == _GGUF_ARRAY:
                inner, count = read("I"), read("Q")
                if inner in _GGUF_SCALARS:
                    handle.seek(count * struct.calcsize("<" + _GGUF_SCALARS[inner]), 1)
                else:
                    for _ in range(count):
                        skip(inner)
            else:
                raise ValueError(f"unknown GGUF value type {kind}")

        if handle.read(4) != b"GGUF" or read("I") not in (2, 3):
            return None
        read("Q")  # tensor count
        keys = read("Q")
        arch: str | None = None
        counts: dict[str, int] = {}
        for _ in range(min(keys, limit)):
            key, kind = string(), read("I")
            if key == "general.architecture" and kind == _GGUF_STRING:
                arch = string()
            elif key.endswith(".block_count") and kind in _GGUF_SCALARS and kind not in (6, 7, 12):
                counts[key] = int(read(_GGUF_SCALARS[kind]))
            else:
                skip(kind)
            if arch is not None and f"{arch}.block_count" in counts:
                return counts[f"{arch}.block_count"]
    return None


def _task_identity(name: str) -> str:
    """A built-in task's name; a user file's path with the sha256 of its content (a changed file is not resumed)."""
    path = Path(name).expanduser()
    if path.is_file():
        return f"{path.resolve()}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    return name


# --------------------------------------------------------------------------- outputs
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
             max_examples: int | None, blocks: str | None, calib_size: int = 2048, alpha: float = ALPHA,
             qat_steps: int = 0, no_widen: bool = False) -> str:
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
    if calib_size != 2048:
        parts += ["--calib-size", str(calib_size)]
    if alpha != ALPHA:
        parts += ["--alpha", f"{alpha:g}"]
    if qat_steps:
        parts += ["--qat-steps", str(qat_steps)]
    if no_widen:
        parts.append("--no-widen")
    return " ".join(shlex.quote(p) for p in parts)
