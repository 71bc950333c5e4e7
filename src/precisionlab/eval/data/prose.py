"""Running prose in a document: its runs of prose paragraphs, and word windows cut from them (for the choice
and generation sets)."""

from __future__ import annotations

from collections.abc import Sequence

from precisionlab.eval.data.records import Document
from precisionlab.eval.data.text import paragraphs


def _is_prose(block: str) -> bool:
    """Running text: not indented (code, grammar), no grammar rule, table or doctest, and at
    least 80 % letters and spaces (a title with its ``****`` underline is not)."""
    if block[:1].isspace() or "::=" in block or block.startswith(("+-", ">>>")):
        return False
    return sum(ch.isalpha() or ch.isspace() for ch in block) >= 0.8 * len(block)


def prose_runs(document: Document) -> list[list[str]]:
    """The words of each run of consecutive prose paragraphs (any other block ends a run)."""
    runs: list[list[str]] = []
    current: list[str] = []
    for block in paragraphs(document.text):
        if _is_prose(block):
            current.extend(block.split())
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def span(words: Sequence[str], start: int, min_chars: int) -> int:
    """Index one past the last word of the shortest run from ``start`` reaching ``min_chars``
    (counting a leading space), or -1 when the words run out."""
    length = 0
    for end in range(start, len(words)):
        length += len(words[end]) + 1
        if length >= min_chars:
            return end + 1
    return -1


def word_windows(document: Document, head_chars: int, tail_chars: int) -> list[tuple[str, str]]:
    """Non-overlapping (head, tail) word windows of the document's runs of prose."""
    found = []
    for words in prose_runs(document):
        start = 0
        while True:
            middle = span(words, start, head_chars + 1)
            end = span(words, middle, tail_chars) if middle > 0 else -1
            if end < 0:
                break
            found.append((" ".join(words[start:middle]), " ".join(words[middle:end])))
            start = end
    return found
