"""Exceptions that mark bad input or a refused file (imports nothing from precisionlab: every layer may use it).

The command line turns ValueError and OSError into one line `error: ...` and exit code 2, and
anything else into an internal-error report (exit 1): a TypeError or KeyError escaping a command
is a bug. Data of the wrong kind read from a user's file (an integer .npy where gradients must
be floats) is a type problem for a Python caller and bad input for the command line, so it is
raised as InputTypeError, which is both.

The results log (interop.results_log, the append-only file that `audit`, `search` and `ladder` resume from)
refuses a file with one of the ResultsLog* errors below. Each names the log's owner in the caller's own words
(`noun`: "audit", "search", "ladder run"), so a caller tells them apart by type, never by the message's text.
"""

from __future__ import annotations

import os
from pathlib import Path


class InputTypeError(TypeError, ValueError):
    """User data of the wrong kind: a TypeError for Python callers, a ValueError (exit 2) for the CLI."""


class ResultsLogRefused(ValueError):
    """A results log that this run will not append to (the base of the three cases below)."""

    def __init__(self, path: str | os.PathLike[str], noun: str, message: str) -> None:
        super().__init__(message)
        self.path = Path(path)
        self.noun = noun
        """The run that owns the log, as its caller names it ("audit", "search", "ladder run")."""


class ResultsLogBusy(ResultsLogRefused):
    """Another process holds the log's lock: another run of the same kind is writing it right now."""

    def __init__(self, path: str | os.PathLike[str], noun: str) -> None:
        super().__init__(path, noun, f"{path} is being written by another {noun}; wait for it or use another --out")


class ResultsLogMismatch(ResultsLogRefused):
    """The log's header is another run's (another checkpoint, model or options): its records are not mixed in."""

    def __init__(self, path: str | os.PathLike[str], noun: str, records: str, difference: str) -> None:
        super().__init__(path, noun, f"{path} holds the {records} of another {noun} ({difference}); give another "
                                     "--out directory, or delete the file to start over")
        self.difference = difference


class ResultsLogCorrupt(ResultsLogRefused):
    """A line other than the last is not a record (the file was changed by hand)."""

    def __init__(self, path: str | os.PathLike[str], noun: str, line: int) -> None:
        super().__init__(path, noun, f"{path}: line {line} is not a record (the file was changed by hand?); "
                                     "delete the file to start over")
        self.line = line


class ResultsLogError(OSError):
    """Writing the results log failed (the message names the log and the reason)."""


__all__ = ["InputTypeError", "ResultsLogBusy", "ResultsLogCorrupt", "ResultsLogError", "ResultsLogMismatch",
           "ResultsLogRefused"]
