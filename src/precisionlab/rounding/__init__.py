"""The exact rounding engine: round_to, encode, decode, ulp (numpy arrays and torch tensors)."""

from precisionlab.rounding.api import decode, encode, neighbours, round_to, ulp
from precisionlab.rounding.modes import NanPolicy, Rounding

__all__ = ["NanPolicy", "Rounding", "decode", "encode", "neighbours", "round_to", "ulp"]
