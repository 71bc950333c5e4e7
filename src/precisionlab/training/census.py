"""Underflow census: what a low-precision format does to a tensor of gradients.

Every magnitude |g| is rounded once, exactly, with `precisionlab.round_to` (nearest-even,
the format's own overflow policy) and sorted by what it became:

    zero       |g| > 0 and round(|g|) == 0        (flushed: |g| <= min_subnormal / 2)
    subnormal  0 < round(|g|) < min_normal        (kept, but with fewer significant bits)
    normal     min_normal <= round(|g|) <= max_finite
    overflow   round(|g|) is inf or NaN           (|g| >= max_finite + ulp(max_finite) / 2
                                                   for IEEE formats such as fp16: 65520)

Inputs that are exactly zero are counted apart (`input_zero`): they were zero before any
rounding. Fractions are over the total weight (every value, zeros included), so the five
fractions of one format sum to one.

A sample is values with weights: a plain array has weight 1 per value, a magnitude
histogram has its counts as weights. Scaling by a power of two S = 2^k is exact (it only
moves the exponent), which is why loss scales are powers of two.
"""

from __future__ import annotations

import csv
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precisionlab.errors import InputTypeError
from precisionlab.formats import FloatFormat, get_format
from precisionlab.rounding import round_to

CENSUS_FORMATS = ("fp16", "bf16", "e5m2")
"""The 16-bit training formats and the fp8 gradient format."""

CLASSES = ("input_zero", "zero", "subnormal", "normal", "overflow")


@dataclass(frozen=True)
class GradientSample:
    """Gradient magnitudes (float64, >= 0, finite) and their weights (counts, > 0 in total)."""

    magnitudes: np.ndarray
    weights: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        if self.magnitudes.shape != self.weights.shape or self.magnitudes.ndim != 1:
            raise ValueError("magnitudes and weights must be 1-D arrays of the same length")
        if self.magnitudes.size == 0:
            raise ValueError(f"{self.source or 'gradient sample'} holds no values")
        if not np.all(np.isfinite(self.magnitudes)) or np.any(self.magnitudes < 0):
            raise ValueError(f"{self.source or 'gradient sample'}: magnitudes must be finite and >= 0")
        if not np.all(np.isfinite(self.weights)) or np.any(self.weights < 0) or self.weights.sum() <= 0:
            raise ValueError(f"{self.source or 'gradient sample'}: counts must be finite, >= 0, with a positive total")

    @property
    def total(self) -> float:
        return float(self.weights.sum())

    @property
    def max_magnitude(self) -> float:
        """Largest magnitude that carries a positive weight (0 when every value is zero)."""
        return float(self.magnitudes[self.weights > 0].max())

    def scaled(self, exponent: int) -> GradientSample:
        """The sample multiplied by 2^exponent (exact in float64 for these magnitudes)."""
        return GradientSample(np.ldexp(self.magnitudes, exponent), self.weights, self.source)


def from_values(values: np.ndarray, source: str = "array") -> GradientSample:
    """A sample of raw gradient values (any shape, any float dtype): weight 1 each."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f":
        raise InputTypeError(f"{source}: gradients must be floating point, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{source} holds no values")
    flat = np.abs(arr.astype(np.float64).reshape(-1))
    bad = int(np.count_nonzero(~np.isfinite(flat)))
    if bad:
        raise ValueError(f"{source}: gradients must be finite, found {bad} inf/NaN values")
    return GradientSample(flat, np.ones_like(flat), source)


def from_histogram(magnitudes: np.ndarray, counts: np.ndarray, source: str = "histogram") -> GradientSample:
    """A sample given as a magnitude histogram: each magnitude stands for `count` values."""
    return GradientSample(np.asarray(magnitudes, dtype=np.float64), np.asarray(counts, dtype=np.float64), source)


def load_gradients(path: str | Path) -> GradientSample:
    """Read a .npy array of gradient values, or a .csv of `magnitude,count` rows.

    The CSV may start with one header line; blank lines and lines starting with '#' are skipped.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".npy":
        try:
            values = np.load(file, allow_pickle=False)
        except (ValueError, EOFError, pickle.UnpicklingError) as exc:
            raise ValueError(f"{file}: not a readable .npy array of numbers") from exc
        return from_values(values, str(file))
    if suffix == ".csv":
        return _load_histogram_csv(file)
    raise ValueError(f"{file}: expected a .npy array of gradients or a .csv of magnitude,count rows")


