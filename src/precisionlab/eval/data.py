"""Evaluation data without a download: built-in sets from Python's documentation, and user files.

Built-in data
    The text of the standard library documentation topics (``pydoc_data.topics.topics``: 79
    topics, about 459k characters on Python 3.10, 465k on 3.11, 492k on 3.12, 511k on 3.13).
    ``builtin_split`` assigns each topic to the calibration part or the evaluation part by
    the SHA-256 of its name (``SPLIT_SALT + name``; the first 8 bytes as a fraction of 2**64,
    below ``CALIBRATION_FRACTION`` means calibration). The 79 topic names are the same on
    Python 3.10-3.13, so the assignment is too; the texts are edited between versions
    (16-42 of the 79 topics differ from 3.11's), so numbers are comparable within one Python
    version — ``fingerprint`` names the exact data.

    Topics repeat each other's text ("compound" contains "for", "while", "try", ...;
    "specialnames" contains "customization", ...), so a split by topic alone would leak. The
    evaluation part keeps only the paragraphs that share nothing with the calibration part or
    with another evaluation topic under the rule of ``check_no_overlap`` (no ``SHINGLE_WORDS``-word
    shingle in common, and no paragraph of ``MIN_PASSAGE_CHARS`` or more normalised characters
    found inside the other side's text).

    From the evaluation part: perplexity/KL documents (``ppl_documents``), multiple-choice
    examples (``choice_examples``), generation prompts (``generation_examples``) and retrieval
    pairs (``retrieval_pairs``); from the calibration part only, ``calibration_documents``.
    Every set takes its units round-robin over the topics (in the order of their split hash),
    so a larger set extends a smaller one and the default sets span as many topics as they can.

Sizes (``TaskSizes``, scaled by ``task_sizes(size)``) are chosen so one candidate costs well
under a minute on 2 CPU cores for SmolLM2-135M (about 330 tokens/s, ~0.6 s per forward pass of
200 tokens), the reference being cached: 40 perplexity documents of 500-1000 characters
(8.2k tokens of SmolLM2's tokenizer, ~25 s), 100 four-way choice examples (context ~160
characters, continuations ~64: 9.2k tokens when the context is scored once, 19.8k when each
of the four sequences is scored whole), 32 generation prompts (~200 characters) and 64 retrieval
pairs (halves of about 400 characters, at most 533: within MiniLM's 256 word pieces).

Units and groups: every unit carries ``group``, the topic it came from. Units of one topic share
vocabulary and style, so the statistics can resample topics instead of units (``groups=`` in
``precisionlab.eval.stats``); user files give every unit its own group (``""``: independent).

User data
    ``load_text_file``: a UTF-8 text file for perplexity/KL, split into units at blank lines,
    consecutive paragraphs merged until a unit has at least ``min_chars`` characters.
    ``load_task_file``: a JSONL file of multiple-choice lines ``{"context", "choices", "gold"}``,
    generation lines ``{"prompt", "answer"}`` or text lines ``{"text"}``; any other suffix is a
    text file. Every problem is a one-line ``ValueError`` naming the file and the line.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from precisionlab.json_input import json_object

BUILTIN_SOURCE = "pydoc_data.topics"
SPLIT_SALT = "precisionlab-split:"
CALIBRATION_FRACTION = 0.5

SHINGLE_WORDS = 13          # overlap rule: any shared run of 13 normalised words
MIN_PASSAGE_CHARS = 24      # overlap rule: a normalised paragraph of 24+ characters found on the other side

PPL_MAX_CHARS = 1000
CALIBRATION_MAX_CHARS = 2000
CHOICE_CONTEXT_CHARS = 160
CHOICE_CONTINUATION_CHARS = 64
GENERATION_PROMPT_CHARS = 200
RETRIEVAL_HALF_CHARS = 400
TEXT_MIN_CHARS = 1000

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


# --------------------------------------------------------------------------- text rules

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_WORD = re.compile(r"\w+")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, line endings normalised, trailing spaces and empty ones removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [block.strip("\n").rstrip() for block in _PARAGRAPH_BREAK.split(text) if block.strip()]


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


class _OverlapIndex:
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


# --------------------------------------------------------------------------- built-in split


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
    against_calibration = _OverlapIndex(calibration)
    against_evaluation = _OverlapIndex()
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


# --------------------------------------------------------------------------- chunking


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


def _round_robin(per_topic: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """First item of every topic, then the second of every topic, ... (stable order)."""
    depth = max((len(items) for items in per_topic), default=0)
    for k in range(depth):
        for items in per_topic:
            if k < len(items):
                yield items[k]


def _take(items: Iterator[Any], n: int, what: str) -> list[Any]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of {what} must be a positive integer, got {n!r}")
    taken = list(itertools.islice(items, n))
    if len(taken) < n:
        raise ValueError(f"the built-in data holds only {len(taken)} {what}, {n} were asked for")
    return taken


def _documents(part: Sequence[Document], max_chars: int) -> Iterator[Document]:
    per_topic = [
        [Document(id=f"{doc.id}#{k}", text=chunk, group=doc.group, source=doc.source)
         for k, chunk in enumerate(chunk_text(doc.text, max_chars))]
        for doc in part
    ]
    return _round_robin(per_topic)


def ppl_documents(split: Split, n_docs: int = DEFAULT_SIZES.ppl_documents,
                  max_chars: int | None = None) -> list[Document]:
    """Perplexity/KL documents from the evaluation part: chunks of ``max_chars // 2`` to
    ``max_chars`` characters (default ``PPL_MAX_CHARS``), round-robin over topics (``chunk_text``)."""
    return _take(_documents(split.evaluation, max_chars or PPL_MAX_CHARS), n_docs, "perplexity documents")


def calibration_documents(split: Split, n_docs: int | None = None, *, max_chars: int = CALIBRATION_MAX_CHARS,
                          n_chars: int | None = None) -> list[Document]:
    """Calibration documents from the calibration part only (never the evaluation part).

    Chunks of ``max_chars // 2`` to ``max_chars`` characters, round-robin over the calibration
    topics: the first ``n_docs``, or as many as reach ``n_chars`` characters, or all of them.
    """
    documents = _documents(split.calibration, max_chars)
    if n_docs is not None:
        return _take(documents, n_docs, "calibration documents")
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


# --------------------------------------------------------------------------- prose passages


def _is_prose(block: str) -> bool:
    """Running text: not indented (code, grammar), no grammar rule, table or doctest, and at
    least 80 % letters and spaces (a title with its ``****`` underline is not)."""
    if block[:1].isspace() or "::=" in block or block.startswith(("+-", ">>>")):
        return False
    return sum(ch.isalpha() or ch.isspace() for ch in block) >= 0.8 * len(block)


def _prose_runs(document: Document) -> list[list[str]]:
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


def _span(words: Sequence[str], start: int, min_chars: int) -> int:
    """Index one past the last word of the shortest run from ``start`` reaching ``min_chars``
    (counting a leading space), or -1 when the words run out."""
    length = 0
    for end in range(start, len(words)):
        length += len(words[end]) + 1
        if length >= min_chars:
            return end + 1
    return -1


def _windows(document: Document, head_chars: int, tail_chars: int) -> list[tuple[str, str]]:
    """Non-overlapping (head, tail) word windows of the document's runs of prose."""
    found = []
    for words in _prose_runs(document):
        start = 0
        while True:
            middle = _span(words, start, head_chars + 1)
            end = _span(words, middle, tail_chars) if middle > 0 else -1
            if end < 0:
                break
            found.append((" ".join(words[start:middle]), " ".join(words[middle:end])))
            start = end
    return found


