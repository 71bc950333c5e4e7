"""round_to on numpy arrays without the general path's layers: one dict lookup, then a kernel.

The first call with a given (format, dtype, rounding, overflow, nan) runs the general path
(`general`), which validates every argument and raises what it raises; then a kernel for that
key is built and cached, so later calls skip input unpacking, policy parsing, domain and plan
construction and the hashing of format objects. The key holds the arguments as the caller
passed them: a string by value, anything else (a format object, an enum member) by identity;
the entry keeps a reference to each such object, so its id cannot be reused while the entry
lives.

Kernels, each bit-identical to the general path (NaN sign and payload included) and checked
against it when built, on inputs chosen where a shortcut would show:

    up to SEARCH_MAX elements   formats of at most 16 bits: `search` (one binary search and one
                                gather on the caller's array: no copy, no chunks, no threads);
                                DIRECT_SEARCH_MAX where a kernel has a direct form
    1-D, up to DIRECT_MAX       bf16 and fp16 from float32 or float64, overflowing to inf or
                                saturating: ml_dtypes' bfloat16 casts where ml_dtypes is
                                installed (`cast_kernels.bf16_by_cast`, `cast_when_quiet`),
                                else from float32 `cast_kernels.bf16_array` (the integer kernel
                                on the caller's array, allocating only its output);
                                `cast_kernels.fp16_by_cast` (numpy's float16 casts)
    larger arrays               `table_kernels` (formats of at most 8 bits whose breakpoints are
                                float32 numbers with their low 16 or 15 bits zero: the registered
                                ones inside float32's range and the whole P3109 binary8 family;
                                float32 or float64 input), `cast_kernels` (IEEE-style
                                formats inside float32's range, bf16 and fp16 among them, under
                                nearest-even with overflow to inf, or clamped for saturate
                                (`cast_kernels.Saturated`); fp32 and fp64), run by `chunks`
    anything else               the general path (already chunked)

Stochastic rounding, modes other than DETERMINISTIC, and float16 input always take the general
path.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from precisionlab.formats import Encoding, FloatFormat, Format, IntFormat, Overflow, get_float_format
from precisionlab.peers import optional_import
from precisionlab.rounding import breakpoints, general, search, table_kernels
from precisionlab.rounding.cast_kernels import (
    CastThrough,
    IeeeBits,
    IeeeFrom32,
    IeeeFrom64,
    Saturated,
    bf16_array,
    bf16_by_cast,
    cast_when_quiet,
    clamp,
    fp16_array,
    fp16_by_cast,
    overflow_edge,
)
from precisionlab.rounding.chunks import CHUNK, ChunkKernel, run_chunked
from precisionlab.rounding.modes import NanPolicy, Rounding, overflow_policy
from precisionlab.rounding.search import Reference, SearchTable
from precisionlab.rounding.table_kernels import Table32, Table64

SEARCH_MAX = {np.dtype(np.float32): 256, np.dtype(np.float64): 512}
"""Arrays up to this size use the binary search. Measured on the 2-core machine (interleaved
medians): the search's n·log2(thresholds) steps beat the chunk kernels' fixed passes below
about 200-500 float32 elements and about 500-1000 float64 elements (whose kernels narrow first)."""

CACHE_LIMIT = 64
"""Kernels kept (a 16-bit format's holds about 1-2 MiB of tables); the cache is emptied when full."""

DETERMINISTIC = (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY, Rounding.TOWARD_ZERO, Rounding.TOWARD_POSITIVE,
                 Rounding.TOWARD_NEGATIVE, Rounding.TO_ODD)
"""Modes the fast paths tabulate (each a fixed function of x, stepping only at breakpoint
candidates); any other mode, stochastic or new, goes through the general path."""

_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)
_FP32 = get_float_format("fp32").defining_fields
_FP64 = get_float_format("fp64").defining_fields
_FP16 = get_float_format("fp16").defining_fields


DIRECT_SEARCH_MAX = {"bf16 by ml_dtypes": 32, "bf16 by ml_dtypes, saturating": 96, "bf16 by ml_dtypes, float64": 96,
                     "bf16": 128, "fp16": 64, "fp16, float64": 96}
"""Where a kernel has a direct form (bf16 and fp16), arrays up to this size still use the binary
search. Measured on the 2-core machine (medians of alternated calls): the search over bf16's ~2^16
steps took 1.6 microseconds at 32 elements and 2.8 at 96, ml_dtypes' casts 1.4 and 1.7, the five
integer passes 3.5 and 3.7; numpy's float16 casts took 2.1 at 64 elements against the search's 2.2.
The saturating and float64 forms test every |x| against the overflow edge first (one pass more):
the search's time over theirs was 0.82-0.92 at 64 elements and 1.06-1.31 at 128 (load average 2.6-13,
2026-12-02), so they start at 97."""

