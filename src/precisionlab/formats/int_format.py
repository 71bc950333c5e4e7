"""Two's-complement and unsigned integer formats.

A b-bit signed integer holds -2^(b-1) .. 2^(b-1)-1. Symmetric quantization uses only
±(2^(b-1) - 1) (int8: ±127, int4: ±7, int2: ±1) so that the grid is symmetric about an
exact zero; `symmetric_max` gives that bound. Unsigned b-bit integers hold 0 .. 2^b - 1.
Integers have no inf and no NaN: out-of-range values saturate.
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionlab.formats.finite import NoSpecialValues


@dataclass(frozen=True)
class IntFormat(NoSpecialValues):
    name: str
    bits: int
    signed: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 32:
            raise ValueError(f"impossible integer format {self.name!r}: bits must be 1..32")
        if self.signed and self.bits < 2:
            raise ValueError(f"impossible integer format {self.name!r}: a signed integer needs 2 bits")


    @property
    def min_value(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max_value(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def symmetric_max(self) -> int:
        """Largest magnitude used by symmetric quantization: 2^(b-1) - 1 (signed)."""
        return self.max_value

    @property
    def max_finite(self) -> float:
        return float(self.max_value)




    @property
    def eps(self) -> float:
        """The step of the integer grid."""
        return 1.0

    @property
    def code_count(self) -> int:
        return 1 << self.bits

    def __str__(self) -> str:
        return self.name
