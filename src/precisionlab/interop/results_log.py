"""An append-only results log (JSON Lines) that a rerun resumes from.

Line 1 is a header (a JSON object naming what the records belong to); every further line is one
record. Each record is appended with a single write of the whole line and fsync'd before the next,
so after a crash the file holds whole records and at most one torn last line (no newline yet). On
opening, a torn last line is cut off (its record is recomputed) and a header that differs from
this run's is an error: results of another checkpoint or other options are never mixed in.
One writer at a time: the log is locked while open (where the platform has flock).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any


class ResultsLogError(OSError):
    """Writing the results log failed (the message names the log and the reason)."""


class ResultsLog:
    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.header = json.loads(json.dumps(header, allow_nan=False))
        self._handle: IO[bytes] | None = None

    def open(self) -> list[dict[str, Any]]:
        """Open (or create) the log for appending; the records already in it, in order.

        ValueError: the header belongs to another run, a line other than the last is not a JSON
        object, or another process holds the log. OSError: the directory cannot be written.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_dir():
            raise IsADirectoryError(21, f"cannot write {self.path}: it is a directory")
        handle = open(self.path, "a+b")  # noqa: SIM115 (held open across calls; closed in close())
        try:
            _lock(handle, self.path)
            handle.seek(0)
            data = handle.read()
            end = data.rfind(b"\n") + 1  # past the last complete line; 0 if there is none
            if end < len(data):
                handle.truncate(end)  # a torn last line: its record is recomputed
                _sync(handle)
            lines = data[:end].splitlines()
            if not lines:
                handle.write(_line(self.header))
                _sync(handle)
                _sync_directory(self.path.parent)
                self._handle = handle
                return []
            parsed = [_parse(self.path, number, line) for number, line in enumerate(lines, start=1)]
        except BaseException:
            handle.close()
            raise
        if parsed[0] != self.header:
            handle.close()
            raise ValueError(f"{self.path} holds results of another audit ({_difference(parsed[0], self.header)}); "
                             "give another --out directory, or delete the file to start over")
        self._handle = handle
        return parsed[1:]

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


def read_header(path: Path) -> Any:
    """The parsed first line of an existing log, or None (no file, empty, or a first line still being written)."""
    try:
        with open(path, "rb") as handle:
            line = handle.readline()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def _parse(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        obj = None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: line {number} is not a record (the file was changed by hand?); "
                         "delete the file to start over")
    return obj


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    if old.get("kind") != new.get("kind") or old.get("version") != new.get("version"):
        return f"record version {old.get('version')!r}, this run writes {new.get('version')!r}"
    if old.get("checkpoint") != new.get("checkpoint"):
        return f"it audited {old.get('checkpoint')}"
    if old.get("schemes") != new.get("schemes"):
        return f"it was run with --schemes {','.join(old.get('schemes') or []) or '(none)'}"
    return "the checkpoint's files changed since (size or modification time)"


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


def _lock(handle: IO[bytes], path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # not on this platform: one writer is the user's job
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(f"{path} is being written by another audit; wait for it or use another --out") from None