DIRECT_MAX = {"bf16 by ml_dtypes": 2048, "bf16 by ml_dtypes, saturating": 4096, "bf16 by ml_dtypes, float64": 4096,
              "bf16": CHUNK, "fp16": 2048, "fp16, float64": 16384}
"""Largest 1-D array the direct form takes (above it the chunk kernel runs). The casts of numpy
(float16) and ml_dtypes (bfloat16) are not vectorised: at 4096 elements they took 24 and 11
microseconds where the chunk kernel took 16 and 7, at 2048 18 and 8 against 21 and 8. The
saturating chunk kernel clamps in two more passes (the chunk kernel's time over the direct form's:
1.16 at 4096, 0.95 at 8192), and the float64 chunk kernel narrows first (bf16: 1.10 at 4096, 0.42 at
8192; fp16, where numpy casts float64 to float16 directly: 1.27 at 16384), same runs."""


class ArrayKernel:
    """round_to for numpy arrays of one dtype under one (format, mode, policies)."""

    def __init__(self, out_dtype: np.dtype, small: SearchTable | None, small_max: int, chunk: ChunkKernel | None,
                 fallback: Reference, direct: Reference | None = None, direct_max: int = 0) -> None:
        self.out_dtype = out_dtype
        self.small = small
        self.small_max = small_max
        self.chunk = chunk
        self.fallback = fallback
        self.direct = direct
        """The chunk kernel's own form for a 1-D array of up to direct_max elements (a new
        output array, no scratch, no copy), where it has one."""
        self.direct_max = direct_max if direct is not None else -1
        self.holds: tuple[Any, ...] = ()
        """The key's objects, kept alive so that their ids stay theirs."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n = x.size
        if n <= self.small_max and self.small is not None and x.ndim:
            return self.small(x)
        if n <= self.direct_max and x.ndim == 1:
            return self.direct(x)  # type: ignore[misc]  # direct_max is -1 where direct is None
        flat = x if x.ndim == 1 and x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
        if self.chunk is None:
            return self.fallback(flat).reshape(x.shape)
        out = np.empty(flat.size, dtype=self.out_dtype)
        if flat.size <= CHUNK:
            self.chunk.run(flat, out, self.chunk.scratch(flat.size))
        else:
            run_chunked(self.chunk, flat, out)
        return out if x.ndim == 1 else out.reshape(x.shape)


_kernels: dict[tuple[Any, ...], ArrayKernel | None] = {}


def find(fmt: Any, dtype: np.dtype, rounding: Any, overflow: Any, nan: Any) -> ArrayKernel | None:
    """The cached kernel for these arguments as passed, or None (not built yet, or none applies)."""
    return _kernels.get((fmt if fmt.__class__ is str else id(fmt), dtype,  # the key, as _key builds it
                         rounding if rounding.__class__ is str else id(rounding),
                         overflow if overflow is None or overflow.__class__ is str else id(overflow),
                         nan if nan.__class__ is str else id(nan)))


def _key(fmt: Any, dtype: np.dtype, rounding: Any, overflow: Any, nan: Any) -> tuple[Any, ...]:
    return (fmt if fmt.__class__ is str else id(fmt), dtype,
            rounding if rounding.__class__ is str else id(rounding),
            overflow if overflow is None or overflow.__class__ is str else id(overflow),
            nan if nan.__class__ is str else id(nan))


def remember(fmt: Any, dtype: np.dtype, rounding: Any, overflow: Any, nan: Any, target: Format, mode: Rounding,
             nan_policy: NanPolicy) -> None:
    """Build and cache the kernel for arguments the general path has just accepted (once per key)."""
    key = _key(fmt, dtype, rounding, overflow, nan)
    if key in _kernels:
        return
    if len(_kernels) >= CACHE_LIMIT:
        _kernels.clear()
    kernel = build(target, np.dtype(dtype), mode, overflow, nan_policy)
    if kernel is not None:
        kernel.holds = (fmt, rounding, overflow, nan)
    _kernels[key] = kernel


def build(fmt: Format, dtype: np.dtype, mode: Rounding, overflow: str | Overflow | None,
          nan: NanPolicy) -> ArrayKernel | None:
    """The kernel for one (format, input dtype, mode, policies), or None when only the general path applies."""
    if dtype not in (_FLOAT32, _FLOAT64) or mode not in DETERMINISTIC:
        return None
    with np.errstate(all="ignore"):  # the probes include NaN payloads and values past every range
        return _build(fmt, dtype, mode, overflow, nan)


def _build(fmt: Format, dtype: np.dtype, mode: Rounding, overflow: str | Overflow | None,
           nan: NanPolicy) -> ArrayKernel:
    reference: Reference = partial(general.round_values, fmt=fmt, rounding=mode, overflow=overflow, nan=nan)
    message = f"{fmt.name} has no NaN and the input holds NaN; pass nan='zero' to store NaN as 0"
    found = breakpoints.candidates(fmt, to_odd=mode is Rounding.TO_ODD)
    small = search.build(found, dtype.type, reference, message) if found is not None else None
    out_dtype = general.output_dtype(fmt, dtype)
    chunk = _chunk_kernel(fmt, dtype, mode, overflow, nan, found, out_dtype, message)
    if chunk is not None and not _reproduces(partial(_run, chunk, out_dtype), dtype, out_dtype, reference, found):
        chunk = None
    direct, direct_max, small_max = None, 0, SEARCH_MAX[dtype]
    for name, form in _direct_forms(fmt, dtype, chunk, out_dtype):
        if _reproduces(form, dtype, out_dtype, reference, found):
            direct, direct_max, small_max = form, DIRECT_MAX[name], min(small_max, DIRECT_SEARCH_MAX[name])
            break
    return ArrayKernel(out_dtype, small, small_max, chunk, reference, direct, direct_max)


def _direct_forms(fmt: Format, dtype: np.dtype, chunk: ChunkKernel | None,
                  out_dtype: np.dtype) -> list[tuple[str, Reference]]:
    """The small-array forms of a chunk kernel (bf16 and fp16, float32 or float64 input, overflow to
    inf or saturating), best first, each named as in DIRECT_MAX; the first that reproduces the engine
    is used."""
    saturate = chunk.bounds if isinstance(chunk, Saturated) else None
    inner = chunk.inner if isinstance(chunk, Saturated) else chunk
    if not isinstance(inner, (IeeeFrom32, IeeeFrom64)) or not isinstance(fmt, FloatFormat):
        return []
    wide = dtype == _FLOAT64
    suffix = ", float64" if wide else ""
    if inner.rounder.bf16_like:
        loud = partial(_run, inner, out_dtype) if wide else bf16_array  # the exact kernel (NaN, overflow)
        forms: list[tuple[str, Reference]] = []
        ml_dtypes = optional_import("ml_dtypes")
        if ml_dtypes is not None and not wide and saturate is None:
            forms.append(("bf16 by ml_dtypes", bf16_by_cast(ml_dtypes.bfloat16)))
        elif ml_dtypes is not None:
            edge = np.array(overflow_edge(fmt), dtype=np.float32)
            forms.append(("bf16 by ml_dtypes" + (suffix or ", saturating"),
                          cast_when_quiet(ml_dtypes.bfloat16, out_dtype.type, edge, loud, saturate)))
        if not wide:
            forms.append(("bf16", bf16_array if saturate is None else partial(_clamped, bf16_array, saturate)))
        return forms
    if fmt.defining_fields == _FP16:
        return [("fp16" + suffix, fp16_array if not wide and saturate is None else fp16_by_cast(out_dtype.type,
                                                                                                  saturate))]
    return []


def _clamped(form: Reference, saturate: tuple[np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    return clamp(form(x), *saturate)


def _run(kernel: ChunkKernel, out_dtype: np.dtype, x: np.ndarray) -> np.ndarray:
    """A chunk kernel on one whole 1-D array (for checking it)."""
    out = np.empty(x.size, dtype=out_dtype)
    kernel.run(x, out, kernel.scratch(x.size))
    return out


def _chunk_kernel(fmt: Format, dtype: np.dtype, mode: Rounding, overflow: str | Overflow | None, nan: NanPolicy,
                  found: np.ndarray | None, out_dtype: np.dtype, message: str) -> ChunkKernel | None:
    # float32 input reaches only the candidates inside float32's range; float64 input reaches all
    steps = breakpoints.reachable(found, np.float32) if found is not None and dtype == _FLOAT32 else found
    width = table_kernels.grid_width(steps) if fmt.bits <= 8 and steps is not None else None
    if width is not None:
        representatives = table_kernels.representatives(width)
        table = general.round_values(representatives, fmt, mode, overflow, NanPolicy.ZERO).astype(out_dtype)
        table.flags.writeable = False
        raises = message if not fmt.has_nan and nan is NanPolicy.RAISE else None
        return Table32(table, raises, width) if dtype == _FLOAT32 else Table64(table, raises, width)
    if isinstance(fmt, IntFormat):
        return None
    policy = overflow_policy(overflow, fmt.default_overflow)
    if policy is Overflow.SATURATE:  # the kernel that overflows to inf, clamped (cast_kernels.Saturated)
        inner = _overflow_to_inf(fmt, dtype, mode)
        return Saturated(inner, fmt, out_dtype) if inner is not None else None
    return _overflow_to_inf(fmt, dtype, mode) if policy is Overflow.INF else None


def _overflow_to_inf(fmt: FloatFormat, dtype: np.dtype, mode: Rounding) -> IeeeFrom32 | IeeeFrom64 | CastThrough | None:
    """The bit or cast kernel of an IEEE-style format inside float32's range (or fp32 / fp64) under
    overflow to inf, or None."""
    fields = fmt.defining_fields
    if (fields == _FP32 and dtype == _FLOAT32) or (fields == _FP64 and dtype == _FLOAT64):
        return CastThrough(None)  # every value is a member; only NaN changes (to the canonical NaN)
    if mode is not Rounding.NEAREST_EVEN:
        return None
    if fields == _FP32:
        return CastThrough(np.float32)
    if _ieee_inside_float32(fmt):
        rounder = IeeeBits(fmt)
        return IeeeFrom32(rounder) if dtype == _FLOAT32 else IeeeFrom64(rounder)
    return None


def _ieee_inside_float32(fmt: FloatFormat) -> bool:
    """An IEEE-style signed format with subnormals whose members and midpoints are float32 numbers
    (bf16, fp16, tf32, e6m9, ...): `cast_kernels.IeeeBits` rounds to it on float32 bits."""
    return (fmt.encoding is Encoding.IEEE and fmt.signed and fmt.subnormals and 1 <= fmt.man_bits <= 21
            and fmt.emax <= 127 and fmt.emin >= -126)


def _reproduces(kernel: Reference, dtype: np.dtype, out_dtype: np.dtype, reference: Reference,
                found: np.ndarray | None) -> bool:
    """Whether the kernel (on a 1-D array) gives the general path's bits on probes where a
    shortcut would differ."""
    probes = _probes(dtype, found)
    try:
        expected = reference(probes)
    except ValueError:  # NaN into a format without NaN: probe without NaN
        probes = probes[~np.isnan(probes)]
        expected = reference(probes)
    width = np.uint64 if out_dtype.itemsize == 8 else np.uint32
    finite = ~np.isnan(probes)  # and without NaN, for a form that takes another route when NaN is there
    for part, wanted in ((probes, expected), (probes[finite], expected[finite])):
        got = kernel(part)
        if got.dtype != out_dtype or not np.array_equal(got.view(width), wanted.view(width)):
            return False
    return True


def _probes(dtype: np.dtype, found: np.ndarray | None) -> np.ndarray:
    """Random bit patterns (every binade, NaN payloads), specials, the breakpoint candidates and
    their neighbours, and values one step either side of float32, bf16 and fp16 midpoints (where
    a cast through a wider format would round twice)."""
    rng = np.random.default_rng(20240518)
    width = np.uint64 if dtype == _FLOAT64 else np.uint32
    bits = rng.integers(0, np.iinfo(width).max, 4096, dtype=np.uint64, endpoint=True).astype(width)
    halves = rng.integers(0, 1 << 16, 2048, dtype=np.uint64).astype(np.uint32)
    wide32 = rng.integers(0, 1 << 32, 2048, dtype=np.uint64).astype(np.uint32).view(np.float32)
    fp16 = rng.integers(0, 1 << 16, 2048, dtype=np.uint64).astype(np.uint16).view(np.float16)
    midpoints = [((halves << np.uint32(16)) | np.uint32(0x8000)).view(np.float32).astype(np.float64),
                 (wide32.astype(np.float64) + np.nextafter(wide32, np.float32(np.inf)).astype(np.float64)) / 2,
                 (fp16.astype(np.float64) + np.nextafter(fp16, np.float16(np.inf)).astype(np.float64)) / 2]
    if found is not None:
        midpoints.append(found)
    near = np.concatenate(midpoints)
    base = near[np.isfinite(near)].astype(dtype)
    up, down = dtype.type(np.inf), dtype.type(-np.inf)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], dtype=dtype)
    return np.concatenate([bits.view(dtype.type), base, np.nextafter(base, up), np.nextafter(base, down), -base,
                           specials])
