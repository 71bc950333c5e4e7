"""`precisionlab qat`: quantization-aware training of a model's linear layers at one scheme, then the paired
evaluation of the trained model (and of its start and RTN) against the float model.

    precisionlab qat --model smollm2-135m --scheme int4:g64 --blocks 1 --steps 100 [--lr 1e-5] [--loss kl|nll] \\
        [--from ptq.json] [--calib-data builtin|FILE] [--calib-size 4096] [--seq-len 128] [--seed 0] \\
        [--checkpoint-every 10] [--resume | --force] [--eval-tasks ppl] [--max-drop 1.0] [--eval-size 0.25] \\
        [--no-eval] [--json] [--out DIR]

With --out, DIR/qat-checkpoint.pt holds the run every --checkpoint-every steps; after Ctrl-C the same command
with --resume goes on from there. Without --resume (or --force, which starts over and replaces it) a checkpoint in
DIR is refused in one line before the model loads, and left untouched. DIR/qat.json and DIR/qat.safetensors are the
result in the layout of a ptq result (`precisionlab export --from DIR/qat.json` ships the trained codes).
"""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import emit, lab_output_options, set_torch_threads, split_commas
from precisionlab.qat.train import DEFAULT_LR
from precisionlab.results import Scalar

CHECKPOINT_NAME = "qat-checkpoint.pt"
WEIGHTS_NAME = "qat.safetensors"
SEQ_LEN = 128
"""Tokens per training step (one calibration window): 2 s per step on SmolLM2 with one block trained, one thread."""
CHECKPOINT_EVERY = 10


@click.command("qat")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m), a Hugging Face directory or a .gguf file.")
@click.option("--scheme", "-s", default=None,
              help="An integer scheme (int4:g64, int4:g128, int8:row ...); with --from: the saved result's.")
@click.option("--from", "from_result", default=None,
              help="Start from a saved result: a precisionlab ptq --out JSON saved with --save (gptq, awq, rtn), "
                   "or its .safetensors file. Default: round-to-nearest of the float weights.")
@click.option("--steps", type=int, default=None, help="Training steps (required), one calibration window each.")
@click.option("--lr", type=float, default=DEFAULT_LR, show_default=True,
              help="Adam's learning rate in grid steps (constant): each update moves a weight by about lr of its step.")
@click.option("--loss", default="kl", show_default=True,
              help="kl: distillation from the float model (KL of the output distributions); nll: next-token loss.")
@click.option("--blocks", default=None, help="Transformer blocks to quantize and train, e.g. 1 or 0-3 (default: all).")
@click.option("--calib-data", default="builtin", show_default=True,
              help="'builtin' (the calibration part of the built-in data) or a text / .jsonl file; refused when "
                   "it overlaps the evaluation data.")
@click.option("--calib-size", type=int, default=4096, show_default=True, help="Calibration tokens to train on.")
@click.option("--seq-len", type=int, default=SEQ_LEN, show_default=True, help="Tokens per step (one window).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the batch order.")
@click.option("--checkpoint-every", type=int, default=CHECKPOINT_EVERY, show_default=True,
              help="With --out: write the checkpoint every K steps.")
@click.option("--resume", is_flag=True, help="Go on from the checkpoint in --out (same options).")
@click.option("--force", is_flag=True,
              help="Start over when --out holds a checkpoint (it is replaced); without --resume or --force, refused.")
@click.option("--eval-tasks", multiple=True,
              help="Tasks of the evaluation afterwards (ppl, choice, generate, or a file). Default: ppl.")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Threshold of the verdicts, declared before the run (percent for perplexity, points for accuracy).")
@click.option("--eval-size", type=float, default=0.25, show_default=True,
              help="Multiplier of the built-in evaluation sets (0.25: 10 perplexity documents).")
