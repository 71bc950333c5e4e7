"""The overlap rule: when two sets of documents share text (shingles of words, or a whole passage), and
``check_no_overlap``, which refuses calibration data that overlaps evaluation data."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence

from precisionlab.eval.data.records import Document
from precisionlab.eval.data.text import paragraphs

SHINGLE_WORDS = 13          # overlap rule: any shared run of 13 normalised words
MIN_PASSAGE_CHARS = 24      # overlap rule: a normalised paragraph of 24+ characters found on the other side

_WORD = re.compile(r"\w+")


def normalised_words(text: str) -> list[str]:
    """The overlap rule's view of text: lower-case word characters, punctuation and layout dropped."""
    return _WORD.findall(text.lower())


def shingles(words: Sequence[str], width: int = SHINGLE_WORDS) -> set[str]:
    """Every run of ``width`` consecutive words, joined by spaces."""
    return {" ".join(words[i:i + width]) for i in range(len(words) - width + 1)}


def passage_key(text: str) -> str | None:
    """A paragraph's normalised words, when long enough (``MIN_PASSAGE_CHARS``) to count as a passage."""
    key = " ".join(normalised_words(text))
    return key if len(key) >= MIN_PASSAGE_CHARS else None


class OverlapIndex:
    """The overlap rule's view of a set of documents: their shingles, and their normalised text
    as one searchable string (documents separated by ``|``, which no word contains)."""

    def __init__(self, documents: Iterable[Document] = ()) -> None:
        self.shingle_owner: dict[str, str] = {}
        self._parts: list[tuple[str, str]] = []
        self._stream: str | None = None
        self._starts: list[int] = []
        for document in documents:
            self.add(document.text, document.id)

    def add(self, text: str, owner: str) -> None:
        words = normalised_words(text)
        for s in shingles(words):
            self.shingle_owner.setdefault(s, owner)
        self._parts.append((" ".join(words), owner))
        self._stream = None

    def find_passage(self, key: str) -> str | None:
        """The owner of the first document containing ``key`` as a run of whole words, or None."""
        if self._stream is None:
            pieces, self._starts, at = [], [], 0
            for text, _ in self._parts:
                self._starts.append(at)
                pieces.append(f" {text} ")
                at += len(text) + 3
            self._stream = "|".join(pieces)
        at = self._stream.find(f" {key} ")
        if at < 0:
            return None
        return self._parts[bisect.bisect_right(self._starts, at) - 1][1]

    def clash(self, text: str) -> tuple[str, str] | None:
        """(owner, what is shared) for the first shingle or passage of ``text`` found here."""
        for s in shingles(normalised_words(text)):
            if s in self.shingle_owner:
                return self.shingle_owner[s], s
        key = passage_key(text)
        owner = self.find_passage(key) if key else None
        return (owner, key or "") if owner is not None else None



def check_no_overlap(calibration: Sequence[Document], evaluation: Sequence[Document],
                     max_shared_shingles: int = 0) -> None:
    """Refuse calibration data that overlaps the evaluation data (``ValueError``, one line).

    Text is compared normalised (``normalised_words``: lower case, punctuation and layout
    dropped). Overlap is (1) the same source (a file, or a built-in topic) on both sides;
    (2) an evaluation paragraph of at least ``MIN_PASSAGE_CHARS`` normalised characters found
    inside a calibration document as a run of whole words (identical paragraphs, and short
    passages such as a copied heading or signature line); or (3) more than
    ``max_shared_shingles`` (default 0: the 13-gram rule of decontamination studies) distinct
    runs of ``SHINGLE_WORDS`` words found on both sides, paragraph breaks included.
    """
    sources = {doc.source for doc in calibration if doc.source} & {doc.source for doc in evaluation if doc.source}
    if sources:
        raise ValueError(f"calibration and evaluation data come from the same source: {sorted(sources)[0]}")
    index = OverlapIndex(calibration)
    shared: set[str] = set()
    first: tuple[str, str, str] | None = None
    for document in evaluation:
        for block in paragraphs(document.text):
            key = passage_key(block)
            owner = index.find_passage(key) if key else None
            if owner is not None:
                raise ValueError(f"calibration document {owner} and evaluation document {document.id} "
                                 f"share a passage: {(key or '')[:60]!r}")
        for s in shingles(normalised_words(document.text)):
            if s in index.shingle_owner and s not in shared:
                shared.add(s)
                first = first or (index.shingle_owner[s], document.id, s)
    if len(shared) > max_shared_shingles and first is not None:
        raise ValueError(f"calibration document {first[0]} and evaluation document {first[1]} share text "
                         f"({len(shared)} runs of {SHINGLE_WORDS} words in common, first {first[2]!r})")
