"""`precisionlab ptq`: one post-training quantization method on a real model, measured layer by layer against
its baseline, then evaluated at task level against the float model: the method's weights and, for smoothquant,
llm_int8 and kivi, its forward-time behaviour installed (ptq.install), beside the baseline as a candidate.

    precisionlab ptq --model smollm2-135m --method gptq --scheme int4:g128 --blocks 0,1 \\
        [--calib-data builtin|FILE] [--calib-size 2048] [--set damp=0.02] [--eval-tasks ppl] [--max-drop 1.0] \\
        [--eval-size 0.25] [--no-eval] [--save OUT.safetensors] [--json] [--out DIR]
"""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import (
    NonEmptyPath,
    busy_machine_threads,
    emit,
    lab_output_options,
    set_torch_threads,
    split_commas,
)
from precisionlab.results import Scalar

METHOD_NAMES = ("rtn", "gptq", "awq", "smoothquant", "llm_int8", "kivi")
CALIB_SEQ_LEN = 512
HELD_OUT_TOKENS = 1024


def parse_blocks(text: str | None) -> list[int] | None:
    """'0,1,5' or '0-3' -> [0, 1, 5] / [0, 1, 2, 3]; None when not given. ValueError on anything else."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            values = range(int(lo), int(hi) + 1) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"--blocks: expected block numbers like 0,1 or 0-3, got {text!r}") from None
        if any(v < 0 for v in values) or (dash and int(hi) < int(lo)):
            raise ValueError(f"--blocks: expected non-negative block numbers like 0,1 or 0-3, got {text!r}")
        out.extend(values)
    if not out:
        raise ValueError(f"--blocks: no block given in {text!r}")
    return sorted(set(out))


def check_writable_file(path: Path, flag: str) -> None:
    """ValueError (one line) unless a file can be written at `path`: its folder exists and takes a new file (tried
    with a temporary file, removed at once), and the path itself is not a folder. Checked before any work."""
    import tempfile

    folder = path.expanduser().parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"{flag} {path}: the folder {folder} {what}")
    if path.expanduser().is_dir():
        raise ValueError(f"{flag} {path}: a folder, not a file")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".precisionlab-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write in {folder} ({exc.strerror or exc})") from None


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs: numbers, true/false/none, else the text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set: expected KEY=VALUE, got {pair!r}")
        text = value.strip()
        lowered = text.lower()
        parsed: Any
        if lowered in ("true", "false"):
            parsed = lowered == "true"
        elif lowered == "none":
            parsed = None
        else:
            try:
                parsed = int(text)
            except ValueError:
                try:
                    parsed = float(text)
                except ValueError:
                    parsed = text
        options[key.strip()] = parsed
    return options


def calibration_documents(calib_data: str) -> list[Any]:
    """The calibration documents: the built-in calibration part, or a text / JSONL ({"text": ...}) file."""
    from precisionlab.eval.overlap import calibration_data

    return calibration_data(calib_data)


def check_calibration(calib_docs: list[Any], task_names: list[str]) -> None:
    """ValueError (one line) when the calibration data overlaps anything the evaluation reads (eval.overlap)."""
    from precisionlab.eval.overlap import check_calibration as check

    check(calib_docs, task_names, option="--calib-data")


EVAL_NOTES = {
    "smoothquant": "smoothquant: the smoothing scales folded into the norms, the W8A8 weights, and per-token dynamic "
                   "activation quantization of every selected linear's input; baseline: the same W8A8 without "
                   "smoothing. The evaluation's layer-output error is the weights' part (the input is quantized "
                   "before it is measured): the per-layer table above has the method's whole error.",
    "llm_int8": "llm_int8: every selected linear computes the int8 + fp16-outlier decomposition (outlier columns found "
                "per forward at the threshold); baseline: plain int8 (row-wise weights, per-token activations).",
    "kivi": "kivi: perplexity only, each text in one forward whose attention equals decoding it token by token over "
            "the KIVI cache after a one-token prefill (keys per channel, values per token, the residual window in "
            "fp16); model bytes are the weights' (unchanged): the cache's bytes are in the summary.",
}
"""What the task-level evaluation installs, for the methods that change the forward computation."""


def check_kivi_tasks(task_names: list[str]) -> None:
    """ValueError unless every task is perplexity (ppl or a text file): KIVI's candidate scores whole texts."""
    from precisionlab.eval import data

    for name in task_names:
        kind = name if name in ("ppl", "choice", "generate", "retrieval") else data.load_task_file(name)[0]
        if kind != "ppl":
            raise ValueError(f"--eval-tasks {name}: kivi's task-level evaluation scores perplexity only (whole "
                             "texts with the attention of decoding over the KIVI cache); use ppl or a text file, or "
                             "--no-eval")


