"""Codebook (lookup-table) formats: a code is an index into a fixed table of values.

NF4 (NormalFloat4, QLoRA, Dettmers et al. 2023) puts its 16 values at quantiles of the
standard normal distribution, so that weights that are normally distributed and scaled
by their block's absmax use every code about equally often. The table is bitsandbytes'
float32 table bit for bit: its constants (`get_4bit_type("nf4")` in bitsandbytes/functional.py)
come from `create_normal_map(offset=0.9677083, use_extra_value=True)`, and this module repeats
that computation with its roundings:

    p = linspace32(offset, 1/2, 9)[:-1],  q = linspace32(offset, 1/2, 8)[:-1]     (float32 points)
    positive = fp32(Phi^-1(p)) (8 values),  negative = fp32(-Phi^-1(q)) (7 values)  (float64 quantiles)
    values   = sort(positive + [0] + negative) / max(values)                          (float32 division)

where linspace32 is torch.linspace in float32 (step = fp32((end - start) / (n - 1)); the first
n // 2 points start + i * step, the others end - (n - 1 - i) * step, each operation rounded to
float32). Computing the same quantiles exactly and rounding once gives a table up to 6 float32
ulps away from bitsandbytes' (its fp32 linspace moves the quantile points), so NF4 codes would
decode to other values than bitsandbytes' kernels. The asymmetry (8 positive, 7 negative, one
exact zero) spends all 16 codes while keeping zero exact.

Encoding, two rules over the same table: `encode` (the scheme `nf4`) gives the nearest value to the
exact ratio x / absmax, comparing against the exact midpoints; `encode_scaled_fp32` (the scheme
option `bnb`, `nf4:g64:bnb`) repeats bitsandbytes' `quantize_4bit` arithmetic, float32 product with
the float32 reciprocal against float32 midpoints, code for code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist

import numpy as np

from precisionlab.formats.finite import NoSpecialValues

NF4_OFFSET = 0.9677083
"""bitsandbytes' quantile offset: the midpoint between the 1 - 1/(2*15) and 1 - 1/(2*16) quantiles."""


def linspace32(start: float, stop: float, count: int) -> list[np.float32]:
    """torch.linspace(start, stop, count) in float32, as torch's CPU kernel computes it (see the docstring)."""
    first, last = np.float32(start), np.float32(stop)
    step = np.float32((last - first) / np.float32(count - 1))
    return [first + step * np.float32(i) if i < count // 2 else last - step * np.float32(count - 1 - i)
            for i in range(count)]


def normal_float_values(offset: float = NF4_OFFSET) -> tuple[float, ...]:
    """The 16 NF4 values (float32, ascending), computed as bitsandbytes computes its table."""
    phi_inv = NormalDist().inv_cdf
    positive = [np.float32(phi_inv(float(p))) for p in linspace32(offset, 0.5, 9)[:-1]]
    negative = [np.float32(-phi_inv(float(p))) for p in linspace32(offset, 0.5, 8)[:-1]]
    values = np.sort(np.array([*positive, 0.0, *negative], dtype=np.float32))
    values = values / values.max()  # float32 / float32
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class CodebookFormat(NoSpecialValues):
    """A format whose code k stands for values[k] (ascending). Quantization picks the nearest value."""

    name: str
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) < 2 or (len(self.values) & (len(self.values) - 1)):
            raise ValueError(f"codebook {self.name!r} needs a power-of-two number of values, got {len(self.values)}")
        if list(self.values) != sorted(self.values):
            raise ValueError(f"codebook {self.name!r} values must be ascending")

    @property
    def bits(self) -> int:
        return (len(self.values) - 1).bit_length()


    @property
    def max_finite(self) -> float:
        return max(abs(v) for v in self.values)



    @property
    def code_count(self) -> int:
        return len(self.values)

    @cached_property
    def table(self) -> np.ndarray:
        """The values as a float32 array indexed by code."""
        return np.asarray(self.values, dtype=np.float32)

    @cached_property
    def midpoints(self) -> np.ndarray:
        """Decision boundaries between neighbouring values, exact in float64 (the half-sum of two
        float32 values needs up to 25 significant bits: rounded to float32 it misplaces inputs
        between it and the true midpoint, float32 inputs included)."""
        t = self.table.astype(np.float64)
        return (t[1:] + t[:-1]) / 2

    def encode(self, v: np.ndarray) -> np.ndarray:
        """Code of the nearest value to each element of v (float32 or float64, compared exactly in
        float64); a tie goes to the smaller value."""
        return np.searchsorted(self.midpoints, np.asarray(v, dtype=np.float64), side="left").astype(np.uint8)

    @cached_property
    def midpoints32(self) -> np.ndarray:
        """bitsandbytes' decision boundaries: (table[k] + table[k + 1]) / 2 in float32, the sum rounded to float32
        (`_get_4bit_quantize_bounds` in bitsandbytes/backends/default/ops.py)."""
        t = self.table
        return np.asarray((t[1:] + t[:-1]) / np.float32(2), dtype=np.float32)

    def encode_scaled_fp32(self, x: np.ndarray, absmax: np.ndarray) -> np.ndarray:
        """bitsandbytes' quantize_4bit arithmetic (the `nf4:...:bnb` rule): x rounded to float32, multiplied by the
        float32 reciprocal of its block's absmax (floored at float32(1e-38)), clamped to [-1, 1] and bucketed
        against `midpoints32` (torch.bucketize: a value on a boundary takes the lower code).

        The product rounds twice (the reciprocal, then the product) and the boundaries are float32 half-sums,
        so codes can differ from `encode`'s (the exact ratio against exact midpoints) for inputs within a few
        float32 ulps of a boundary."""
        x32 = np.asarray(x, dtype=np.float32)
        scale = np.maximum(np.asarray(absmax, dtype=np.float32), np.float32(1e-38))
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = np.clip(x32 * (np.float32(1) / scale), np.float32(-1), np.float32(1))
        return np.searchsorted(self.midpoints32, scaled, side="left").astype(np.uint8)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return self.table[codes]

    def __str__(self) -> str:
        return self.name


NF4 = CodebookFormat("nf4", normal_float_values())

CODEBOOKS: dict[str, CodebookFormat] = {"nf4": NF4}


def get_codebook(name: str) -> CodebookFormat:
    key = name.strip().lower()
    if key not in CODEBOOKS:
        raise ValueError(f"unknown codebook format {name!r}; codebooks: {', '.join(CODEBOOKS)}")
    return CODEBOOKS[key]
