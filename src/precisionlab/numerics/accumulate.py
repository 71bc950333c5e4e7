"""Emulated accumulation: sums and dot products with every addition rounded once to a format.

    sequential:  s_0 = 0,  s_k = fl(s_{k-1} + t_k)                     (one rounding per addition)
    pairwise:    adjacent pairs added and rounded, level by level (a tree, as a GPU reduction)
    kahan:       y = fl(t_k - c);  u = fl(s + y);  c = fl(fl(u - s) - y);  s = u   (every op rounded)

fl is round-to-nearest-even onto the accumulator format, applied to the exact sum: the
sum is formed in float64 as a round-to-odd value (rounding.exact_sum) and rounded once to the
format (numerics.grid), which is exact for any format of at most 51 significand bits.
fp64 accumulates natively. Where the terms are already members of fp16, fp32 or fp64,
the sum runs as numpy's own sequential `add.accumulate` in that dtype: IEEE addition in
float32/float64, and for float16 a float32 addition rounded to half, which is correctly
rounded because float32 has at least 2p + 2 bits for p = 11.

A lane whose sum overflows follows the format's policy (inf, then NaN once inf - inf
appears in Kahan's compensation), as the hardware would.

Lanes: `fmt` may be a sequence of formats; the result then gains a leading axis, one lane
per format, and the lanes run in one loop (a per-step loop costs about the same for one
lane or a hundred). Terms may have any leading (batch) axes; the summed axis is `axis`.
When there are at most SCALAR_SERIES series (lanes x batch rows), each series runs instead as
a loop over Python floats (grid.scalar_rounder: the same rounding, tens of times cheaper per
step than numpy calls on tiny arrays); the numbers are the same, bit for bit, either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from precisionlab.formats import FloatFormat, Format, IntFormat, get_format
from precisionlab.numerics.grid import Grid, make_grid, round_grid, scalar_rounder
from precisionlab.rounding.exact_sum import accumulator_format, odd_sum

FormatSpec = str | Format
FormatArg = FormatSpec | Sequence[FormatSpec]

INNOCUOUS_PRECISION = 25
"""Widest significand p with 2p + 2 <= 53: one float64 operation then one rounding is exact."""

NATIVE_DTYPES: dict[str, type[np.floating[Any]]] = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}
"""Formats whose numpy dtype adds exactly as the format does (float16 via float32: 24 >= 2·11 + 2)."""

SCALAR_SERIES = 16
"""Most series (lanes x batch rows) run one Python float at a time: a float loop costs ~0.35 µs per step
and series (Kahan ~1 µs), a numpy loop ~13 µs per step (Kahan ~32 µs) for up to dozens of series."""

Rounder = Callable[[float, float], float]


def add_rounded(a: npt.ArrayLike, b: npt.ArrayLike, grid: Grid) -> np.ndarray:
    """fl(a + b) on each lane's format, with exactly one rounding of the exact sum."""
    return round_grid(odd_sum(a, b), grid)


def add_members(a: np.ndarray, b: np.ndarray, grid: Grid) -> np.ndarray:
    """fl(a + b) when a and b are members of each lane's format of p <= 25 significand bits.

    The float64 sum is correctly rounded and 53 >= 2p + 2, so rounding it again to the
    format gives the correctly rounded sum (the "innocuous double rounding" theorem):
    no round-to-odd needed. Falls back to add_rounded for wider formats.
    """
    if grid.max_precision > INNOCUOUS_PRECISION:
        return add_rounded(a, b, grid)
    return round_grid(a + b, grid)


def _is_several(fmt: FormatArg) -> bool:
    return not isinstance(fmt, (str, FloatFormat, IntFormat)) and isinstance(fmt, Sequence)


def format_list(fmt: FormatArg) -> list[FormatSpec]:
    """One format as a one-element list, or the sequence's formats; ValueError when empty."""
    if isinstance(fmt, (str, FloatFormat, IntFormat)):
        return [fmt]
    specs = list(fmt)
    if not specs:
        raise ValueError("give at least one format")
    return specs


def _native_dtype(fmt: FormatSpec, terms: np.ndarray) -> type[np.floating[Any]] | None:
    """numpy dtype whose own addition is the format's exact addition, when every term is a member."""
    dtype = NATIVE_DTYPES.get(get_format(fmt).name)
    if dtype is None:
        return None
    if dtype is np.float64:
        return dtype
    with np.errstate(over="ignore"):
        cast = terms.astype(dtype)
    return dtype if np.array_equal(cast.astype(np.float64), terms) else None


