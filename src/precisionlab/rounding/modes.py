"""Rounding modes and the policies for values a format cannot hold."""

from __future__ import annotations

import difflib
from enum import Enum
from functools import lru_cache
from typing import TypeVar

from precisionlab.formats import Overflow


class Rounding(Enum):
    """How a value between two representable neighbours is resolved.

    NEAREST_EVEN  nearest; ties to the even mantissa (IEEE default, PTX .rn).
    NEAREST_AWAY  nearest; ties away from zero (PTX cvt.rna, used for tf32).
    TOWARD_ZERO   truncate the magnitude (PTX .rz). Never rounds a finite value up to
                  infinity: finite values beyond max_finite become ±max_finite (IEEE 754).
    STOCHASTIC    round up with probability equal to the distance from the lower
                  neighbour divided by the gap, so E[round(x)] = x. See `engine`.
    """

    NEAREST_EVEN = "nearest_even"
    NEAREST_AWAY = "nearest_away"
    TOWARD_ZERO = "toward_zero"
    STOCHASTIC = "stochastic"


class NanPolicy(Enum):
    """What a NaN becomes in a format that has no NaN (e2m1, e2m3, e3m2, integers).

    RAISE (default) raises ValueError naming the format; ZERO stores +0
    (ml_dtypes stores a signed zero here; see the README's peer table).
    """

    RAISE = "raise"
    ZERO = "zero"


_E = TypeVar("_E", bound=Enum)

_ALIASES = {"rne": "nearest_even", "nearest": "nearest_even", "rna": "nearest_away", "rtz": "toward_zero",
            "trunc": "toward_zero", "sr": "stochastic", "sat": "saturate", "satfinite": "saturate"}


def parse_enum(kind: type[_E], value: str | _E, what: str) -> _E:
    """Accept an enum member or its value (or a documented alias); name close matches on error."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return _parse_string(kind, value, what)


@lru_cache(maxsize=128)
def _parse_string(kind: type[_E], value: str, what: str) -> _E:
    key = _ALIASES.get(value.strip().lower(), value.strip().lower())
    for member in kind:
        if member.value == key:
            return member
    choices = [str(m.value) for m in kind]
    close = difflib.get_close_matches(key, choices, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown {what} {value!r}: choose one of {', '.join(choices)}{hint}")


def parse_rounding(value: str | Rounding) -> Rounding:
    return parse_enum(Rounding, value, "rounding mode")


def parse_overflow(value: str | Overflow) -> Overflow:
    return parse_enum(Overflow, value, "overflow policy")


def parse_nan(value: str | NanPolicy) -> NanPolicy:
    return parse_enum(NanPolicy, value, "NaN policy")
