"""Perplexity / KL documents (evaluation part) and calibration documents (calibration part only)."""

from __future__ import annotations

from precisionlab.eval.data.records import DEFAULT_SIZES, Document, Split
from precisionlab.eval.data.sampling import take, topic_chunks

PPL_MAX_CHARS = 1000
CALIBRATION_MAX_CHARS = 2000


def ppl_documents(split: Split, n_docs: int = DEFAULT_SIZES.ppl_documents,
                  max_chars: int | None = None) -> list[Document]:
    """Perplexity/KL documents from the evaluation part: chunks of ``max_chars // 2`` to
    ``max_chars`` characters (default ``PPL_MAX_CHARS``), round-robin over topics (``chunk_text``)."""
    return take(topic_chunks(split.evaluation, max_chars or PPL_MAX_CHARS), n_docs, "perplexity documents")


def calibration_documents(split: Split, n_docs: int | None = None, *, max_chars: int = CALIBRATION_MAX_CHARS,
                          n_chars: int | None = None) -> list[Document]:
    """Calibration documents from the calibration part only (never the evaluation part).

    Chunks of ``max_chars // 2`` to ``max_chars`` characters, round-robin over the calibration
    topics: the first ``n_docs``, or as many as reach ``n_chars`` characters, or all of them.
    """
    documents = topic_chunks(split.calibration, max_chars)
    if n_docs is not None:
        return take(documents, n_docs, "calibration documents")
    if n_chars is None:
        return list(documents)
    if n_chars < 1:
        raise ValueError(f"n_chars must be positive, got {n_chars}")
    taken, total = [], 0
    for document in documents:
        taken.append(document)
        total += len(document.text)
        if total >= n_chars:
            return taken
    raise ValueError(f"the calibration part holds only {total} characters, {n_chars} were asked for")