def _prepare(terms: np.ndarray, axis: int) -> np.ndarray:
    arr = np.asarray(terms, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError("terms must have at least one axis to sum over")
    return np.moveaxis(arr, axis, -1)


def _per_format(fmt: FormatArg, compute: Callable[[FormatSpec], np.ndarray]) -> np.ndarray:
    """Run compute for one format, or stack the results of several formats on a new first axis."""
    results = [compute(spec) for spec in format_list(fmt)]
    return np.stack(results) if _is_several(fmt) else results[0]


def sequential_sum(terms: np.ndarray, fmt: FormatArg, axis: int = -1, cumulative: bool = False) -> np.ndarray:
    """s_k = fl(s_{k-1} + t_k) from s_0 = 0, every addition rounded once to fmt (float64 values out).

    cumulative=True returns every partial sum s_1..s_n along the last axis instead of s_n.
    Several formats: the emulated ones share one loop (their lanes), native ones use numpy.
    """
    data = _prepare(terms, axis)
    specs = format_list(fmt)
    results: dict[int, np.ndarray] = {}
    emulated: list[int] = []
    for index, spec in enumerate(specs):
        dtype = _native_dtype(spec, data)
        if dtype is None:
            emulated.append(index)
            continue
        partial = np.add.accumulate(data.astype(dtype), axis=-1).astype(np.float64)
        results[index] = partial if cumulative else partial[..., -1]
    if emulated:
        lanes = _sequential_lanes(data, [specs[i] for i in emulated], cumulative)
        for lane, index in enumerate(emulated):
            results[index] = lanes[lane]
    stacked = [results[i] for i in range(len(specs))]
    return np.stack(stacked) if _is_several(fmt) else stacked[0]


def _sequential_lanes(data: np.ndarray, specs: list[FormatSpec], cumulative: bool) -> np.ndarray:
    """The per-step loop: lanes (formats) x batch, one rounded addition per step."""
    if _few_series(data, specs):
        return _by_series(data, specs, cumulative, _sequential_scalar)
    grid = make_grid(specs, lane_ndim=data.ndim - 1)
    n = data.shape[-1]
    s = np.zeros((len(specs), *data.shape[:-1]))
    out = np.empty((n, *s.shape)) if cumulative else None
    columns = np.moveaxis(data, -1, 0)
    with np.errstate(invalid="ignore", over="ignore"):  # an overflowed lane carries inf / NaN on
        for k in range(n):
            s = add_rounded(s, columns[k], grid)
            if out is not None:
                out[k] = s
    return np.moveaxis(out, 0, -1) if out is not None else s


def sequential_dot(x: np.ndarray, y: np.ndarray, fmt: FormatArg, axis: int = -1,
                   cumulative: bool = False) -> np.ndarray:
    """Dot product with exact products (as an FMA or a matrix core forms them) and a sequential
    sum rounded to fmt at every addition: s_k = fl(s_{k-1} + x_k·y_k).

    The products are formed in float64, which is exact when x and y have at most 26
    significand bits each (fp32 inputs and narrower); wider inputs raise ValueError.
    """
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not (_fits_bits(xa, 26) and _fits_bits(ya, 26)):
        raise ValueError("sequential_dot forms exact products in float64: inputs need at most 26 significand "
                         "bits (store them in fp32 or narrower first)")
    return sequential_sum(xa * ya, fmt, axis=axis, cumulative=cumulative)


def _fits_bits(values: np.ndarray, bits: int) -> bool:
    """True when every finite value has at most `bits` significand bits."""
    mantissa, _ = np.frexp(values[np.isfinite(values)])
    scaled = np.ldexp(mantissa, bits)
    return bool(np.all(scaled == np.rint(scaled)))


def pairwise_sum(terms: np.ndarray, fmt: FormatArg, axis: int = -1) -> np.ndarray:
    """Tree reduction: add adjacent pairs (an odd last element waits for the next level), round
    each sum to fmt, repeat until one value is left. For n = 2^k it is the full binary tree,
    whose error bound grows with log2 n instead of n."""
    data = _prepare(terms, axis)
    if data.shape[-1] == 0:
        raise ValueError("cannot sum an empty axis")

    def one(spec: FormatSpec) -> np.ndarray:
        dtype = _native_dtype(spec, data)
        level = data.astype(dtype) if dtype is not None else data
        grid = None if dtype is not None else make_grid(spec)
        while level.shape[-1] > 1:
            half = level.shape[-1] // 2
            left, right = level[..., 0 : 2 * half : 2], level[..., 1 : 2 * half : 2]
            with np.errstate(invalid="ignore", over="ignore"):
                sums = left + right if grid is None else add_rounded(left, right, grid)
            level = np.concatenate([sums, level[..., 2 * half :]], axis=-1)
        return level[..., 0].astype(np.float64)

    return _per_format(fmt, one)


def kahan_sum(terms: np.ndarray, fmt: FormatArg, axis: int = -1, cumulative: bool = False) -> np.ndarray:
    """Compensated (Kahan) summation with every operation rounded to fmt:

        y = fl(t_k - c);  u = fl(s + y);  c = fl(fl(u - s) - y);  s = u

    c carries the low part that the last addition lost; error bound ~2u·Σ|t| independent of n
    (while n·u < 1). Several formats run as lanes of one loop.
    """
    data = _prepare(terms, axis)
    specs = format_list(fmt)
    if _few_series(data, specs):
        result = _by_series(data, specs, cumulative, _kahan_scalar)
        return result if _is_several(fmt) else result[0]
    grid = make_grid(specs, lane_ndim=data.ndim - 1)
    n = data.shape[-1]
    s = np.zeros((len(specs), *data.shape[:-1]))
    c = np.zeros_like(s)
    out = np.empty((n, *s.shape)) if cumulative else None
    columns = np.moveaxis(data, -1, 0)
    with np.errstate(invalid="ignore", over="ignore"):  # an overflowed lane carries inf / NaN on
        for k in range(n):
            y = add_rounded(columns[k], -c, grid)  # the term need not be a member of the format
            u = add_members(s, y, grid)
            c = add_members(add_members(u, -s, grid), -y, grid)
            s = u
            if out is not None:
                out[k] = s
    result = np.moveaxis(out, 0, -1) if out is not None else s
    return result if _is_several(fmt) else result[0]


# --- the same loops over Python floats, one series (lane, batch row) at a time ----------------------


def _few_series(data: np.ndarray, specs: Sequence[FormatSpec]) -> bool:
    return len(specs) * math.prod(data.shape[:-1]) <= SCALAR_SERIES


def _by_series(data: np.ndarray, specs: Sequence[FormatSpec], cumulative: bool,
               run: Callable[[list[float], FormatSpec, list[float] | None], float]) -> np.ndarray:
    """run(terms, format, partials) for every lane and batch row, shaped as the numpy loops shape their
    result: (lanes, *batch), or (lanes, *batch, n) with every partial sum when cumulative."""
    batch, n = data.shape[:-1], data.shape[-1]
    rows: list[list[float]] = data.reshape(math.prod(batch), n).tolist()
    out = np.empty((len(specs), len(rows), n) if cumulative else (len(specs), len(rows)))
    for lane, spec in enumerate(specs):
        for index, row in enumerate(rows):
            partials: list[float] | None = [] if cumulative else None
            final = run(row, spec, partials)
            out[lane, index] = partials if partials is not None else final
    return out.reshape(len(specs), *batch, *((n,) if cumulative else ()))


def _sequential_scalar(terms: list[float], spec: FormatSpec, partials: list[float] | None) -> float:
    """s = fl(s + t) over the terms: TwoSum (as rounding.exact_sum.two_sum) gives fl the exact sum."""
    fl = scalar_rounder(spec)
    s = 0.0
    for t in terms:
        hi = s + t
        t_virtual = hi - s
        s = fl(hi, (s - (hi - t_virtual)) + (t - t_virtual))
        if partials is not None:
            partials.append(s)
    return s


def _kahan_scalar(terms: list[float], spec: FormatSpec, partials: list[float] | None) -> float:
    """kahan_sum's loop on floats. The term's subtraction goes through TwoSum; the other three add members,
    which for p <= 25 need only the float64 sum (add_members' rule), else TwoSum too."""
    fl = scalar_rounder(spec)
    add = _exact_adder(fl)
    narrow = accumulator_format(spec).man_bits + 1 <= INNOCUOUS_PRECISION
    s = c = 0.0
    for t in terms:
        y = add(t, -c)
        if narrow:
            u = fl(s + y, 0.0)
            c = fl(fl(u + -s, 0.0) + -y, 0.0)
        else:
            u = add(s, y)
            c = add(add(u, -s), -y)
        s = u
        if partials is not None:
            partials.append(s)
    return s


def _exact_adder(fl: Rounder) -> Callable[[float, float], float]:
    """fl(a + b) for any floats a, b: TwoSum, then fl of the pair."""

    def add(a: float, b: float) -> float:
        hi = a + b
        b_virtual = hi - a
        return fl(hi, (a - (hi - b_virtual)) + (b - b_virtual))

    return add
