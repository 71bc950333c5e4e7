"""`precisionlab eval --runtime llamacpp` / `eval --server URL`: the evaluation scored by the runtime that ships
the model (eval.runtime; docs/eval.md "In the runtime").

    precisionlab eval --runtime llamacpp --reference f32.gguf --candidates q4_0.gguf[,q8=q8_0.gguf] \\
        [--tokenizer SPEC] [--tasks ppl,choice] [--max-drop 1] [--threads N]
    precisionlab eval --server http://127.0.0.1:8080 --reference f32 --candidates q4_0 [--tokenizer SPEC] \\
        [--batch 8] [--retries 3]

With --server, --reference and each --candidates entry are model names served at URL (the request's `model`),
or URLs of servers of their own; LABEL=VALUE names one (its findings key part).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from precisionlab.cli.common import StepProgress, emit, split_commas


def labelled(entry: str) -> tuple[str | None, str]:
    """'LABEL=VALUE' -> (LABEL, VALUE); a bare VALUE -> (None, VALUE). A URL's own '=' (in its query) stays."""
    head, eq, rest = entry.partition("=")
    if eq and "/" not in head and ":" not in head and head.strip():
        return head.strip(), rest.strip()
    return None, entry.strip()


def file_label(path: str) -> str:
    return Path(path).name.removesuffix(".gguf").replace(".", "-") or "model"


def run_command(runtime: str | None, server: str | None, reference: str | None, candidates: tuple[str, ...],
                tokenizer: str | None, model: str, tasks: tuple[str, ...], max_drop: float, size: float, seed: int,
                resamples: int, threads: int | None, batch: int, retries: int, as_json: bool,
                out_dir: Path | None, show_findings: bool) -> None:
    """The runtime branch of `precisionlab eval` (module docstring)."""
    from precisionlab.eval.data import task_sizes
    from precisionlab.eval.runner import check_max_drop, check_resamples
    from precisionlab.eval.runtime import run as runtime_run
    from precisionlab.eval.tasks import check_task_names, resolve_tasks
    from precisionlab.labs.eval_runtime import runtime_result

    if runtime is not None and server is not None:
        raise click.UsageError("give --runtime llamacpp (GGUF files in this process) or --server URL, not both")
    if reference is None:
        raise click.UsageError("a runtime evaluation needs --reference (the float model as the runtime runs it)")
    entries = split_commas(candidates)
    if not entries:
        raise click.UsageError("a runtime evaluation needs --candidates (comma-separated or repeated)")
    check_max_drop(max_drop)
    check_resamples(resamples)
    task_sizes(size)
    task_names = split_commas(tasks) or ["ppl", "choice"]
    check_task_names(task_names, size)
    if threads is not None and threads < 1:
        raise click.BadParameter(f"must be a positive integer, got {threads}", param_hint="'--threads'")
    mode = "server" if server is not None else "llamacpp"
    if mode == "llamacpp":
        from precisionlab import peers

        peers.llama_cpp("--runtime llamacpp")  # missing: one line, before any tokenizer loads
        for _, value in [labelled(reference), *map(labelled, entries)]:
            if not Path(value).expanduser().is_file():
                raise click.BadParameter(f"no such GGUF file: {value}", param_hint="'--reference' / '--candidates'")
    else:
        from precisionlab.eval.runtime.server import base_url

        base_url(server or "")
    spec = tokenizer or (labelled(reference)[1] if mode == "llamacpp" else model)
    command = _command(mode, server, reference, entries, tokenizer, tasks, max_drop, size, seed)
    with StepProgress() as progress:
        progress.start(f"loading the tokenizer of {spec}", 0)
        from precisionlab.eval.runtime.tokens import tokenizer_lm

        lm = tokenizer_lm(spec)
        progress.done(f"loaded the tokenizer of {spec}")
        specs = resolve_tasks(task_names, "causal-lm", size=size, seed=seed)
        runtime_run.check_tasks(specs)
        scorers = [_scorer(mode, entry, server, lm, threads, batch, retries) for entry in [reference, *entries]]
        try:
            run = runtime_run.evaluate_runtime(scorers[0], scorers[1:], lm, specs, max_drop, runtime=mode,
                                               progress=progress, seed=seed, n_resamples=resamples)
        finally:
            for scorer in scorers:
                scorer.close()
        for scorer in scorers:
            for note in getattr(scorer, "notes", []):
                progress.note(note)
    params: dict[str, Any] = {"runtime": mode, "server": server or "", "reference": reference,
                              "candidates": ",".join(entries), "tokenizer": spec,
                              "tasks": ",".join(s.name for s in specs), "max_drop": float(max_drop),
                              "size": float(size), "seed": seed, "n_resamples": resamples, "command": command}
    result = runtime_result(run, params)
    emit(result, as_json, out_dir, findings=show_findings)
    if out_dir is not None:
        written = runtime_run.write_logprobs(run, out_dir)
        if not as_json:
            click.echo(f"wrote the per-token log-probabilities to {', '.join(str(p) for p in written)}")
    if not as_json and not show_findings:
        click.echo(f"{len(result.findings)} findings (every number above, by key): in --json, "
                   "--out, or --findings")


def _scorer(mode: str, entry: str, server: str | None, lm: Any, threads: int | None, batch: int,
            retries: int) -> Any:
    label, value = labelled(entry)
    if mode == "llamacpp":
        from precisionlab.eval.runtime.scorers import LlamaCppScorer

        return LlamaCppScorer(Path(value).expanduser(), label or file_label(value), threads=threads)
    from precisionlab.eval.runtime.server import ServerScorer
    from precisionlab.eval.runtime.tokens import decode, prefix_text

    is_url = value.startswith(("http://", "https://"))
    url = value if is_url else str(server)
    return ServerScorer(url, decode(lm), lm.prefix_id, prefix_text(lm), model=None if is_url else value,
                        label=label, batch=batch, retries=retries, encode=lm.encode)


def _command(mode: str, server: str | None, reference: str, entries: list[str], tokenizer: str | None,
             tasks: tuple[str, ...], max_drop: float, size: float, seed: int) -> str:
    parts = ["precisionlab", "eval"] + (["--server", str(server)] if mode == "server" else ["--runtime", "llamacpp"])
    parts += ["--reference", reference, "--candidates", ",".join(entries)]
    if tokenizer:
        parts += ["--tokenizer", tokenizer]
    if tasks:
        parts += ["--tasks", ",".join(split_commas(tasks))]
    parts += ["--max-drop", f"{max_drop:g}", "--size", f"{size:g}"]
    if seed:
        parts += ["--seed", str(seed)]
    return " ".join(shlex.quote(p) for p in parts)