def generation_examples(split: Split, n: int = DEFAULT_SIZES.generation_examples,
                        prompt_chars: int = GENERATION_PROMPT_CHARS) -> list[GenerationExample]:
    """Prompts = prefixes of ~``prompt_chars`` characters of evaluation prose, cut at a word.

    ``answer`` is None: generation is scored against the reference model's own greedy output.
    """
    per_topic = [
        [GenerationExample(id=f"{doc.id}#{k}", prompt=head, group=doc.group)
         for k, (head, _) in enumerate(_windows(doc, prompt_chars, 1))]
        for doc in split.evaluation
    ]
    return _take(_round_robin(per_topic), n, "generation prompts")


def choice_examples(split: Split, n: int = DEFAULT_SIZES.choice_examples, seed: int = 0,
                    n_choices: int = 4) -> list[ChoiceExample]:
    """Multiple choice from the evaluation part: which continuation follows the context?

    Each example is a window of running prose (consecutive prose paragraphs): the context (~``CHOICE_CONTEXT_CHARS``
    characters, ending at a word) and its true continuation (the next words, ~
    ``CHOICE_CONTINUATION_CHARS`` characters). The ``n_choices - 1`` distractors come from prose of
    distinct other topics, never text the example's own topic contains, and are made to look like
    continuations: a length within -10 %..+15 % of the true one, cut at word boundaries, starting mid-sentence
    (lower case) when the true continuation does, at a sentence start otherwise. Gold positions
    are balanced (each position ``n / n_choices`` times) and shuffled; ``seed`` changes the
    distractors and the positions, never the contexts.
    """
    if isinstance(n_choices, bool) or not isinstance(n_choices, int) or n_choices < 2:
        raise ValueError(f"n_choices must be an integer >= 2, got {n_choices!r}")
    per_topic = [
        [(f"{doc.id}#{k}", doc.group, head, tail)
         for k, (head, tail) in enumerate(_windows(doc, CHOICE_CONTEXT_CHARS, CHOICE_CONTINUATION_CHARS))]
        for doc in split.evaluation
    ]
    windows = _take(_round_robin(per_topic), n, "choice examples")
    pools = {doc.group: _prose_runs(doc) for doc in split.evaluation}
    own_text = {doc.group: " ".join(doc.text.split()) for doc in split.evaluation}
    topics = sorted(pools)
    if len(topics) < n_choices:
        raise ValueError(f"need {n_choices} topics for {n_choices} choices, the evaluation part has {len(topics)}")
    rng = random.Random(f"precisionlab-choice:{seed}")
    positions = [i % n_choices for i in range(n)]
    rng.shuffle(positions)
    examples = []
    for (example_id, group, head, tail), gold in zip(windows, positions, strict=True):
        others = [topic for topic in topics if topic != group]
        rng.shuffle(others)
        distractors: list[str] = []
        for topic in others:
            found = _distractor(pools[topic], tail, rng, avoid={tail, *distractors})
            # a run that the example's own topic also contains could be a true continuation
            if found is not None and found not in own_text[group]:
                distractors.append(found)
                if len(distractors) == n_choices - 1:
                    break
        if len(distractors) < n_choices - 1:
            raise ValueError(f"no plausible distractors found for {example_id}")
        choices = [" " + text for text in distractors]
        choices.insert(gold, " " + tail)
        examples.append(ChoiceExample(id=example_id, context=head, choices=tuple(choices), gold=gold, group=group))
    return examples