def load_causal_lm(model: str, command: str, progress: Any) -> Any:
    """The loaded model, or ValueError when it is not a causal LM (`command` names the command)."""
    from precisionlab.models import load_model

    loaded = load_model(model, progress=progress.note)
    if loaded.kind != "causal-lm":
        raise ValueError(f"precisionlab {command} runs causal LMs; {loaded.name} is a {loaded.kind}")
    progress.note(f"loaded {loaded.name} ({loaded.load_seconds:.1f} s)")
    busy = busy_machine_threads()  # fewer torch threads on a busy machine, unless --threads was given
    if busy:
        progress.note(busy)
    return loaded


def warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    from precisionlab.ptq import CalibrationWarning

    return [str(w.message) for w in caught if issubclass(w.category, CalibrationWarning)]


@click.command("ptq")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m), a Hugging Face directory or a .gguf file.")
@click.option("--method", default=None, type=click.Choice(METHOD_NAMES, case_sensitive=False),
              help="The PTQ method (required).")
@click.option("--scheme", "-s", default=None,
              help="A quant scheme (int4:g128, int8, e4m3:row ...); llm_int8 is fixed at int8:row, kivi takes "
                   "int2 / int4.")
@click.option("--blocks", default=None, help="Transformer blocks to quantize, e.g. 0,1 or 0-3 (default: all).")
@click.option("--calib-data", default="builtin", show_default=True,
              help="'builtin' (the calibration part of the built-in data) or a text / .jsonl file; refused when "
                   "it overlaps the evaluation data.")
