"""An append-only results log (JSON Lines) that a rerun resumes from.

Line 1 is a header (a JSON object naming what the records belong to); every further line is one
record. Each record is appended with a single write of the whole line and fsync'd before the next,
so after a crash the file holds whole records and at most one torn last line (no newline yet). On
opening, a header that differs from this run's is refused before anything in the file is touched
(results of another checkpoint or other options are never mixed in), then a torn last line is cut
off (its record is recomputed). One writer at a time: the log is locked while open (where the
platform has flock).

The log is shared by `audit`, `search` and `ladder`; each names itself (`noun`: "another {noun}") and its
records, and may word a header difference in its own options (`describe`). Refusals are typed
(precisionlab.errors: ResultsLogBusy, ResultsLogMismatch, ResultsLogCorrupt, all ValueErrors; a failed
write is ResultsLogError, an OSError), so callers tell them apart by type.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from precisionlab.errors import ResultsLogBusy, ResultsLogCorrupt, ResultsLogError, ResultsLogMismatch

Describe = Callable[[dict[str, Any], dict[str, Any]], str]
"""(the header found, this run's header) -> the first difference, in the caller's words."""


def header_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The first setting of this run's header `new` that the log's header `old` has otherwise, in words (the
    description of a mismatch unless the caller gives its own)."""
    if old.get("kind") != new.get("kind") or old.get("version") != new.get("version"):
        return (f"records of kind {old.get('kind')!r}, version {old.get('version')!r}; this run writes "
                f"{new.get('kind')!r}, version {new.get('version')!r}")
    for key in new:
        if old.get(key) != new[key]:
            return f"its {key} is {old.get(key)!r}, this run's is {new[key]!r}"
    extra = next((k for k in old if k not in new), "?")
    return f"it has a setting {extra!r} this run does not"


class ResultsLog:
    """The log at `path` for the run described by `header`, owned by a `noun` ("audit", "search", "ladder run")
    whose `records` ("results", "sensitivities", "steps") it holds; `describe` words a header difference
    (default: header_difference)."""

    def __init__(self, path: Path, header: dict[str, Any], *, noun: str, records: str = "results",
                 describe: Describe = header_difference) -> None:
        self.path = Path(path)
        self.header = json.loads(json.dumps(header, allow_nan=False))
        self.noun = noun
        self.records = records
        self.describe = describe
        self._handle: IO[bytes] | None = None

    def open(self) -> list[dict[str, Any]]:
        """Open (or create) the log for appending; the records already in it, in order.

        ResultsLogBusy (a ValueError): another process holds the log. ResultsLogMismatch: the header belongs to
        another run (the file is left as it is). ResultsLogCorrupt: a line other than the last is not a JSON
        object. OSError: the directory cannot be written.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_dir():
            raise IsADirectoryError(21, f"cannot write {self.path}: it is a directory")
        handle = open(self.path, "a+b")  # noqa: SIM115 (held open across calls; closed in close())
        try:
            self._lock(handle)
            handle.seek(0)
            data = handle.read()
            end = data.rfind(b"\n") + 1  # past the last complete line; 0 if there is none
            lines = data[:end].splitlines()
            if lines and (found := self._parse(1, lines[0])) != self.header:
                raise ResultsLogMismatch(self.path, self.noun, self.records, self.describe(found, self.header))
            parsed = [self._parse(number, line) for number, line in enumerate(lines, start=1)]
            if end < len(data):
                handle.truncate(end)  # a torn last line: its record is recomputed
                _sync(handle)
            if not parsed:
                handle.write(_line(self.header))
                _sync(handle)
                _sync_directory(self.path.parent)
        except BaseException:
            handle.close()
            raise
        self._handle = handle
        return parsed[1:]

    def _parse(self, number: int, line: bytes) -> dict[str, Any]:
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            obj = None
        if not isinstance(obj, dict):
            raise ResultsLogCorrupt(self.path, self.noun, number)
        return obj

    def _lock(self, handle: IO[bytes]) -> None:
        try:
            import fcntl
        except ImportError:  # not on this platform: one writer is the user's job
            return
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResultsLogBusy(self.path, self.noun) from None

    def append(self, line: str) -> None:
        """Append one record (a JSON object on one line, no newline) and fsync it; a failure is a
        ResultsLogError naming the log."""
        if self._handle is None:
            raise ValueError(f"{self.path} is not open for appending")
        try:
            self._handle.write(line.encode("utf-8") + b"\n")
            _sync(self._handle)
        except OSError as exc:
            raise ResultsLogError(exc.errno, f"cannot append to {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def _sync(handle: IO[bytes]) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _sync_directory(directory: Path) -> None:
    """fsync the directory so a newly created log survives a crash (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["Describe", "ResultsLog", "ResultsLogBusy", "ResultsLogCorrupt", "ResultsLogError", "ResultsLogMismatch",
           "header_difference"]
