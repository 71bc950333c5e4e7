"""Retrieval pairs from the evaluation part: the first half of a passage retrieves its second half."""

from __future__ import annotations

from precisionlab.eval.data.records import DEFAULT_SIZES, RetrievalPair, Split
from precisionlab.eval.data.sampling import round_robin, take
from precisionlab.eval.data.text import PARAGRAPH_BREAK, chunk_text

RETRIEVAL_HALF_CHARS = 400


def retrieval_pairs(split: Split, n: int = DEFAULT_SIZES.retrieval_pairs,
                    half_chars: int = RETRIEVAL_HALF_CHARS) -> list[RetrievalPair]:
    """Retrieval from the evaluation part: the first half of a passage retrieves its second half.

    Passages are chunks of ``half_chars`` to ``2 * half_chars`` characters of one topic (see
    ``chunk_text``); the cut is the paragraph boundary nearest the middle when one falls in the
    middle third, else the space nearest the middle, so a half has at most 2/3 of its chunk
    (533 characters with the default ``half_chars`` of 400).
    Every other pair's passage is a distractor for a query.
    """
    per_topic = []
    for doc in split.evaluation:
        pairs = []
        for k, chunk in enumerate(chunk_text(doc.text, 2 * half_chars, half_chars)):
            query, passage = _halves(chunk)
            if query and passage:
                pairs.append(RetrievalPair(id=f"{doc.id}#{k}", query=query, passage=passage, group=doc.group))
        per_topic.append(pairs)
    return take(round_robin(per_topic), n, "retrieval pairs")


def _halves(text: str) -> tuple[str, str]:
    middle = len(text) // 2
    breaks = [m.start() for m in PARAGRAPH_BREAK.finditer(text) if len(text) / 3 <= m.start() <= 2 * len(text) / 3]
    if breaks:
        cut = min(breaks, key=lambda at: abs(at - middle))
    else:
        spaces = [at for at in (text.rfind(" ", 0, middle), text.find(" ", middle)) if at > 0]
        if not spaces:
            return "", ""
        cut = min(spaces, key=lambda at: abs(at - middle))
    return text[:cut].strip(), text[cut:].strip()