@click.option("--no-eval", is_flag=True, help="Skip the evaluation (training numbers only).")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's own choice, fewer when busy).")
@lab_output_options
def COMMAND(model: str, scheme: str | None, from_result: str | None, steps: int | None, lr: float, loss: str,
            blocks: str | None, calib_data: str, calib_size: int, seq_len: int, seed: int, checkpoint_every: int,
            resume: bool, force: bool, eval_tasks: tuple[str, ...], max_drop: float, eval_size: float, no_eval: bool,
            threads: int | None, as_json: bool, out_dir: Path | None) -> None:
    """Quantization-aware training at one scheme, then the paired evaluation against the float model."""
    from precisionlab.cli.eval import StepProgress
    from precisionlab.cli.ptq import calibration_documents, check_calibration, parse_blocks
    from precisionlab.eval.data import task_sizes
    from precisionlab.eval.runner import check_max_drop
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.qat.fakequant import check_scheme
    from precisionlab.qat.train import FORCE_AND_RESUME, TrainConfig, existing_checkpoint

    if steps is None:
        raise ValueError("--steps is required: the number of training steps (e.g. --steps 100)")
    config = TrainConfig(steps=steps, lr=lr, seed=seed, loss=loss.strip().lower(), checkpoint_every=checkpoint_every)
    start = read_start(from_result) if from_result is not None else None
    if start is None and scheme is None:
        raise ValueError("--scheme is required without --from (e.g. --scheme int4:g64)")
    canonical = str(check_scheme(scheme)) if scheme is not None else None
    if start is not None and canonical is not None:
        held = sorted({str(q.scheme) for q in start.stored.values()})
        if held != [canonical]:
            raise ValueError(f"--scheme {canonical}: the --from result is at {', '.join(held)}; leave --scheme out "
                             "or give the same")
    block_ids = parse_blocks(blocks)
    if start is not None and block_ids is not None:
        raise ValueError("--from trains the saved result's layers; --blocks does not apply with it")
    for value, flag in ((calib_size, "--calib-size"), (seq_len, "--seq-len")):
        if value < 1:
            raise ValueError(f"{flag} must be a positive number of tokens, got {value}")
    if config.loss == "nll" and seq_len < 2:
        raise ValueError("--loss nll needs --seq-len of at least 2")
    check_max_drop(max_drop)
    task_sizes(eval_size)
    task_names = split_commas(eval_tasks) or ["ppl"]
    check_task_names(task_names)
    checkpoint = out_dir / CHECKPOINT_NAME if out_dir is not None else None
    if resume and (checkpoint is None or not checkpoint.is_file()):
        raise ValueError(f"--resume: no checkpoint at {checkpoint}; give the --out folder of the interrupted run"
                         if checkpoint is not None else "--resume needs --out DIR, the folder of the interrupted run")
    if resume and force:
        raise ValueError(FORCE_AND_RESUME)
    if checkpoint is not None and not resume and not force and checkpoint.exists():
        raise ValueError(existing_checkpoint(checkpoint))  # before the model loads: the checkpoint stays untouched
    calib_docs = calibration_documents(calib_data)
    check_calibration(calib_docs, task_names)
    if threads is not None:
        set_torch_threads(threads)  # for this command (restored when it ends); without: the busy-machine rule
    from precisionlab.qat.train import Interrupted

    settings = {"calib_data": calib_data, "calib_size": calib_size, "seq_len": seq_len,
                "from": str(Path(from_result).expanduser().resolve()) if from_result else None, "blocks": block_ids}
    try:
        with StepProgress() as progress:
            result, evaluation, lines = _run(model, canonical, start, config, block_ids, calib_docs, calib_size,
                                             seq_len, checkpoint, resume, force, settings,
                                             None if no_eval else task_names, max_drop, eval_size, progress)
    except Interrupted as exc:
        hint = "" if exc.checkpoint is not None else "; give --out DIR to keep a checkpoint"
        click.echo(f"{exc}{hint}", err=True)
        click.get_current_context().exit(130)
    except KeyboardInterrupt:
        kept = (f"; {checkpoint} holds the finished steps: run the same command with --resume"
                if checkpoint is not None and checkpoint.is_file() else "")
        click.echo(f"interrupted{kept}", err=True)
        click.get_current_context().exit(130)
    for line in lines:
        click.echo(f"warning: {line}", err=True)
    params: dict[str, Scalar] = {
        "model": model, "method": "qat", "scheme": result.scheme, "start": result.start, "from": from_result or "",
        "blocks": blocks or ("saved layers" if start is not None else "all"), "steps": steps, "lr": float(lr),
        "loss": config.loss, "seed": seed, "calib_data": calib_data, "calib_size": calib_size, "seq_len": seq_len,
        "eval_tasks": "" if no_eval else ",".join(task_names), "max_drop": float(max_drop),
        "eval_size": float(eval_size),
        "command": _command(model, result.scheme, from_result, steps, lr, config.loss, blocks, calib_data, calib_size,
                            seq_len, seed)}
    from precisionlab.cli.common import current_outputs
    from precisionlab.cli.ptq import save_weights

    outputs = current_outputs()
    if outputs is not None and outputs.out_stage is not None:
        save_weights(result, outputs.out_stage / WEIGHTS_NAME)  # beside qat.json: export --from reads it there
        params["save"] = WEIGHTS_NAME
    from precisionlab.labs.qat import qat_lab

    note = "skipped (--no-eval)" if no_eval else ""
    lab = qat_lab(result, params, evaluation, lines, note)
    emit(lab, as_json, out_dir, findings=False)
    if out_dir is not None and not as_json:
        click.echo(f"wrote {out_dir / WEIGHTS_NAME} ({len(result.quantized)} trained layers at {result.scheme})")


