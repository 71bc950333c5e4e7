"""Small arrays in two numpy calls: a binary search over where the rounding steps, then a gather.

round(x) is constant between consecutive breakpoint candidates (`breakpoints`), for each sign.
For one (format, mode, policies, input dtype) the steps are tabulated once, from the exact engine
itself, and round(x) = values[searchsorted(starts, key(x), side='right')].

Key space. The key of x is its bit pattern read as a signed integer (int32 for float32, int64
for float64). Read that way the floats sort as

    -0, ... negative magnitudes ascending ..., -inf, -NaNs  |  +0, ... ascending ..., +inf, +NaNs

so each sign is a monotone run of keys, -0 and +0 are different keys, and so are the NaNs of
either sign. The pieces start at the key of each candidate c (c alone) and at key(c) + 1 (the
open interval up to the next candidate of that sign, or the NaNs after ±inf); the engine's
result at each start is that piece's value, and a piece whose value equals its predecessor's bit
for bit is merged into it. Every sign of zero and of NaN comes out as the engine gives it.

Float space. A format without NaN under nan='raise' must refuse NaN. There the search runs on
the float values themselves, where every NaN sorts after +inf: a last start NaN, which only NaN
reaches, has no value, so `take` refuses and the engine's ValueError is raised. Float order
sees -0.0 == +0.0, so where the engine's result has x's sign (signed formats) it is restored by
copysign(result, x); integers give +0 for both.

Either table is checked when built: it must reproduce the engine on the first and the last key
of every piece (and -0.0 and NaN), or no table is made.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from precisionlab.rounding.breakpoints import distinct, exact_in, reachable

Reference = Callable[[np.ndarray], np.ndarray]
"""The exact engine on a 1-D array of the input dtype (its values in the output dtype)."""

_KEYS: dict[np.dtype, np.dtype] = {np.dtype(np.float32): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.int64)}


class SearchTable:
    """round(x) for an array x (at least one dimension) of the input dtype."""

    def __init__(self, starts: np.ndarray, values: np.ndarray, key: np.dtype | None, copysign: bool,
                 nan_message: str) -> None:
        self.starts = starts
        self.values = values
        self.key = key
        """The integer dtype x is viewed as (key space), or None (float space)."""
        self.copysign = copysign
        self.nan_message = nan_message

    def __call__(self, x: np.ndarray) -> np.ndarray:
        index = self.starts.searchsorted(x if self.key is None else x.view(self.key), side="right")
        try:
            out = self.values[index]
        except IndexError:  # only NaN indexes past the end (float space)
            raise ValueError(self.nan_message) from None
        return np.copysign(out, x) if self.copysign else out


def build(candidates: np.ndarray, dtype: type[np.floating], reference: Reference,
          nan_message: str) -> SearchTable | None:
    """The search table of `reference` over inputs of dtype, or None when the candidates are not
    all exact in dtype or the table does not reproduce the engine."""
    points = exact_in(reachable(candidates, dtype), dtype)
    if points is None:
        return None
    try:
        reference(np.array([np.nan], dtype=dtype))
    except ValueError:
        return _float_space(points, dtype, reference, nan_message)
    return _key_space(points, dtype, reference, nan_message)


def _key_space(points: np.ndarray, dtype: type[np.floating], reference: Reference,
               nan_message: str) -> SearchTable | None:
    key = _KEYS[np.dtype(dtype)]
    at = np.append(points, np.array([-0.0, 0.0], dtype=dtype)).view(key)  # both zeros start a piece
    starts = distinct(np.concatenate([at, at + 1]))
    values = reference(starts.view(dtype))
    kept_starts, kept_values = _merge(starts, values)
    table = SearchTable(kept_starts[1:], kept_values, key, False, nan_message)
    ends = np.append(starts[1:] - 1, np.iinfo(key).max)
    probes = np.concatenate([starts, ends]).view(dtype)
    return _checked(table, probes, reference(probes))


def _float_space(points: np.ndarray, dtype: type[np.floating], reference: Reference,
                 nan_message: str) -> SearchTable | None:
    inf = dtype(np.inf)
    starts = np.empty(2 * points.size - 1, dtype=dtype)
    starts[0::2] = points
    starts[1::2] = np.nextafter(points[:-1], inf)
    values = reference(starts)
    kept_starts, kept_values = _merge(starts, values)
    thresholds = np.append(kept_starts[1:], dtype(np.nan))
    ends = np.append(np.nextafter(starts[1:], -inf), inf)
    probes = np.concatenate([starts, ends, np.array([-0.0], dtype=dtype)])
    expected = reference(probes)
    for copysign in (False, True):
        table = _checked(SearchTable(thresholds, kept_values, None, copysign, nan_message), probes, expected)
        if table is not None:
            return table
    return None


def _merge(starts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop each piece whose value equals its predecessor's, bit for bit."""
    change = np.ones(values.size, dtype=bool)
    bits = _bits(values)
    change[1:] = bits[1:] != bits[:-1]
    return starts[change], values[change]


def _checked(table: SearchTable, probes: np.ndarray, expected: np.ndarray) -> SearchTable | None:
    if not np.array_equal(_bits(table(probes)), _bits(expected)):
        return None
    table.starts.flags.writeable = False
    table.values.flags.writeable = False
    return table


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint64 if values.dtype.itemsize == 8 else np.uint32)