@click.option("--calib-size", type=int, default=2048, show_default=True, help="Calibration tokens.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="A method option (gptq: damp, act_order, static_groups, block_size, sequential=off|block|layer; "
                   "awq: n_grid, clip, "
                   "duo_scaling; smoothquant: alpha, act_scheme; llm_int8: threshold; kivi: residual, group, "
                   "prefill, max_kl). Repeatable.")
@click.option("--eval-tasks", multiple=True,
              help="Tasks of the task-level evaluation (ppl, choice, generate, or a file), comma-separated or "
                   "repeated. Default: ppl.")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Threshold of the task-level verdicts, declared before the run (percent for perplexity, "
                   "points for accuracy).")
@click.option("--eval-size", type=float, default=0.25, show_default=True,
              help="Multiplier of the built-in evaluation sets (0.25: 10 perplexity documents).")
@click.option("--no-eval", is_flag=True, help="Skip the task-level evaluation (layer-level numbers only).")
@click.option("--save", "save_path", type=NonEmptyPath(dir_okay=False, path_type=Path), default=None,
              help="Write the quantized weights as a tagged precisionlab .safetensors file (rtn, gptq, awq).")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's own choice).")
@click.option("--speed", is_flag=True,
              help="Also measure decode and prefill tokens/s of the method's stored codes on a real kernel, against "
                   "the float model (weight-only methods with a kernel scheme, e.g. int4:g128:scale=bf16).")
@lab_output_options
def COMMAND(model: str, method: str | None, scheme: str | None, blocks: str | None, calib_data: str, calib_size: int,
            settings: tuple[str, ...], eval_tasks: tuple[str, ...], max_drop: float, eval_size: float,
            no_eval: bool, save_path: Path | None, threads: int | None, speed: bool, as_json: bool,
            out_dir: Path | None) -> None:
    """One PTQ method, layer by layer against RTN, then task-level evaluation of the quantized model."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.eval.data import task_sizes
    from precisionlab.eval.runner import check_max_drop
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.ptq.support import WEIGHT_ONLY, check_method

    if method is None:  # checked here, not by click, whose message lists the choices over several lines
        raise ValueError(f"--method is required: choose one of {', '.join(METHOD_NAMES)}")
    method = method.lower()
    options = parse_options(settings)
    canonical = check_method(method, scheme, options)  # before anything loads
    block_ids = parse_blocks(blocks)
    if calib_size < 1:
        raise ValueError(f"--calib-size must be a positive number of tokens, got {calib_size}")
    check_max_drop(max_drop)
    task_sizes(eval_size)
    task_names = split_commas(eval_tasks) or ["ppl"]
    check_task_names(task_names)
    if save_path is not None:
        if save_path.suffix != ".safetensors":
            raise ValueError(f"--save: the file must end in .safetensors, got {save_path.name}")
        if method not in WEIGHT_ONLY:
            raise ValueError(f"--save writes weights; {method} also quantizes activations or the KV cache at run "
                             "time (save rtn, gptq or awq)")
        check_writable_file(save_path, "--save")
    calib_docs = calibration_documents(calib_data)
    check_calibration(calib_docs, task_names)  # the built-in calibration part too: against the task files
    if threads is not None:
        set_torch_threads(threads)  # for this command (restored when it ends); without: the busy-machine rule
    evaluate_tasks = not no_eval
    if evaluate_tasks and method == "kivi":
        check_kivi_tasks(task_names)
    with StepProgress() as progress:
        result, evaluation, lines, measured = _run(model, method, canonical, block_ids, calib_docs, calib_size,
                                                   options, task_names if evaluate_tasks else None, max_drop,
                                                   eval_size, progress, speed, threads)
        if save_path is not None:
            save_weights(result, save_path, progress)
    for line in lines:
        click.echo(f"warning: {line}", err=True)
    eval_note = "skipped (--no-eval)" if no_eval else EVAL_NOTES.get(method, "")
    params: dict[str, Scalar] = {"model": model, "method": method, "scheme": canonical, "blocks": blocks or "all",
              "calib_data": calib_data, "calib_size": calib_size, "options": ",".join(settings),
              "eval_tasks": ",".join(task_names) if evaluate_tasks else "", "max_drop": float(max_drop),
              "eval_size": float(eval_size), "command": _command(model, method, canonical, blocks, calib_data,
                                                                 calib_size, settings)}
    if save_path is not None:  # where the codes are: `precisionlab export --from ptq.json` ships them
        params["save"] = str(save_path.resolve())
    from precisionlab.labs.ptq import ptq_lab

    lab = ptq_lab(result, params, evaluation, lines, eval_note)
    if measured is not None:
        from precisionlab.eval.speed import add_speed

        add_speed(lab, measured)
    emit(lab, as_json, out_dir, findings=False)
    if save_path is not None and not as_json:
        click.echo(f"wrote {save_path} ({len(result.quantized)} quantized layers)")


def _run(model: str, method: str, scheme: str, block_ids: list[int] | None, calib_docs: list[Any], calib_size: int,
         options: dict[str, Any], task_names: list[str] | None, max_drop: float, eval_size: float,
         progress: Any, speed: bool = False, threads: int | None = None) -> tuple[Any, Any, list[str], Any]:
    from precisionlab.eval import data
    from precisionlab.ptq import run_method, token_batches

    loaded = load_causal_lm(model, "ptq", progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = token_batches(loaded.tokenizer, calib_docs, calib_size, CALIB_SEQ_LEN)
        held_out = token_batches(loaded.tokenizer, data.ppl_documents(data.builtin_split(), 40),
                                 HELD_OUT_TOKENS, CALIB_SEQ_LEN)

        def tick(step: str, done: int, total: int) -> None:
            stage = step if step in ("calibration", "evaluation") else "layers"
            progress.count(f"{method}: {stage}", done, total)  # off a terminal: a line every few seconds
            if stage == "layers" and done == total:
                progress.note(f"{method}: {step} ({done}/{total})")

        result = run_method(loaded.model, method, scheme, calibration, evaluation=held_out, blocks=block_ids,
                            options=options, progress=tick)
    lines = warning_lines(caught)
    evaluation = None
    if task_names is not None:
        evaluation = evaluate_result(loaded, result, block_ids, task_names, max_drop, eval_size, progress)
    measured = None
    if speed:
        from precisionlab.ptq.speed import ptq_speed_run

        measured = ptq_speed_run(loaded, result, threads=threads, progress=progress)
    return result, evaluation, lines, measured


def evaluate_result(loaded: Any, result: Any, block_ids: list[int] | None, task_names: list[str], max_drop: float,
                    eval_size: float, progress: Any = None) -> Any:
    """The PTQ'd model and its baseline on the same layers (gptq / awq: RTN of the scheme; smoothquant: W8A8 without
    smoothing; llm_int8: plain int8 weights and activations; kivi: none), each paired against the float model."""
    from precisionlab.eval.candidates import Candidate
    from precisionlab.eval.runner import evaluate
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.ptq.structure import blocks as model_blocks

    specs = resolve_tasks(task_names, loaded.kind, size=eval_size)
    prefix, all_blocks = model_blocks(loaded.model)
    chosen = block_ids if block_ids is not None else range(len(all_blocks))
    include = [f"{prefix}.{b}.*" for b in chosen]
    candidates = [ptq_candidate(result)]
    if result.method in ("gptq", "awq"):
        candidates.append(Candidate(result.scheme, name=f"rtn:{result.scheme}"))
    elif result.method == "smoothquant":
        act = str(result.options["act_scheme"])
        candidates.append(Candidate(result.scheme, act=act))
    elif result.method == "llm_int8":
        candidates.append(Candidate(result.scheme, act=result.scheme))
    return evaluate(loaded, candidates, specs, max_drop, include, None, progress=progress)


def save_weights(result: Any, path: Path, progress: Any = None) -> None:
    """result.quantized as a tagged safetensors file (quant.safetensors_io). AWQ's quantized weights are in the
    folded coordinates: the norm weights and previous rows the scales fold into are written beside them, unquantized
    (PassThrough, reason 'folded AWQ scales')."""
    from precisionlab.ptq.architectures import ONE_PLUS
    from precisionlab.quant.safetensors_io import PassThrough, save_quantized

    passthrough: dict[str, PassThrough] = {}
    for group, scales in result.folds:
        rule = "1 + its weight is divided by them" if group.norm_rule == ONE_PLUS else "is divided by them"
        passthrough[f"{group.prev}.awq_scales"] = PassThrough(
            "F64", scales.astype("float64"),
            f"folded AWQ scales: {group.prev} {rule}, {', '.join(group.layers)} multiplied")
    save_quantized(path, dict(result.quantized), passthrough)
    if progress is not None:
        progress.note(f"saved {len(result.quantized)} layers to {path}")


def _command(model: str, method: str, scheme: str, blocks: str | None, calib_data: str, calib_size: int,
             settings: tuple[str, ...]) -> str:
    parts = ["precisionlab", "ptq", "--model", model, "--method", method, "--scheme", scheme]
    if blocks:
        parts += ["--blocks", blocks]
    parts += ["--calib-data", calib_data, "--calib-size", str(calib_size)]
    for s in settings:
        parts += ["--set", s]
    return " ".join(shlex.quote(p) for p in parts)