def _distractor(pool: Sequence[Sequence[str]], true: str, rng: random.Random, avoid: set[str],
                tries: int = 60) -> str | None:
    """A run of words from ``pool`` shaped like the continuation ``true`` (see choice_examples)."""
    lower = true[:1].islower()
    low, high = 0.9 * len(true), 1.15 * len(true)
    candidates = [words for words in pool if len(" ".join(words)) >= low]
    if not candidates:
        return None
    for _ in range(tries):
        words = rng.choice(candidates)
        start = rng.randrange(len(words))
        first = words[start]
        if first[:1].islower() != lower:
            continue
        if not lower and start > 0 and not words[start - 1].endswith((".", ":", "?", "!")):
            continue
        end = _span(words, start, math.ceil(low) + 1)     # _span counts a space before each word
        if end < 0:
            continue
        text = " ".join(words[start:end])
        if len(text) <= high and text not in avoid:
            return text
    return None


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
    return _take(_round_robin(per_topic), n, "retrieval pairs")


def _halves(text: str) -> tuple[str, str]:
    middle = len(text) // 2
    breaks = [m.start() for m in _PARAGRAPH_BREAK.finditer(text) if len(text) / 3 <= m.start() <= 2 * len(text) / 3]
    if breaks:
        cut = min(breaks, key=lambda at: abs(at - middle))
    else:
        spaces = [at for at in (text.rfind(" ", 0, middle), text.find(" ", middle)) if at > 0]
        if not spaces:
            return "", ""
        cut = min(spaces, key=lambda at: abs(at - middle))
    return text[:cut].strip(), text[cut:].strip()


# --------------------------------------------------------------------------- overlap


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
    index = _OverlapIndex(calibration)
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


# --------------------------------------------------------------------------- user files


def _read_text(path: str | Path) -> tuple[Path, str]:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{file}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{file}: not UTF-8 text (byte {error.start})") from None
    if not text.strip():
        raise ValueError(f"{file}: the file is empty")
    return file, text


def load_text_file(path: str | Path, min_chars: int = TEXT_MIN_CHARS) -> list[Document]:
    """A text file as independent perplexity/KL units.

    Rule: split at blank lines into paragraphs, merge consecutive paragraphs (joined by a blank
    line) until a unit has at least ``min_chars`` characters; a final remainder shorter than that
    joins the previous unit. Paragraphs are never cut (a long one is one unit; the scorer
    truncates to the model's context). Ids are ``<stem>#<k>``; ``group`` is empty (every unit
    independent); ``source`` is the resolved path (for ``check_no_overlap``).
    """
    file, text = _read_text(path)
    if min_chars < 1:
        raise ValueError(f"min_chars must be positive, got {min_chars}")
    units: list[str] = []
    current = ""
    for block in paragraphs(text):
        current = f"{current}\n\n{block}" if current else block
        if len(current) >= min_chars:
            units.append(current)
            current = ""
    if current:
        if units:
            units[-1] = f"{units[-1]}\n\n{current}"
        else:
            units.append(current)
    source = str(file.resolve())
    return [Document(id=f"{file.stem}#{k}", text=unit, source=source) for k, unit in enumerate(units)]