def _load_histogram_csv(file: Path) -> GradientSample:
    magnitudes: list[float] = []
    counts: list[float] = []
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            rows = [r for r in csv.reader(handle) if r and not r[0].lstrip().startswith("#")]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not a text .csv of magnitude,count rows (byte {exc.start} is not UTF-8)") from None
    for index, row in enumerate(rows):
        if len(row) != 2:
            raise ValueError(f"{file}: row {index + 1} has {len(row)} columns; expected magnitude,count")
        try:
            magnitudes.append(float(row[0]))
            counts.append(float(row[1]))
        except ValueError as exc:
            if index == 0:
                continue  # a header line
            raise ValueError(f"{file}: row {index + 1} is not two numbers: {','.join(row)}") from exc
    if not magnitudes:
        raise ValueError(f"{file} holds no magnitude,count rows")
    return from_histogram(np.array(magnitudes), np.array(counts), str(file))


@dataclass(frozen=True)
class CensusRow:
    """Fractions of the total weight in each class, for one format (and one scale)."""

    format: str
    scale_exponent: int
    input_zero: float
    zero: float
    subnormal: float
    normal: float
    overflow: float

    @property
    def scale(self) -> float:
        """2^scale_exponent (inf when that is past float64's range)."""
        return math.ldexp(1.0, self.scale_exponent) if self.scale_exponent < 1024 else math.inf

    def fraction(self, name: str) -> float:
        if name not in CLASSES:
            raise ValueError(f"unknown census class {name!r}; classes: {', '.join(CLASSES)}")
        return float(getattr(self, name))


def classify(magnitudes: np.ndarray, fmt: str | FloatFormat) -> np.ndarray:
    """Class index (into CLASSES) of each magnitude after one rounding to fmt."""
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"the census is for float formats, not {target.name}")
    mags = np.asarray(magnitudes, dtype=np.float64)
    rounded = np.asarray(round_to(mags, target), dtype=np.float64)
    kind = np.full(mags.shape, CLASSES.index("normal"), dtype=np.int8)
    kind[rounded < target.min_normal] = CLASSES.index("subnormal")
    kind[(rounded == 0) & (mags > 0)] = CLASSES.index("zero")
    kind[mags == 0] = CLASSES.index("input_zero")
    kind[~np.isfinite(rounded)] = CLASSES.index("overflow")
    return kind


def census(sample: GradientSample, fmt: str | FloatFormat, scale_exponent: int = 0) -> CensusRow:
    """The census of sample * 2^scale_exponent in fmt."""
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"the census is for float formats, not {target.name}")
    scaled = sample.scaled(scale_exponent) if scale_exponent else sample
    kind = classify(scaled.magnitudes, target)
    totals = np.bincount(kind, weights=scaled.weights, minlength=len(CLASSES))
    fractions = totals / sample.total
    return CensusRow(target.name, scale_exponent, *(float(f) for f in fractions))


def max_power_of_two_scale(max_magnitude: float, fmt: str | FloatFormat = "fp16") -> int:
    """Largest k such that max_magnitude * 2^k still rounds to a finite value of fmt.

    Starts from k = floor(log2(max_finite / max_magnitude)) and checks with round_to, so
    the values just above max_finite that round down to it (fp16: below 65520) count as finite.
    """
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"loss scales are sized for float formats, not {target.name}")
    if not (math.isfinite(max_magnitude) and max_magnitude > 0):
        raise ValueError(f"the largest gradient magnitude must be finite and > 0, got {max_magnitude}")

    def finite(k: int) -> bool:
        return math.isfinite(float(round_to(math.ldexp(max_magnitude, k), target)))

    k = math.floor(math.log2(target.max_finite) - math.log2(max_magnitude))
    while not finite(k):
        k -= 1
    while finite(k + 1):
        k += 1
    return k