def read_start(path: str) -> Any:
    """The Start of `--from PATH` (ValueError, one line, for anything that holds no saved codes)."""
    from precisionlab.export.results import read_result
    from precisionlab.json_input import json_object
    from precisionlab.qat.run import Start

    where = Path(path).expanduser()
    if where.is_file() and where.suffix != ".safetensors":
        try:
            lab = json_object(where.read_text(encoding="utf-8")).get("lab")
        except (UnicodeDecodeError, ValueError):
            lab = None
        if lab in ("ladder", "qat"):
            raise ValueError(f"--from {path}: a {lab} result; qat starts from a precisionlab ptq --out JSON saved "
                             "with --save (gptq, awq or rtn) or its .safetensors file")
    return Start.of_recipe(read_result(where))


def _run(model: str, scheme: str | None, start: Any, config: Any, block_ids: list[int] | None,
         calib_docs: list[Any], calib_size: int, seq_len: int, checkpoint: Path | None, resume: bool, force: bool,
         settings: dict[str, Any], task_names: list[str] | None, max_drop: float, eval_size: float,
         progress: Any) -> tuple[Any, Any, list[str]]:
    from precisionlab.cli.ptq import load_causal_lm, warning_lines
    from precisionlab.ptq import token_batches
    from precisionlab.qat.run import run_qat

    loaded = load_causal_lm(model, "qat", progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration = token_batches(loaded.tokenizer, calib_docs, calib_size, seq_len)
    label = f"qat {scheme or 'from ' + str(settings['from'])}"
    if resume:
        progress.note(f"resuming from {checkpoint}")

    def tick(done: int, total: int, loss: float) -> None:
        progress.count(f"{label}: training", done, total)
        progress.relabel(f"{label}: training, loss {loss:.4g}")
        if done == total or done % max(1, total // 10) == 0:
            progress.note(f"{label}: step {done}/{total}, loss {loss:.4g}")

    progress.note(f"{label}: the training loss on the first calibration windows, then {config.steps} steps"
                  + (" (after the checkpoint's)" if resume else ""))
    identity = {"model": loaded.fingerprint, **settings}
    result = run_qat(loaded.model, scheme, calibration, config, blocks=block_ids, start=start, checkpoint=checkpoint,
                     resume=resume, identity=identity, progress=tick, force=force)
    progress.note(training_line(label, result))
    evaluation = None
    if task_names is not None:
        evaluation = evaluate_qat(loaded, result, task_names, max_drop, eval_size, progress)
    return result, evaluation, sorted(set(warning_lines(caught)))


def training_line(label: str, result: Any) -> str:
    """The line that says whether training lowered its loss: on the same fixed windows before and after (each step's
    own loss is on its own window, so its first and last values are not comparable)."""
    h = result.history
    fixed = (f"training loss on the first {h.probe_windows} calibration windows {h.probe_start:.4g} -> "
             f"{h.probe_end:.4g}" if h.probe_start is not None and h.probe_end is not None
             else "training loss not probed")
    return (f"{label}: {h.steps} steps, {fixed} (each step's own window: first {result.losses[0]:.4g}, mean of the "
            f"last 10 {float(sum(result.losses[-10:]) / len(result.losses[-10:])):.4g}), "
            f"{result.seconds_per_step:.2f} s/step")


def evaluate_qat(loaded: Any, result: Any, task_names: list[str], max_drop: float, eval_size: float,
                 progress: Any = None, confidence: float | None = None) -> Any:
    """The trained model, its start (a GPTQ / AWQ start) and RTN of the same layers at the scheme, each paired
    against the float model in one evaluation."""
    from precisionlab.eval.runner import evaluate
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.qat.run import qat_candidate, rtn_candidate, start_candidate

    specs = resolve_tasks(task_names, loaded.kind, size=eval_size)
    candidates = [qat_candidate(result)]
    if result.start != "rtn" or result.folds:
        candidates.append(start_candidate(result))
    candidates.append(rtn_candidate(loaded.model, result))
    if confidence is None:
        return evaluate(loaded, candidates, specs, max_drop, progress=progress)
    return evaluate(loaded, candidates, specs, max_drop, progress=progress, confidence=confidence)


def _command(model: str, scheme: str, from_result: str | None, steps: int, lr: float, loss: str, blocks: str | None,
             calib_data: str, calib_size: int, seq_len: int, seed: int) -> str:
    parts = ["precisionlab", "qat", "--model", model]
    parts += ["--from", from_result] if from_result else ["--scheme", scheme]
    parts += ["--steps", str(steps), "--lr", f"{lr:g}", "--loss", loss]
    if blocks:
        parts += ["--blocks", blocks]
    parts += ["--calib-data", calib_data, "--calib-size", str(calib_size), "--seq-len", str(seq_len), "--seed",
              str(seed)]
    return " ".join(shlex.quote(p) for p in parts)
