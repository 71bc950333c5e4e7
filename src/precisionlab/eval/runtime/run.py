"""A paired evaluation whose both sides come from the runtime: the reference (a float GGUF, or the float model
behind a server) and every candidate score the same token ids, and the per-example scores drawn from their
log-probabilities are compared with eval's statistics (eval.stats), the same intervals and verdicts.

    run = evaluate_runtime(reference, candidates, lm, specs, max_drop=1.0)
    run.task("ppl").outcome("q4_0").comparisons["ppl"].verdict      "pass" / "fail" / "inconclusive"
    run.task("ppl").reference_logprobs                              the runtime's own per-token arrays

Tasks (the same examples as `eval`, tokenized by `lm`'s tokenizer; every sequence starts with its prefix token):

    ppl      each document [prefix, t1 .. tn], cut to Limits.ppl_max_tokens tokens and the context; scored from
             t2 on (a server's reply has no value for t1: eval.runtime.server), so n - 1 tokens per document;
             perplexity increase (%, verdict), and the mean |d log p| per token against the reference (nats)
    choice   [prefix] + context + continuation, tokenized as eval's choice task (scoring.encode_pair); the
             continuation's summed log-probability; acc (pp, verdict) and acc_norm (pp, verdict)

Other tasks (generation, long windows, encoders) are refused: the runtimes here give log-probabilities only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.eval import scoring, stats
from precisionlab.eval.runner import Limits, Progress, SilentProgress, TaskView, check_max_drop, check_resamples
from precisionlab.eval.runtime.scorers import Scorer
from precisionlab.eval.tasks import TaskSpec

FIRST_SCORED = 2
"""Index in a sequence of its first scored token (t2; module docstring)."""
TASK_KINDS = ("ppl", "choice")
DEFAULT_LIMITS = Limits()


@dataclass
class RuntimeOutcome:
    """One candidate on one task."""

    candidate: str
    source: str
    metrics: dict[str, float]
    comparisons: dict[str, stats.Comparison]
    extras: dict[str, stats.Interval]
    per_example: dict[str, list[Any]]
    logprobs: list[np.ndarray] = field(repr=False)
    seconds: float = 0.0


@dataclass
class RuntimeTask(TaskView[RuntimeOutcome]):
    spec: TaskSpec
    sequences: list[list[int]] = field(repr=False)
    reference: dict[str, float]
    reference_examples: dict[str, list[Any]]
    reference_logprobs: list[np.ndarray] = field(repr=False)
    reference_seconds: float
    spans: Any = field(default=None, repr=False)
    """Where the scores lie in the log-probabilities (task_sequences)."""
    outcomes: list[RuntimeOutcome] = field(default_factory=list)


@dataclass
class RuntimeRun:
    runtime: str
    reference: dict[str, str]
    """label and source (a GGUF path, or a server and its model)."""
    candidates: list[dict[str, str]]
    tasks: list[RuntimeTask]
    max_drop: float
    settings: dict[str, Any]
    seconds: float = 0.0

    def task(self, name: str) -> RuntimeTask:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"no task {name!r}")


def check_tasks(specs: Sequence[TaskSpec]) -> None:
    """ValueError for a task a runtime cannot score (module docstring)."""
    for spec in specs:
        if spec.kind not in TASK_KINDS or spec.window is not None:
            raise ValueError(f"task {spec.name}: a runtime evaluation scores log-probabilities, so perplexity (ppl) "
                             "and multiple choice (choice) tasks only")


def check_labels(reference: Scorer, candidates: Sequence[Scorer]) -> None:
    labels = [reference.label, *(c.label for c in candidates)]
    if not candidates:
        raise ValueError("give at least one candidate")
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"two models share the label {twice[0]!r}: name them LABEL=PATH")
    for label in labels:
        if not label or any(c in label for c in ".= "):
            raise ValueError(f"label {label!r}: a findings key part, so no dots, spaces or '=' (name it LABEL=PATH)")


def evaluate_runtime(reference: Scorer, candidates: Sequence[Scorer], lm: scoring.CausalLM, specs: Sequence[TaskSpec],
                     max_drop: float, runtime: str = "llamacpp", progress: Progress | None = None, seed: int = 0,
                     n_resamples: int = stats.DEFAULT_RESAMPLES, confidence: float = stats.DEFAULT_CONFIDENCE,
                     limits: Limits = DEFAULT_LIMITS) -> RuntimeRun:
    """Score the reference, then every candidate, on every task; compare them (module docstring)."""
    check_max_drop(max_drop)
    check_resamples(n_resamples)
    check_tasks(specs)
    check_labels(reference, candidates)
    progress = progress or SilentProgress()
    options: dict[str, Any] = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    start = time.perf_counter()
    tasks = []
    for spec in specs:
        sequences, spans = task_sequences(lm, spec, limits)
        began = time.perf_counter()
        progress.start(f"reference ({reference.label}): {spec.name}", len(sequences))
        texts = [d.text for d in spec.items] if spec.kind == "ppl" else None  # each document's tokens begin it
        ref_logprobs = reference.logprobs(sequences, progress.advance, texts)
        summary, examples = _scores(spec, ref_logprobs, spans, reference.label)
        seconds = time.perf_counter() - began
        progress.done(f"reference ({reference.label}): {spec.name} ({len(spec.items)} examples, {seconds:.1f} s)")
        tasks.append(RuntimeTask(spec, sequences, summary, examples, ref_logprobs, seconds, spans))
    for candidate in candidates:
        for task in tasks:
            began = time.perf_counter()
            progress.start(f"{candidate.label}: {task.name}", len(task.sequences))
            texts = [d.text for d in task.spec.items] if task.kind == "ppl" else None
            logprobs = candidate.logprobs(task.sequences, progress.advance, texts)
            outcome = _outcome(task, candidate, logprobs, task.spans, max_drop, options)
            outcome.seconds = time.perf_counter() - began
            task.outcomes.append(outcome)
            progress.done(f"{candidate.label}: {task.name} ({len(task.spec.items)} examples, {outcome.seconds:.1f} s)")
    settings = {"runtime": runtime, "first_scored": FIRST_SCORED, "ppl_max_tokens": limits.ppl_max_tokens,
                "n_resamples": n_resamples, "seed": seed, "confidence": confidence, "max_length": lm.max_length}
    return RuntimeRun(runtime, {"label": reference.label, "source": reference.source},
                      [{"label": c.label, "source": c.source} for c in candidates], tasks, float(max_drop), settings,
                      time.perf_counter() - start)


# --------------------------------------------------------------------------- sequences
def task_sequences(lm: scoring.CausalLM, spec: TaskSpec,
                   limits: Limits = DEFAULT_LIMITS) -> tuple[list[list[int]], Any]:
    """The token-id sequences of a task and where its scores lie in their log-probabilities:
    ppl: None (every value from FIRST_SCORED on); choice: per example, per choice (sequence index, first index
    of the continuation in that sequence's log-probabilities, normalising length)."""
    if spec.kind == "ppl":
        sequences = scoring.ppl_sequences(lm, [d.text for d in spec.items], limits.ppl_max_tokens)
        for doc, sequence in zip(spec.items, sequences, strict=True):
            if len(sequence) <= FIRST_SCORED:
                raise ValueError(f"document {doc.id} of {spec.name} has {len(sequence) - 1} token(s); a runtime "
                                 f"evaluation scores from the second token on, so it needs at least two")
        return sequences, None
    sequences = []
    spans = []
    for example in spec.items:
        if not example.context:
            raise ValueError(f"choice example {example.id} of {spec.name} has an empty context; a runtime evaluation "
                             "scores continuations after some context")
        rows = []
        for choice in example.choices:
            text, length = scoring.continuation(example.context, choice)
            context_ids, cont_ids = scoring.encode_pair(lm, example.context, text)
            sequence = [lm.prefix_id, *context_ids, *cont_ids]
            if len(sequence) > lm.max_length:
                raise ValueError(f"choice example {example.id} of {spec.name} has {len(sequence)} tokens, more than "
                                 f"the context of {lm.max_length}")
            rows.append((len(sequences), len(context_ids), length))
            sequences.append(sequence)
        spans.append(rows)
    return sequences, spans


# --------------------------------------------------------------------------- scores
def _checked(values: np.ndarray, label: str, what: str) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise ValueError(f"{label} gave no finite log-probability for token {int(bad[0])} of {what}")
    return values


def _scores(spec: TaskSpec, logprobs: list[np.ndarray], spans: Any,
            label: str) -> tuple[dict[str, float], dict[str, list[Any]]]:
    """(metrics, per-example scores) of one model on one task from its log-probabilities."""
    if spec.kind == "ppl":
        scored = [_checked(lp[FIRST_SCORED - 1 :], label, f"document {d.id}")
                  for lp, d in zip(logprobs, spec.items, strict=True)]
        nll = [-float(s.sum()) for s in scored]
        tokens = [int(s.size) for s in scored]
        return {"ppl": math.exp(sum(nll) / sum(tokens)), "tokens": float(sum(tokens))}, {"nll": nll, "tokens": tokens}
    logliks, acc, acc_norm = [], [], []
    for example, rows in zip(spec.items, spans, strict=True):
        lls = [float(_checked(logprobs[i][first:], label, f"choice example {example.id}").sum())
               for i, first, _ in rows]
        normalised = [ll / length for ll, (_, _, length) in zip(lls, rows, strict=True)]
        logliks.append(lls)
        acc.append(float(int(np.argmax(lls)) == example.gold))
        acc_norm.append(float(int(np.argmax(normalised)) == example.gold))
    return ({"acc": 100 * float(np.mean(acc)), "acc_norm": 100 * float(np.mean(acc_norm))},
            {"acc": acc, "acc_norm": acc_norm, "loglik": logliks})


def _outcome(task: RuntimeTask, candidate: Scorer, logprobs: list[np.ndarray], spans: Any, max_drop: float,
             options: dict[str, Any]) -> RuntimeOutcome:
    spec = task.spec
    metrics, per_example = _scores(spec, logprobs, spans, candidate.label)
    groups = spec.groups
    if spec.kind == "ppl":
        ref = task.reference_examples
        comparison = stats.compare_perplexity(np.asarray(ref["nll"]), np.asarray(per_example["nll"]),
                                              np.asarray(ref["tokens"], dtype=np.float64), max_drop, groups=groups,
                                              **options)
        gaps = [np.abs(c[FIRST_SCORED - 1 :] - r[FIRST_SCORED - 1 :])
                for c, r in zip(logprobs, task.reference_logprobs, strict=True)]
        mean_gap = stats.bootstrap_ratio(np.asarray([g.sum() for g in gaps]),
                                         np.asarray([g.size for g in gaps], dtype=np.float64), groups=groups,
                                         **options)
        metrics = {"ppl": metrics["ppl"], "dlogp_mean": mean_gap.estimate,
                   "dlogp_max": float(max(g.max() for g in gaps))}
        per_example["dlogp_sum"] = [float(g.sum()) for g in gaps]
        return RuntimeOutcome(candidate.label, candidate.source, metrics, {"ppl": comparison},
                              {"dlogp_mean": mean_gap}, per_example, logprobs)
    ref = task.reference_examples
    comparisons = {name: stats.compare_scores(np.asarray(ref[name]), np.asarray(per_example[name]), max_drop,
                                              groups=groups, **options) for name in ("acc", "acc_norm")}
    return RuntimeOutcome(candidate.label, candidate.source, metrics, comparisons, {}, per_example, logprobs)


# --------------------------------------------------------------------------- files
def write_logprobs(run: RuntimeRun, folder: Path) -> list[Path]:
    """eval_runtime_<task>_logprobs.npz per task: the token ids (`first`, each sequence's first; `tokens`, the rest,
    concatenated; `offsets`), and each
    model's per-token log-probabilities under its label (one value per token after each sequence's first)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for task in run.tasks:
        lengths = [len(s) - 1 for s in task.sequences]
        arrays: dict[str, np.ndarray] = {
            "first": np.asarray([s[0] for s in task.sequences], dtype=np.int64),
            "tokens": np.concatenate([np.asarray(s[1:], dtype=np.int64) for s in task.sequences]),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            run.reference["label"]: np.concatenate(task.reference_logprobs)}
        for outcome in task.outcomes:
            arrays[outcome.candidate] = np.concatenate(outcome.logprobs)
        path = folder / f"eval_runtime_{task.name}_logprobs.npz"
        np.savez(path, **arrays)  # type: ignore[arg-type]
        written.append(path)
    return written
