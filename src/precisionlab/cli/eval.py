"""`precisionlab eval`: task-level evidence on a real model, each scheme paired against the float reference.

    precisionlab eval --model smollm2-135m --schemes int8:row,int4:g128,nvfp4,mxfp4 --tasks ppl,choice \\
        --max-drop 1.0 [--size N] [--include PAT ...] [--exclude PAT ...] [--json] [--out DIR]
    precisionlab eval --model smollm2-135m --from out/recipe.json [--from out/ptq.json] [--schemes int4:g128]
    precisionlab eval ... [--workers N | --scheduler tcp://host:8786]     the candidates on processes or Dask
    precisionlab eval --runtime llamacpp --reference f32.gguf --candidates q4_0.gguf     scored in llama.cpp
    precisionlab eval --server URL --reference NAME --candidates NAME[,NAME]            a completions server
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import (
    StepProgress,
    emit,
    lab_output_options,
    nonblank,
    positive_int,
    set_torch_threads,
    split_commas,
)

__all__ = ["COMMAND", "StepProgress"]  # StepProgress lives in cli.common; ptq and ladder import it from here too


def worker_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--workers / --scheduler: where the candidates are scored (eval.workers)."""
    command = click.option("--scheduler", default=None, metavar="ADDRESS",
                           help="Score the candidates on the Dask cluster at ADDRESS (tcp://host:8786); the model "
                                "and any --from file must load on its workers under the same name or path.")(command)
    return click.option("--workers", "-w", default=1, show_default=True, callback=positive_int,
                        help="Processes that score the candidates, each loading the model once (the reference is "
                             "computed here first); the results equal one process's, bit for bit.")(command)


