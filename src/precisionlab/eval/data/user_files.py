"""User data: a text file for perplexity / KL, or a JSONL task file (choice, generation or text lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from precisionlab.eval.data.records import ChoiceExample, Document, GenerationExample, TaskKind
from precisionlab.eval.data.text import paragraphs
from precisionlab.json_input import json_object

TEXT_MIN_CHARS = 1000


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
    """A text file as perplexity/KL units, grouped in blocks of consecutive units.

    Rule: split at blank lines into paragraphs, merge consecutive paragraphs (joined by a blank
    line) until a unit has at least ``min_chars`` characters; a final remainder shorter than that
    joins the previous unit. Paragraphs are never cut (a long one is one unit; the scorer
    truncates to the model's context). Ids are ``<stem>#<k>``; ``source`` is the resolved path
    (for ``check_no_overlap``); ``group`` is the unit's block (``text_blocks``): consecutive
    chunks of one text share its topic and style, so they are resampled together, as the
    built-in units are by topic.
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
    blocks = text_blocks(len(units))
    return [Document(id=f"{file.stem}#{k}", text=unit, group=f"{file.stem}#{blocks[k][0]}-{blocks[k][1]}",
                     source=source) for k, unit in enumerate(units)]


def block_length(n_units: int) -> int:
    """Units per block for ``n_units`` consecutive units of one text: the smallest ``b`` with ``b^3 >= n``
    (block length of order ``n^(1/3)``, the order that is optimal for the block bootstrap's variance
    estimate: Hall, Horowitz & Jing, Biometrika 82, 1995), at most ``n // 2`` so that there are at least two
    blocks to resample, and at least 1."""
    if n_units < 1:
        raise ValueError(f"need at least one unit, got {n_units}")
    length = 1
    while length**3 < n_units:
        length += 1
    return max(1, min(length, n_units // 2))


def text_blocks(n_units: int) -> list[tuple[int, int]]:
    """(first, last) unit index of the block that holds each of ``n_units`` consecutive units: non-overlapping
    blocks of ``block_length(n)`` units in order (Carlstein, Annals of Statistics 14, 1986); a last block shorter
    than half the length joins the one before it."""
    length = block_length(n_units)
    starts = list(range(0, n_units, length))
    if len(starts) > 1 and n_units - starts[-1] < (length + 1) // 2:
        starts.pop()
    ends = [*starts[1:], n_units]
    return [(start, end - 1) for start, end in zip(starts, ends, strict=True) for _ in range(start, end)]


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
