"""The shared vocabulary of the statistics: types, defaults and the checks of every input."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Verdict = Literal["pass", "fail", "inconclusive"]
Method = Literal["expanded", "percentile", "bca"]
# Group labels, one per unit (any hashable values: strings, integers, a numpy array).
Groups = Sequence[Hashable] | NDArray[Any]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95


def as_vector(values: ArrayLike, name: str) -> NDArray[np.float64]:
    array = np.asarray(values)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise TypeError(f"{name} must be numbers, got {array.dtype}")
    array = array.astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per unit), got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name} has a non-finite value at unit {bad} ({array[bad]})")
    return array


def same_length(**arrays: NDArray[np.float64]) -> int:
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) != 1:
        listed = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise ValueError(f"paired inputs must have one value per unit each, got lengths {listed}")
    n = next(iter(lengths.values()))
    if n < 2:
        raise ValueError(f"need at least 2 units for an interval, got {n}")
    return n


def check_options(n_resamples: int, confidence: float, method: str) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    if method not in ("expanded", "percentile", "bca"):
        raise ValueError(f"method must be 'expanded', 'percentile' or 'bca', got {method!r}")


def is_binary(*arrays: NDArray[np.float64]) -> bool:
    return all(bool(np.all((array == 0.0) | (array == 1.0))) for array in arrays)


def group_index(groups: Groups | None, n: int) -> NDArray[np.intp] | None:
    """Map each unit to the index of its group (in order of first appearance), or None."""
    if groups is None:
        return None
    labels = list(groups)
    if len(labels) != n:
        raise ValueError(f"groups must name one group per unit: got {len(labels)} labels for {n} units")
    first: dict[Hashable, int] = {}
    index = np.fromiter((first.setdefault(label, len(first)) for label in labels), dtype=np.intp, count=n)
    if len(first) < 2:
        raise ValueError(f"need at least 2 groups for an interval, got {len(first)}")
    return index


def group_sums(values: NDArray[np.float64], index: NDArray[np.intp] | None) -> NDArray[np.float64]:
    """Per-group column sums of ``values`` (units x k); the units themselves without groups."""
    if index is None:
        return values
    sums = np.zeros((int(index.max()) + 1, values.shape[1]))
    np.add.at(sums, index, values)
    return sums


def check_counts(b: int, c: int, n: int) -> None:
    for name, value in (("b", b), ("c", c), ("n", n)):
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"{name} must be a whole count, got {value!r}")
    if n < 1 or b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need n >= 1 and 0 <= b, c with b + c <= n, got b={b}, c={c}, n={n}")



def check_threshold(max_drop: float) -> float:
    value = float(max_drop)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"max_drop must be a finite number >= 0, got {max_drop!r}")
    return value
