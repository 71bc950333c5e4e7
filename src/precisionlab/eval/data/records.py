"""The records of the evaluation data (documents, examples, the split), the set sizes, and the fingerprint
that names a run's exact data."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

TaskKind = Literal["choice", "generate", "ppl"]


@dataclass(frozen=True)
class Document:
    """A unit of text. ``group``: units sharing a non-empty group are correlated (same topic);
    ``source``: where it came from (a file path or ``pydoc_data.topics:<topic>``)."""

    id: str
    text: str
    group: str = ""
    source: str = ""


@dataclass(frozen=True)
class ChoiceExample:
    """Multiple choice: ``choices[gold]`` is the true continuation of ``context``. Built-in
    choices start with a space (the context ends at a word), as lm-evaluation-harness does."""

    id: str
    context: str
    choices: tuple[str, ...]
    gold: int
    group: str = ""


@dataclass(frozen=True)
class GenerationExample:
    """A prompt for greedy generation; ``answer`` None means: score against the reference
    model's own output."""

    id: str
    prompt: str
    answer: str | None = None
    group: str = ""


@dataclass(frozen=True)
class RetrievalPair:
    """``query`` (first half of a passage) should retrieve ``passage`` (its second half)."""

    id: str
    query: str
    passage: str
    group: str = ""


@dataclass(frozen=True)
class Split:
    """The built-in data: one document per topic in each part. ``removed_paragraphs`` counts the
    evaluation paragraphs dropped because they repeat calibration text or another topic."""

    calibration: tuple[Document, ...]
    evaluation: tuple[Document, ...]
    removed_paragraphs: int = 0

    def fingerprint(self) -> str:
        return fingerprint((*self.calibration, *self.evaluation))


@dataclass(frozen=True)
class TaskSizes:
    """How many units each built-in set holds (``task_sizes`` scales them)."""

    ppl_documents: int = 40
    choice_examples: int = 100
    generation_examples: int = 32
    retrieval_pairs: int = 64


DEFAULT_SIZES = TaskSizes()


def task_sizes(size: float = 1.0) -> TaskSizes:
    """The default sizes times ``size`` (rounded, at least 2 units each; ``--size``)."""
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0 or size == float("inf"):
        raise ValueError(f"size must be a positive number, got {size!r}")
    return TaskSizes(**{name: max(2, round(count * size)) for name, count in asdict(DEFAULT_SIZES).items()})


def fingerprint(items: Iterable[Any]) -> str:
    """SHA-256 (hex) of the items' fields in order: names the exact data of a run (cache keys)."""
    digest = hashlib.sha256()
    for item in items:
        record = asdict(item) if hasattr(item, "__dataclass_fields__") else item
        digest.update(json.dumps([type(item).__name__, record], sort_keys=True, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()



def unit_groups(items: Sequence[Any]) -> list[tuple[str, str]]:
    """The resampling cluster of each unit, for ``groups=`` in ``precisionlab.eval.stats``:
    ``(group, "")`` for units of a group, ``("", id)`` for an independent unit (empty group)."""
    return [(item.group, "") if item.group else ("", item.id) for item in items]
