"""Exceptions that mark bad input (imports nothing from precisionlab: every layer may use it).

The command line turns ValueError and OSError into one line `error: ...` and exit code 2, and
anything else into an internal-error report (exit 1): a TypeError or KeyError escaping a command
is a bug. Data of the wrong kind read from a user's file (an integer .npy where gradients must
be floats) is a type problem for a Python caller and bad input for the command line, so it is
raised as InputTypeError, which is both.
"""

from __future__ import annotations


class InputTypeError(TypeError, ValueError):
    """User data of the wrong kind: a TypeError for Python callers, a ValueError (exit 2) for the CLI."""


__all__ = ["InputTypeError"]
