"""The built-in split of ``pydoc_data.topics`` into a calibration part and an evaluation part (see the package)."""

from __future__ import annotations

import functools
import hashlib

from precisionlab.eval.data.overlap_rule import OverlapIndex
from precisionlab.eval.data.records import Document, Split
from precisionlab.eval.data.text import paragraphs

BUILTIN_SOURCE = "pydoc_data.topics"
SPLIT_SALT = "precisionlab-split:"
CALIBRATION_FRACTION = 0.5


def _split_value(name: str) -> int:
    """The first 8 bytes of ``sha256(SPLIT_SALT + name)`` as an unsigned integer."""
    return int.from_bytes(hashlib.sha256((SPLIT_SALT + name).encode("utf-8")).digest()[:8], "big")


def is_calibration_topic(name: str) -> bool:
    """Whether a topic belongs to the calibration part: its split value below
    ``CALIBRATION_FRACTION * 2**64`` (compared exactly; a hash of the name, same everywhere)."""
    return _split_value(name) < CALIBRATION_FRACTION * 2**64


def _topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(topics)


@functools.lru_cache(maxsize=1)
def builtin_split() -> Split:
    """Split ``pydoc_data.topics`` by topic into calibration and evaluation parts (see the module).

    The calibration part keeps its topics whole. Each evaluation topic keeps, in order, the
    paragraphs that ``check_no_overlap`` would not flag against the calibration part nor against
    the evaluation topics visited before it (in the order of their split hash): no shared
    ``SHINGLE_WORDS``-word shingle, no paragraph of ``MIN_PASSAGE_CHARS`` normalised characters
    found inside the other text.
    """
    topics = _topics()
    order = sorted(topics, key=lambda name: (_split_value(name), name))
    calibration = tuple(_topic_document(name, topics[name]) for name in order if is_calibration_topic(name))
    against_calibration = OverlapIndex(calibration)
    against_evaluation = OverlapIndex()
    evaluation = []
    removed = 0
    for name in order:
        if is_calibration_topic(name):
            continue
        kept = []
        for block in paragraphs(topics[name]):
            if against_calibration.clash(block) or against_evaluation.clash(block):
                removed += 1
            else:
                kept.append(block)
        if kept:
            document = _topic_document(name, "\n\n".join(kept))
            against_evaluation.add(document.text, name)
            evaluation.append(document)
    return Split(calibration=calibration, evaluation=tuple(evaluation), removed_paragraphs=removed)


def _topic_document(name: str, text: str) -> Document:
    return Document(id=name, text=text, group=name, source=f"{BUILTIN_SOURCE}:{name}")
