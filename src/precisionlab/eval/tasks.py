"""Task specs: the built-in tasks (from pydoc_data.topics) and user files, resolved to data.

    ppl         held-out text: perplexity, KL(reference || candidate), top-1 agreement   (causal LM)
    longppl     the same on documents of several thousand tokens, scored in sliding
                windows (LONG_WINDOW tokens or the model's context, stride half of it)   (causal LM)
    choice      multiple choice by log-likelihood, acc and acc_norm                      (causal LM)
    generate    greedy generation, exact match with the reference's output               (causal LM)
    retrieval   first half of a passage retrieves its second half: accuracy@1,
                embedding cosine fidelity                                                (encoder)
    PATH        a user file: .jsonl/.json lines {"context","choices","gold"} (choice),
                {"prompt","answer"} (generate), {"text"} (ppl); any other file is text (ppl)

A user task is named by its file's stem (findings `eval.<stem>.*`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precisionlab.eval import data

BUILTIN_TASKS = ("ppl", "longppl", "choice", "generate", "retrieval")
CAUSAL_TASKS = ("ppl", "longppl", "choice", "generate")
ENCODER_TASKS = ("retrieval",)
DEFAULT_TASKS = {"causal-lm": ("ppl", "choice"), "encoder": ("retrieval",)}
LONG_WINDOW = 4096
"""Longest scoring window of `longppl` (tokens, the prefix included); a model with a shorter context scores in
windows of its context. The stride is half the window: every token has at least half a window of context."""
LONG_MAX_TOKENS = 8192
"""Tokens scored per `longppl` document at most (the built-in long documents have 5.5k-6.3k)."""


@dataclass(frozen=True)
class TaskSpec:
    name: str
    """ppl, choice, generate, retrieval, or a user file's stem."""
    kind: str
    """ppl, choice, generate or retrieval: how it is scored."""
    items: tuple[Any, ...]
    source: str
    """"builtin" or the user file's path."""
    window: int | None = None
    """Perplexity tasks scored in sliding windows: the longest window (None: each document in one forward, cut to
    the model's context)."""
    max_tokens: int | None = None
    """Tokens scored per document (None: the run's Limits.ppl_max_tokens)."""

    @property
    def ids(self) -> list[str]:
        return [item.id for item in self.items]

    @property
    def groups(self) -> list[tuple[str, str]]:
        """Resampling clusters (the topic of built-in units, the block of a text file's units; JSONL lines on their own
        unless they name a group)."""
        return data.unit_groups(self.items)

    @property
    def fingerprint(self) -> str:
        return data.fingerprint(self.items)


def builtin_task(name: str, size: float = 1.0, seed: int = 0) -> TaskSpec:
    sizes = data.task_sizes(size)
    split = data.builtin_split()
    items: Sequence[Any]
    if name == "ppl":
        items = data.ppl_documents(split, sizes.ppl_documents)
    elif name == "longppl":
        from precisionlab.eval.data.long_documents import LONG_DOCUMENTS, long_documents

        items = long_documents(split, max(2, round(LONG_DOCUMENTS * size)))
        return TaskSpec(name, "ppl", tuple(items), "builtin", window=LONG_WINDOW, max_tokens=LONG_MAX_TOKENS)
    elif name == "choice":
        items = data.choice_examples(split, sizes.choice_examples, seed=seed)
    elif name == "generate":
        items = data.generation_examples(split, sizes.generation_examples)
    elif name == "retrieval":
        items = data.retrieval_pairs(split, sizes.retrieval_pairs)
    else:
        raise ValueError(f"unknown built-in task {name!r}; built-in tasks: {', '.join(BUILTIN_TASKS)}")
    return TaskSpec(name, name, tuple(items), "builtin")


def check_task_names(names: Sequence[str], size: float = 1.0) -> None:
    """Read every user task file now (a bad line is a one-line ValueError before any model loads), and build
    longppl's documents at `size` (more than the built-in text holds is a ValueError, before loading too)."""
    for name in names:
        name = name.strip()
        if name == "longppl":
            builtin_task(name, size)
        if name and name not in BUILTIN_TASKS:
            path = Path(name).expanduser()
            if not path.is_file():
                raise ValueError(f"unknown task {name!r}: not a built-in task ({', '.join(BUILTIN_TASKS)}) and "
                                 "no such file")
            data.load_task_file(path)


def resolve_tasks(names: Sequence[str], model_kind: str, size: float = 1.0, seed: int = 0) -> list[TaskSpec]:
    """Built-in names and user file paths, checked against the model's kind; ValueError on a bad one."""
    chosen = [n.strip() for n in names if n.strip()] or list(DEFAULT_TASKS[model_kind])
    allowed = CAUSAL_TASKS if model_kind == "causal-lm" else ENCODER_TASKS
    specs: list[TaskSpec] = []
    for name in chosen:
        if name in BUILTIN_TASKS:
            if name not in allowed:
                needs = "an encoder (e.g. minilm-l6)" if name in ENCODER_TASKS else "a causal LM (e.g. smollm2-135m)"
                raise ValueError(f"task {name!r} needs {needs}; this model is a {model_kind}")
            spec = builtin_task(name, size, seed)
        else:
            path = Path(name).expanduser()
            if not path.is_file():
                raise ValueError(f"unknown task {name!r}: not a built-in task ({', '.join(BUILTIN_TASKS)}) and "
                                 "no such file")
            kind, items = data.load_task_file(path)
            if kind not in allowed:
                raise ValueError(f"{path}: a {kind} task needs a causal LM; this model is a {model_kind}")
            spec = TaskSpec(path.stem, kind, tuple(items), str(path))
            if spec.name in BUILTIN_TASKS:
                raise ValueError(f"{path}: a user task file may not be named like the built-in task {spec.name!r}")
        if any(s.name == spec.name for s in specs):
            raise ValueError(f"task {spec.name!r} is given twice")
        if len(spec.items) < 2:
            raise ValueError(f"task {spec.name!r} has {len(spec.items)} example(s); a paired interval needs 2 or more")
        specs.append(spec)
    return specs