def load_task_file(path: str | Path) -> tuple[TaskKind, list[Any]]:
    """A user task: ``("choice", [ChoiceExample])``, ``("generate", [GenerationExample])`` or
    ``("ppl", [Document])``.

    ``.jsonl`` / ``.json`` files hold one JSON object per line (blank lines skipped), all of one
    shape, told by the first line: ``{"context": str, "choices": [str, ...], "gold": int}``
    (``gold`` indexes ``choices``, at least 2 choices), ``{"prompt": str, "answer": str | null}``
    (``answer`` optional), or ``{"text": str}`` (one perplexity unit per line). An optional
    ``"id"`` names the example (default ``<stem>:<line>``), an optional ``"group"`` its cluster.
    Any other file is text for ``load_text_file``.
    """
    file = Path(path)
    if file.suffix.lower() not in (".jsonl", ".json"):
        return "ppl", load_text_file(file)
    file, text = _read_text(file)
    kind: TaskKind | None = None
    items: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file} line {number}"
        try:
            record = json_object(line)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        line_kind = _record_kind(record, where)
        if kind is None:
            kind = line_kind
        elif line_kind != kind:
            raise ValueError(f"{where}: a {line_kind} line in a {kind} file (every line must have the same shape)")
        items.append(_parse_record(record, kind, where, f"{file.stem}:{number}", str(file.resolve())))
    if kind is None:
        raise ValueError(f"{file}: the file is empty")
    return kind, items


def _record_kind(record: dict[str, Any], where: str) -> TaskKind:
    if "choices" in record or "context" in record or "gold" in record:
        return "choice"
    if "prompt" in record:
        return "generate"
    if "text" in record:
        return "ppl"
    raise ValueError(f"{where}: not a task line: expected keys context/choices/gold, prompt/answer, or text")


def _string_field(record: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    if key not in record:
        if required:
            raise ValueError(f"{where}: no {key!r} field")
        return None
    value = record[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _parse_record(record: dict[str, Any], kind: TaskKind, where: str, default_id: str,
                  source: str) -> ChoiceExample | GenerationExample | Document:
    example_id = record.get("id", default_id)
    if not isinstance(example_id, (str, int)) or isinstance(example_id, bool):
        raise ValueError(f"{where}: 'id' must be a string or an integer")
    group = _string_field(record, "group", where, required=False) or ""
    if kind == "choice":
        context = _string_field(record, "context", where)
        choices = record.get("choices")
        if "choices" not in record:
            raise ValueError(f"{where}: no 'choices' field")
        if not isinstance(choices, list) or not all(isinstance(choice, str) for choice in choices):
            raise ValueError(f"{where}: 'choices' must be a list of strings")
        if len(choices) < 2:
            raise ValueError(f"{where}: 'choices' needs at least 2 entries, got {len(choices)}")
        if "gold" not in record:
            raise ValueError(f"{where}: no 'gold' field (the index of the correct choice)")
        gold = record["gold"]
        if isinstance(gold, bool) or not isinstance(gold, int):
            raise ValueError(f"{where}: 'gold' must be an integer index into 'choices', got {gold!r}")
        if not 0 <= gold < len(choices):
            raise ValueError(f"{where}: 'gold' {gold} is out of range for {len(choices)} choices")
        return ChoiceExample(id=str(example_id), context=context or "", choices=tuple(choices), gold=gold,
                             group=group)
    if kind == "generate":
        prompt = _string_field(record, "prompt", where)
        if not prompt:
            raise ValueError(f"{where}: 'prompt' is empty")
        answer = record.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ValueError(f"{where}: 'answer' must be a string or null, got {type(answer).__name__}")
        return GenerationExample(id=str(example_id), prompt=prompt, answer=answer, group=group)
    text = _string_field(record, "text", where)
    if not (text or "").strip():
        raise ValueError(f"{where}: 'text' is empty")
    return Document(id=str(example_id), text=text or "", group=group, source=source)


def unit_groups(items: Sequence[Any]) -> list[tuple[str, str]]:
    """The resampling cluster of each unit, for ``groups=`` in ``precisionlab.eval.stats``:
    ``(group, "")`` for units of a group, ``("", id)`` for an independent unit (empty group)."""
    return [(item.group, "") if item.group else ("", item.id) for item in items]
