"""The special-value flags shared by integer and codebook formats: every code is a number."""

from __future__ import annotations


class NoSpecialValues:
    """Mixin for formats without inf, NaN or a negative zero (integers, codebooks such as nf4)."""

    is_float = False
    has_inf = False
    has_nan = False
    has_negative_zero = False
