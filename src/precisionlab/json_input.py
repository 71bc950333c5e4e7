"""A JSON object read from user text, with a one-line error (imports nothing from precisionlab)."""

from __future__ import annotations

import json
from typing import Any


def json_object(text: str) -> dict[str, Any]:
    """json.loads(text) when it is an object; otherwise ValueError "invalid JSON (<why> at line L column C)"
    or "expected a JSON object, got <type>", for the caller to prefix with where the text came from."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
