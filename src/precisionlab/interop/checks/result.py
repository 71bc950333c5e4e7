"""The record every convention check returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CheckResult:
    """One convention check on one tensor: flagged or not, why (message), and the numbers behind it."""

    name: str
    flagged: bool
    evidence: dict[str, float | str] = field(default_factory=dict)
    message: str = ""
