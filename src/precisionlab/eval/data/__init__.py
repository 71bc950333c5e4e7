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
``precisionlab.eval.stats``); the units of a user text file are grouped in blocks of consecutive units
(``text_blocks``); JSONL lines are independent unless they name a ``group``.

User data
    ``load_text_file``: a UTF-8 text file for perplexity/KL, split into units at blank lines,
    consecutive paragraphs merged until a unit has at least ``min_chars`` characters.
    ``load_task_file``: a JSONL file of multiple-choice lines ``{"context", "choices", "gold"}``,
    generation lines ``{"prompt", "answer"}`` or text lines ``{"text"}``; any other suffix is a
    text file. Every problem is a one-line ``ValueError`` naming the file and the line.

Where each part lives (this package re-exports every public name, so ``from precisionlab.eval.data import X`` keeps
working):

    records       Document, ChoiceExample, GenerationExample, RetrievalPair, Split, TaskSizes, fingerprint, unit_groups
    text          paragraphs and chunk_text
    overlap_rule  the overlap rule (shingles, passages) and check_no_overlap
    split         builtin_split: the topics assigned to calibration or evaluation
    sampling      round-robin over topics, shared by every built-in set
    documents     ppl_documents, calibration_documents
    prose         runs of prose and word windows (for choice and generation)
    choice        choice_examples            generation  generation_examples        retrieval  retrieval_pairs
    user_files    load_text_file, load_task_file
"""

from __future__ import annotations

from precisionlab.eval.data.choice import CHOICE_CONTEXT_CHARS, CHOICE_CONTINUATION_CHARS, choice_examples
from precisionlab.eval.data.documents import CALIBRATION_MAX_CHARS, PPL_MAX_CHARS, calibration_documents, ppl_documents
from precisionlab.eval.data.generation import GENERATION_PROMPT_CHARS, generation_examples
from precisionlab.eval.data.overlap_rule import (
    MIN_PASSAGE_CHARS,
    SHINGLE_WORDS,
    check_no_overlap,
    normalised_words,
    passage_key,
    shingles,
)
from precisionlab.eval.data.records import (
    DEFAULT_SIZES,
    ChoiceExample,
    Document,
    GenerationExample,
    RetrievalPair,
    Split,
    TaskKind,
    TaskSizes,
    fingerprint,
    task_sizes,
    unit_groups,
)
from precisionlab.eval.data.retrieval import RETRIEVAL_HALF_CHARS, retrieval_pairs
from precisionlab.eval.data.split import (
    BUILTIN_SOURCE,
    CALIBRATION_FRACTION,
    SPLIT_SALT,
    builtin_split,
    is_calibration_topic,
)
from precisionlab.eval.data.text import chunk_text, paragraphs
from precisionlab.eval.data.user_files import TEXT_MIN_CHARS, block_length, load_task_file, load_text_file, text_blocks

__all__ = [
    "BUILTIN_SOURCE",
    "CALIBRATION_FRACTION",
    "CALIBRATION_MAX_CHARS",
    "CHOICE_CONTEXT_CHARS",
    "CHOICE_CONTINUATION_CHARS",
    "DEFAULT_SIZES",
    "GENERATION_PROMPT_CHARS",
    "MIN_PASSAGE_CHARS",
    "PPL_MAX_CHARS",
    "RETRIEVAL_HALF_CHARS",
    "SHINGLE_WORDS",
    "SPLIT_SALT",
    "TEXT_MIN_CHARS",
    "ChoiceExample",
    "Document",
    "GenerationExample",
    "RetrievalPair",
    "Split",
    "TaskKind",
    "TaskSizes",
    "block_length",
    "builtin_split",
    "calibration_documents",
    "check_no_overlap",
    "choice_examples",
    "chunk_text",
    "fingerprint",
    "generation_examples",
    "is_calibration_topic",
    "load_task_file",
    "load_text_file",
    "normalised_words",
    "paragraphs",
    "passage_key",
    "ppl_documents",
    "retrieval_pairs",
    "shingles",
    "task_sizes",
    "text_blocks",
    "unit_groups",
]
