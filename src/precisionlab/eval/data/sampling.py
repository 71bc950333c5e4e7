"""How every built-in set draws its units: round-robin over the topics, so a larger set extends a smaller one."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from precisionlab.eval.data.records import Document
from precisionlab.eval.data.text import chunk_text


def round_robin(per_topic: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """First item of every topic, then the second of every topic, ... (stable order)."""
    depth = max((len(items) for items in per_topic), default=0)
    for k in range(depth):
        for items in per_topic:
            if k < len(items):
                yield items[k]


def take(items: Iterator[Any], n: int, what: str) -> list[Any]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of {what} must be a positive integer, got {n!r}")
    taken = list(itertools.islice(items, n))
    if len(taken) < n:
        raise ValueError(f"the built-in data holds only {len(taken)} {what}, {n} were asked for")
    return taken


def topic_chunks(part: Sequence[Document], max_chars: int) -> Iterator[Document]:
    per_topic = [
        [Document(id=f"{doc.id}#{k}", text=chunk, group=doc.group, source=doc.source)
         for k, chunk in enumerate(chunk_text(doc.text, max_chars))]
        for doc in part
    ]
    return round_robin(per_topic)