def runtime_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--runtime / --server and what they score (cli.eval_runtime; docs/eval.md "In the runtime")."""
    options = [
        click.option("--retries", type=int, default=3, show_default=True, callback=_non_negative,
                     help="With --server: retries of a request that met a connection error, a timeout, HTTP 429 "
                          "or 5xx (waiting 0.5, 1, 2 ... s)."),
        click.option("--batch", type=int, default=8, show_default=True, callback=positive_int,
                     help="With --server: prompts per request (a server that takes one at a time is asked one at "
                          "a time)."),
        click.option("--tokenizer", default=None, metavar="MODEL",
                     help="With --runtime / --server: whose tokenizer turns the tasks' texts into token ids (a "
                          "packaged name, directory or .gguf; default: the --reference GGUF, with --server "
                          "--model)."),
        click.option("--candidates", "runtime_candidates", multiple=True, metavar="[LABEL=]MODEL",
                     help="With --runtime / --server: the quantized models, comma-separated or repeated (GGUF "
                          "files; with --server, model names served there or URLs)."),
        click.option("--reference", default=None, metavar="[LABEL=]MODEL",
                     help="With --runtime / --server: the float model as the runtime runs it (an F32 / F16 GGUF: "
                          "export --scheme none; with --server, a model name served there or a URL)."),
        click.option("--server", default=None, metavar="URL",
                     help="Score through an OpenAI-compatible /v1/completions endpoint that returns prompt "
                          "log-probabilities (echo + logprobs: llama.cpp's server, llama-cpp-python's, vLLM)."),
        click.option("--runtime", type=click.Choice(["llamacpp"]), default=None,
                     help="Score GGUF files in llama.cpp itself (llama-cpp-python), reference and candidates alike, "
                          "instead of precisionlab's emulation."),
    ]
    for option in options:
        command = option(command)
    return command


def _non_negative(_ctx: Any, param: Any, value: int) -> int:
    if value < 0:
        raise click.BadParameter(f"must be 0 or more, got {value}", param_hint=f"'--{param.name}'")
    return value


@click.command("eval")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="A packaged name (smollm2-135m, minilm-l6), a Hugging Face directory, a .gguf file or a hub id.")
@click.option("--schemes", "-s", multiple=True,
              help="Candidates, comma-separated or repeated: a quant scheme (int8:row, int4:g128, nvfp4, mxfp4, "
                   "...), optionally +act=SCHEME (activations, per token) and +kv=SCHEME (KV cache); 'none' keeps "
                   "the weights. Default: int8:row,int4:g128,nvfp4,mxfp4.")
@click.option("--from", "--recipe", "from_paths", multiple=True, metavar="RESULT",
              help="A saved result as a candidate, installed as `export --from` ships it (repeatable): a "
                   "recipe.json (search), a ptq or qat --out JSON or --save .safetensors file, a ladder --out "
                   "JSON (with --step). With --from and no --schemes, only the saved results are evaluated.")
@click.option("--step", type=int, default=None, help="With --from a ladder result: the step to evaluate.")
@click.option("--tasks", "-t", multiple=True,
              help="Built-in tasks (ppl, longppl, choice, generate for causal LMs; retrieval for encoders) and "
                   "paths to user .jsonl / text files, comma-separated or repeated. Default: ppl,choice (retrieval "
                   "for an encoder).")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Threshold declared before the run: percentage points for accuracy-like metrics, percent "
                   "increase for perplexity.")
@click.option("--size", type=float, default=1.0, show_default=True,
              help="Multiplier of the built-in sets' sizes (1: 40 documents, 100 choice examples, 32 prompts, "
                   "64 retrieval pairs).")
@click.option("--include", multiple=True, metavar="PATTERN",
              help="Glob on module names of the layers to quantize (repeatable; default: every Linear).")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="Glob on module names to keep in float (repeatable; default: lm_head and *embed*; 'none' "
                   "quantizes those too).")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True,
              help="The reference's dtype (the model is loaded in it).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the choice data.")
@click.option("--resamples", type=int, default=10_000, show_default=True, help="Bootstrap resamples.")
@click.option("--no-cache", is_flag=True,
              help="Recompute the reference's outputs (neither read nor write the reference cache; a GGUF "
                   "model's converted copy is still used).")
@click.option("--threads", type=int, default=None,
              help="torch threads (default: torch's own, fewer on a busy machine: its CPUs less the load average).")
@click.option("--speed", is_flag=True,
              help="Also measure decode and prefill tokens/s of each candidate a real kernel runs, against the "
                   "reference; adds the bf16-scale twin of an int4 scheme whose scales no kernel takes, and says "
                   "so (docs/profile.md).")
@click.option("--findings", "show_findings", is_flag=True,
              help="Also print every finding (key and value) after the tables; --json and --out always hold them.")
@runtime_options
@worker_options
@lab_output_options
def COMMAND(model: str, schemes: tuple[str, ...], from_paths: tuple[str, ...], step: int | None,
            tasks: tuple[str, ...], max_drop: float, size: float,
            include: tuple[str, ...], exclude: tuple[str, ...], dtype: str, seed: int, resamples: int, no_cache: bool,
            threads: int | None, speed: bool, show_findings: bool, runtime: str | None, server: str | None,
            reference: str | None, runtime_candidates: tuple[str, ...], tokenizer: str | None, batch: int,
            retries: int, workers: int, scheduler: str | None, as_json: bool, out_dir: Path | None) -> None:
    """Task-level evidence: each scheme against the float reference, paired, with intervals and verdicts."""
    if runtime is not None or server is not None:
        torch_only = [name for name, given in (("--schemes", schemes), ("--from", from_paths), ("--speed", speed),
                                               ("--include", include), ("--exclude", exclude),
                                               ("--scheduler", scheduler), ("--workers", workers != 1)) if given]
        if torch_only:
            raise click.UsageError(f"{torch_only[0]} belongs to the emulated evaluation; with --runtime / --server "
                                   "the models are --reference and --candidates")
        from precisionlab.cli.eval_runtime import run_command

        run_command(runtime, server, reference, runtime_candidates, tokenizer, model, tasks, max_drop, size, seed,
                    resamples, threads, batch, retries, as_json, out_dir, show_findings)
        return
    runtime_only = [name for name, given in (("--reference", reference), ("--candidates", runtime_candidates),
                                             ("--tokenizer", tokenizer)) if given]
    if runtime_only:
        raise click.UsageError(f"{runtime_only[0]} belongs to a runtime evaluation: give --runtime llamacpp or "
                               "--server URL")
    from precisionlab.eval.candidates import parse_candidates
    from precisionlab.eval.data import task_sizes
    from precisionlab.eval.runner import check_max_drop, check_resamples
    from precisionlab.eval.tasks import check_task_names
    from precisionlab.labs import eval as eval_lab
    from precisionlab.models import load_model

    saved = _saved_candidates(from_paths, step)  # a file that is no result fails before the model loads
    chosen = split_commas(schemes) or ([] if saved else list(eval_lab.DEFAULT_SCHEMES))
    if chosen:
        parse_candidates(chosen)  # a bad scheme or threshold fails before the model loads
    if speed and chosen:
        from precisionlab.eval.speed import kernel_twins

        chosen = kernel_twins(chosen)
    check_max_drop(max_drop)
    check_resamples(resamples)
    task_sizes(size)
    task_names = split_commas(tasks)
    check_task_names(task_names, size)
    include = tuple(nonblank(include))
    exclude = tuple(nonblank(exclude))
    excluded: list[str] | None = None
    if exclude:
        excluded = [] if [e.lower() for e in exclude] == ["none"] else list(exclude)
    if threads is not None and threads < 1:
        raise click.BadParameter(f"must be a positive integer, got {threads}", param_hint="'--threads'")
    if scheduler is not None and workers != 1:
        raise click.UsageError("give --workers or --scheduler, not both")
    command = _command(model, chosen, task_names, max_drop, size, include, exclude, dtype, seed, from_paths, step)
    with StepProgress() as progress, contextlib.ExitStack() as stack:
        client = _connect(scheduler, progress, stack)  # dask missing or the scheduler unreachable: before the model
        progress.start(f"loading {model}", 0)
        loaded = load_model(model, dtype=dtype, progress=progress.note)
        progress.done(f"loaded {loaded.name} ({loaded.kind}, {loaded.load_seconds:.1f} s"
                      f"{', from the cache' if loaded.from_cache else ''})")
        busy = set_torch_threads(threads)
        if busy:
            progress.note(busy)
        if speed and saved:
            progress.note("--speed times the --schemes candidates; the --from results are evaluated, not timed")
        if speed and chosen:  # first: a model it cannot measure fails before the evaluation's minutes
            from precisionlab.eval import speed as speed_measure

            for line in speed_measure.twin_lines(chosen).values():  # why a candidate nobody named is evaluated
                progress.note(line)
            measured = speed_measure.speed_run(loaded, chosen, include, excluded, threads=threads, progress=progress)
        result = eval_lab.run(model, chosen, task_names, max_drop=max_drop, size=size, include=list(include),
                              exclude=excluded, seed=seed, cache=not no_cache, n_resamples=resamples, dtype=dtype,
                              command=command, progress=progress, loaded=loaded, examples_dir=out_dir,
                              extra=saved, workers=workers, client=client)
        if speed and chosen:
            speed_measure.add_speed(result, measured)
    emit(result, as_json, out_dir, findings=show_findings)
    if not as_json and not show_findings:
        where = f"{out_dir / 'eval.json'}, " if out_dir is not None else ""
        click.echo(f"{len(result.findings)} findings (every number above, by key): in {where}--json, or --findings")
    if out_dir is not None and not as_json:
        click.echo(f"wrote per-example scores to {out_dir}/eval_<task>_examples.jsonl and per-layer records to "
                   f"{out_dir}/eval_layers.jsonl")


def _connect(scheduler: str | None, progress: StepProgress, stack: contextlib.ExitStack) -> Any:
    """A Dask client for --scheduler (closed with the stack), or None."""
    if scheduler is None:
        return None
    from precisionlab.interop.distribute import connect_scheduler

    progress.start(f"connecting to the Dask scheduler at {scheduler}", 0)
    client = connect_scheduler(scheduler)
    stack.callback(client.close)
    progress.done(f"connected to the Dask scheduler at {scheduler}")
    return client


def _saved_candidates(paths: tuple[str, ...], step: int | None) -> list[Any]:
    """One candidate per --from file (export.candidate); a bad file or a repeated label is a usage error."""
    if step is not None and not paths:
        raise click.BadParameter("selects a step of a --from ladder result; give --from", param_hint="'--step'")
    from precisionlab.export.candidate import result_candidate

    saved = []
    for path in nonblank(paths):
        try:
            saved.append(result_candidate(path, step))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--from'") from None
    labels = [c.label for c in saved]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise click.BadParameter(f"two results share the label {twice[0]} (the file name's stem): rename one",
                                 param_hint="'--from'")
    return saved


def _command(model: str, schemes: list[str], tasks: list[str], max_drop: float, size: float,
             include: tuple[str, ...], exclude: tuple[str, ...], dtype: str, seed: int,
             from_paths: tuple[str, ...] = (), step: int | None = None) -> str:
    """The command line that reproduces this run (recorded in the results)."""
    parts = ["precisionlab", "eval", "--model", model]
    if schemes:
        parts += ["--schemes", ",".join(schemes)]
    for path in from_paths:
        parts += ["--from", path]
    if step is not None:
        parts += ["--step", str(step)]
    if tasks:
        parts += ["--tasks", ",".join(tasks)]
    parts += ["--max-drop", f"{max_drop:g}", "--size", f"{size:g}"]
    for pattern in include:
        parts += ["--include", pattern]
    for pattern in exclude:
        parts += ["--exclude", pattern]
    if dtype != "float32":
        parts += ["--dtype", dtype]
    if seed:
        parts += ["--seed", str(seed)]
    return " ".join(shlex.quote(p) for p in parts)

