"""Calibration never touches evaluation data: the one check that every calibrating command calls.

    docs = calibration_data("builtin")                  # or a text / JSONL {"text"} file
    check_calibration(docs, ["ppl", "quiz.jsonl"])      # ValueError (one line) on any overlap

``check_calibration`` compares the calibration documents with *every* source an evaluation may read
(``evaluation_sources``): the built-in evaluation part (the built-in tasks, the held-out text of the PTQ layer
numbers and the layer-output probe all come from it) and every user task file named, whatever its kind. The rule
is the one of ``check_no_overlap`` (the same source; a shared passage; a shared run of ``SHINGLE_WORDS`` words),
applied the same way whether the calibration data is the built-in calibration part or a user file: a task file
that holds built-in calibration text is refused as surely as a calibration file that holds evaluation text.
``ptq`` and ``ladder`` call it before the model loads; any later command that calibrates must too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from precisionlab.eval import data
from precisionlab.eval.data import BUILTIN_SOURCE, Document, check_no_overlap
from precisionlab.eval.tasks import BUILTIN_TASKS

BUILTIN = "builtin"

__all__ = ["BUILTIN", "calibration_data", "check_calibration", "check_no_overlap", "describe_calibration",
           "evaluation_sources"]


def calibration_data(calib_data: str) -> list[Document]:
    """The calibration documents: ``"builtin"`` (the built-in calibration part, ``data.calibration_documents``) or a
    text / JSONL (``{"text": ...}`` lines) file; ValueError (one line) for anything else."""
    if calib_data == BUILTIN:
        return data.calibration_documents(data.builtin_split())
    path = Path(calib_data).expanduser()
    if not path.is_file():
        raise ValueError(f"--calib-data: no such file: {calib_data} (give 'builtin' or a text / .jsonl file)")
    kind, items = data.load_task_file(path)
    if kind != "ppl":
        raise ValueError(f"--calib-data {path}: a {kind} file; calibration needs text (a text file or .jsonl lines "
                         '{"text": ...})')
    return list(items)


def evaluation_sources(task_names: Sequence[str]) -> list[Document]:
    """Everything an evaluation may read, as documents for the overlap rule: the built-in evaluation part (always)
    and every user task file among ``task_names`` (choice contexts and choices, prompts and answers, texts)."""
    docs: list[Document] = list(data.builtin_split().evaluation)
    for name in task_names:
        name = name.strip()
        if not name or name in BUILTIN_TASKS:
            continue
        _, items = data.load_task_file(name)
        source = str(Path(name).expanduser().resolve())
        for item in items:
            if isinstance(item, Document):
                docs.append(item)
                continue
            parts = [getattr(item, f, None) for f in ("text", "context", "prompt", "answer")]
            parts += list(getattr(item, "choices", ()))
            docs.append(Document(id=item.id, text="\n\n".join(p for p in parts if p), source=source))
    return docs


def describe_calibration(calib_docs: Sequence[Document]) -> str:
    """Where the calibration documents come from, in words: the built-in calibration part, or the file(s)."""
    sources = sorted({doc.source for doc in calib_docs if doc.source})
    if sources and all(s.startswith(f"{BUILTIN_SOURCE}:") for s in sources):
        return f"the built-in calibration part ({BUILTIN_SOURCE})"
    files = [s for s in sources if not s.startswith(f"{BUILTIN_SOURCE}:")]
    if not files:
        return "documents without a source"
    return files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} other file(s)"


def check_calibration(calib_docs: Sequence[Document], task_names: Sequence[str], *,
                      option: str = "the calibration data") -> None:
    """ValueError (one line) when the calibration documents overlap anything the evaluation reads.

    The message starts with ``option`` (what the user chose: ``--calib-data`` for ptq), names the calibration data
    (``describe_calibration``) and the first overlap found: ``--calib-data overlaps the evaluation data, refused:
    calibration data = the built-in calibration part (pydoc_data.topics); calibration document ... share a
    passage: ...``."""
    try:
        check_no_overlap(calib_docs, evaluation_sources(task_names))
    except ValueError as exc:
        raise ValueError(f"{option} overlaps the evaluation data, refused: calibration data = "
                         f"{describe_calibration(calib_docs)}; {exc}") from None
