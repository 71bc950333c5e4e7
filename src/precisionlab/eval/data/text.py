"""Text rules shared by every set: paragraphs (blank-line separated blocks) and chunking them to a size."""

from __future__ import annotations

import re
from collections.abc import Iterator

PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, line endings normalised, trailing spaces and empty ones removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [block.strip("\n").rstrip() for block in PARAGRAPH_BREAK.split(text) if block.strip()]



def _cut_line(line: str, limit: int) -> list[tuple[str, str]]:
    """A line as (separator, piece) pairs of at most ``limit`` characters, cut at the last space
    that fits (the space becomes the separator) or, in a word longer than ``limit``, anywhere."""
    pieces: list[tuple[str, str]] = []
    separator = ""
    while len(line) > limit:
        cut = line.rfind(" ", 0, limit + 1)
        if cut > 0:
            pieces.append((separator, line[:cut]))
            line, separator = line[cut + 1:], " "
        else:
            pieces.append((separator, line[:limit]))
            line, separator = line[limit:], ""
    pieces.append((separator, line))
    return pieces


def _atoms(block: str, limit: int) -> Iterator[tuple[str, str]]:
    """A paragraph as (separator, piece) pairs: its lines (joined by newlines), long lines cut."""
    for number, line in enumerate(block.split("\n")):
        for index, (separator, piece) in enumerate(_cut_line(line, limit)):
            yield (("\n\n" if number == 0 else "\n") if index == 0 else separator), piece


def chunk_text(text: str, max_chars: int, min_chars: int | None = None) -> list[str]:
    """Consecutive paragraphs packed into chunks of ``min_chars`` to ``max_chars`` characters.

    Rule: paragraphs (``paragraphs``) are added whole, joined by a blank line, while the chunk
    stays within ``max_chars``. When the next paragraph does not fit, the chunk closes if it has
    ``min_chars`` (default ``max_chars // 2``); otherwise the paragraph is added line by line
    (lines longer than ``max_chars - min_chars - 2`` cut at spaces) until the chunk is full.
    The text of a chunk is the source text exactly (its own separators). A final run shorter
    than ``min_chars`` is dropped, so every chunk lies within the bounds.
    """
    least = max_chars // 2 if min_chars is None else min_chars
    if not 0 < least <= max_chars - 4:
        raise ValueError(f"need 0 < min_chars <= max_chars - 4, got min_chars={least}, max_chars={max_chars}")
    limit = max_chars - least - 2
    chunks: list[str] = []
    current = ""
    for block in paragraphs(text):
        candidate = f"{current}\n\n{block}" if current else block
        if len(candidate) <= max_chars:
            current = candidate
            continue
        if len(current) >= least:
            chunks.append(current)
            current = ""
        for separator, piece in _atoms(block, limit):
            candidate = f"{current}{separator}{piece}" if current else piece
            if len(candidate) <= max_chars:
                current = candidate
            else:
                if len(current) >= least:
                    chunks.append(current)
                current = piece
    if len(current) >= least:
        chunks.append(current)
    return chunks
