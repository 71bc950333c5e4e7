"""Saved lab results read back: the <name>.json file a command's --out writes (`report.outputs.write_lab`),
so that `precisionlab run --include FILE` can make it a section of the report.

Every problem is a one-line ValueError that starts with the file's path (a missing or unreadable file
is the OSError itself, which the command line turns into one line too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from precisionlab.json_input import json_object
from precisionlab.results import LabResult

SAVED_PROVENANCE = ("precisionlab", "git_commit", "date", "command")
"""What of a saved file's provenance the report repeats beside its section."""


@dataclass(frozen=True)
class SavedLab:
    """One saved result: where it came from, the result, and the provenance saved with it (if any)."""

    path: Path
    result: LabResult
    provenance: dict[str, object] | None = None

    def origin(self) -> str:
        """One sentence for the report: the file, and when and by what the result was made."""
        saved = self.provenance or {}
        commit, _, state = str(saved.get("git_commit") or "").partition(" ")  # "<sha> (modified)"
        made = [f"on {saved['date']}" if saved.get("date") else "",
                f"by precisionlab {saved['precisionlab']}" if saved.get("precisionlab") else "",
                f"(commit {commit[:12]}{' ' + state if state else ''})" if commit else ""]
        text = f"Included from {self.path}"
        when = " ".join(part for part in made if part)
        if when:
            text += f", saved {when}"
        if saved.get("command"):
            text += f"; made with `{saved['command']}`"
        return text + "."


def read_saved(path: str | os.PathLike[str]) -> SavedLab:
    """A <name>.json lab result file; ValueError "PATH: <problem>" when it is not JSON or not a lab result."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not a lab result: not UTF-8 text") from None
    try:
        data = json_object(text)
        result = LabResult.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    saved = data.get("provenance")
    provenance = {k: saved[k] for k in SAVED_PROVENANCE if k in saved} if isinstance(saved, dict) else None
    return SavedLab(where, result, provenance)


def saved_files(path: str | os.PathLike[str]) -> list[Path]:
    """A file as given; a directory: its *.json files, by name (ValueError when it has none)."""
    where = Path(path)
    if not where.is_dir():
        return [where]
    files = sorted(p for p in where.glob("*.json") if p.is_file())
    if not files:
        raise ValueError(f"{where}: no <name>.json lab result in this directory")
    return files


def read_included(paths: Iterable[str | os.PathLike[str]], running: Iterable[str] = (),
                  replaced: str | os.PathLike[str] | None = None) -> list[SavedLab]:
    """Every saved result the paths name (files, or directories of <name>.json files), in order.

    ValueError when two of them hold the same lab, or one holds a lab in `running` (the labs the
    report also runs): a report has one section per lab name; or when a file lies inside `replaced`,
    the folder the new report replaces whole (the file would be deleted)."""
    running = set(running)
    saved: list[SavedLab] = []
    for path in paths:
        for file in saved_files(path):
            item = read_saved(file)
            name = item.result.name
            earlier = next((s for s in saved if s.result.name == name), None)
            if earlier is not None and earlier.path.resolve() == file.resolve():
                raise ValueError(f"{file} is included twice (also as {earlier.path})")
            if earlier is not None:
                raise ValueError(f"{earlier.path} and {file} both hold the lab {name!r}; a report has one section "
                                 "per lab: include one of them")
            if name in running:
                raise ValueError(f"{file} holds the lab {name!r}, which this run also runs; leave that lab out "
                                 "with --only or include a result of another name")
            if replaced is not None and file.resolve().is_relative_to(Path(replaced).resolve()):
                raise ValueError(f"{file} is inside --out {replaced}, which the new report replaces whole (the file "
                                 "would be deleted): write the report to another folder, or move the file out first")
            saved.append(item)
    return saved
