"""Rounding modes and the policies for values a format cannot hold."""

from __future__ import annotations

import difflib
from enum import Enum
from functools import lru_cache
from typing import TypeVar

from precisionlab.formats import Overflow


class Rounding(Enum):
    """How a value between two representable neighbours is resolved.

    NEAREST_EVEN     nearest; ties to the even code (IEEE default, PTX .rn, P3109 NearestTiesToEven).
    NEAREST_AWAY     nearest; ties away from zero (PTX cvt.rna, used for tf32).
    TOWARD_ZERO      truncate the magnitude (PTX .rz). Never rounds a finite value up to
                     infinity: finite values beyond max_finite become ±max_finite (IEEE 754).
    TOWARD_POSITIVE  the smallest member >= x (PTX .rp, IEEE roundTowardPositive); a finite
                     negative value never becomes -inf: below -max_finite it is -max_finite.
    TOWARD_NEGATIVE  the largest member <= x (PTX .rm, IEEE roundTowardNegative); mirrored.
    TO_ODD           x itself when it is a member, else whichever neighbour has the odd code
                     (P3109 ToOdd). Rounding to odd at p + 2 or more bits and then to nearest
                     at p bits equals one rounding to nearest at p bits (Boldo and Melquiond).
    STOCHASTIC       round up with probability equal to the distance from the lower
                     neighbour divided by the gap, so E[round(x)] = x. See `engine`.

    Neighbours are taken on the format's grid with its exponent unbounded above; a result past
    ±max_finite is an overflow and the overflow policy decides it (P3109's Saturate step).
    """

    NEAREST_EVEN = "nearest_even"
    NEAREST_AWAY = "nearest_away"
    TOWARD_ZERO = "toward_zero"
    TOWARD_POSITIVE = "toward_positive"
    TOWARD_NEGATIVE = "toward_negative"
    TO_ODD = "to_odd"
    STOCHASTIC = "stochastic"


DIRECTED = (Rounding.TOWARD_POSITIVE, Rounding.TOWARD_NEGATIVE)
"""The modes whose direction depends on the sign: the engine rounds magnitudes, up or down per element."""


class NanPolicy(Enum):
    """What a NaN becomes in a format that has no NaN (e2m1, e2m3, e3m2, integers).

    RAISE (default) raises ValueError naming the format; ZERO stores +0
    (ml_dtypes stores a signed zero here; see the README's peer table).
    """

    RAISE = "raise"
    ZERO = "zero"


def nan_error(format_name: str) -> ValueError:
    """The error for a NaN sent to a format without NaN under NanPolicy.RAISE: it names the format and the way out."""
    return ValueError(f"{format_name} has no NaN and the input holds NaN; pass nan='zero' to store NaN as 0")


_E = TypeVar("_E", bound=Enum)

_ALIASES = {"rne": "nearest_even", "nearest": "nearest_even", "rna": "nearest_away", "rtz": "toward_zero",
            "trunc": "toward_zero", "sr": "stochastic", "sat": "saturate", "satfinite": "saturate",
            "rp": "toward_positive", "ceil": "toward_positive", "rm": "toward_negative", "floor": "toward_negative",
            "rto": "to_odd", "odd": "to_odd",
            # the P3109 draft's names (and IEEE 754's), compared in lower case
            "nearesttiestoeven": "nearest_even", "roundtiestoeven": "nearest_even", "tiestoeven": "nearest_even",
            "nearesttiestoaway": "nearest_away", "roundtiestoaway": "nearest_away", "tiestoaway": "nearest_away",
            "towardzero": "toward_zero", "roundtowardzero": "toward_zero",
            "towardpositive": "toward_positive", "roundtowardpositive": "toward_positive",
            "towardnegative": "toward_negative", "roundtowardnegative": "toward_negative", "toodd": "to_odd",
            "satpropagate": "saturate_propagate", "sat_propagate": "saturate_propagate"}

P3109_DEFAULT_OVERFLOW = ("satnone", "ovfinf", "sat_none", "ovf_inf")
"""P3109's no-saturation option (SatNone; OvfInf in the interim reports): the format's own default
policy, which for a P3109 format is the draft's rule (±inf where the format has inf, else NaN)."""


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


def overflow_policy(value: str | Overflow | None, default: Overflow) -> Overflow:
    """The policy a caller's overflow= asks for: None and P3109's SatNone / OvfInf are `default` (the
    format's own); anything else is parsed (P3109 SatFinite is 'saturate', SatPropagate
    'saturate_propagate')."""
    if value is None or (isinstance(value, str) and value.strip().lower() in P3109_DEFAULT_OVERFLOW):
        return default
    return parse_overflow(value)


def parse_nan(value: str | NanPolicy) -> NanPolicy:
    return parse_enum(NanPolicy, value, "NaN policy")


def spellings(kind: type[Enum]) -> dict[str, list[str]]:
    """Every alias parse_enum accepts for each member of `kind` (lower case; matching ignores case), by
    the member's value: what a command line lists in its help beside the canonical names."""
    return {str(m.value): [alias for alias, value in _ALIASES.items() if value == m.value] for m in kind}
