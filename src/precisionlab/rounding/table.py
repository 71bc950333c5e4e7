"""The rounding table: for float32 input and a target of at most 8 bits, the result depends only on the
top 16 bits and on whether any of the low 16 bits is set, so a 2^17-entry table, built once by the
exact engine, rounds with four integer operations and one gather (float64 input: the top 16 bits and a
sticky bit of the low 48, for targets of at most TABLE64_MAN_BITS mantissa bits).

Public table API, used by the engine and by quantization (`quant.elements`):

    value_table(plan)                   the rounded value of every entry (the engine's table)
    code_table(fmt, dtype)              the code of every entry, nearest-even, saturating, NaN -> 0;
                                        built from the value table (one build per format)
    table_index(u) / table_index64(u)   the entry of float32 / float64 bit patterns u
    table_representatives() / ...64()   one input value per entry
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from precisionlab.formats import FloatFormat, Overflow
from precisionlab.rounding.codes import encode_float_values
from precisionlab.rounding.engine import F32, F64, Domain, FloatPlan, compute_domain, round_float_chunk
from precisionlab.rounding.modes import NanPolicy, Rounding, nan_error
from precisionlab.rounding.table_kernels import representatives

# For float32 input and a target of at most 8 bits, the result depends only on the top
# 16 bits and on whether any of the low 16 bits is set: every breakpoint of the
# target (a value or a midpoint, at most M + 1 <= 7 significant bits, inside float32's
# exponent range) is a bf16 number. A 2^17-entry table, built once by the exact path
# above, then rounds with four integer operations and one gather.
TABLE_MAX_BITS = 8


def table_applies(fmt: FloatFormat, dom: Domain, rounding: Rounding) -> bool:
    return dom is F32 and fmt.bits <= TABLE_MAX_BITS and fmt.man_bits <= 6 and rounding is not Rounding.STOCHASTIC


def table_representatives() -> np.ndarray:
    """One float32 per table entry: entry i has top 16 bits i >> 1 and low bits i & 1 (read-only):
    the fast path's 16-bit grid (`table_kernels.representatives(16)`)."""
    return representatives(16)


@lru_cache(maxsize=64)
def value_table(plan: FloatPlan) -> np.ndarray:
    """The plan's rounded value of every table entry (NaN inputs as NaN policy zero: the caller checks)."""
    relaxed = FloatPlan(plan.fmt, plan.dom, plan.rounding, plan.overflow, NanPolicy.ZERO)
    return round_float_chunk(table_representatives().copy(), relaxed, None)


def table_index(u: np.ndarray) -> np.ndarray:
    """(top 16 bits of float32 bits u) * 2 + (1 if any of the low 16 bits is set), in four passes:
    (u | ((u & 0x7FFF) + 0x7FFF)) >> 15. The low 15 bits plus 0x7FFF carry into bit 15 exactly
    when one of them is set and stay below bit 16, so after the OR bit 15 is the sticky bit (as
    `table_kernels` explains)."""
    low = u & np.uint32(0x7FFF)
    low += np.uint32(0x7FFF)
    low |= u
    low >>= np.uint32(15)
    return low


def round_float_chunk_table(x: np.ndarray, plan: FloatPlan, table: np.ndarray) -> np.ndarray:
    if not plan.fmt.has_nan and plan.nan is NanPolicy.RAISE and np.isnan(x).any():
        raise nan_error(plan.fmt.name)
    return table.take(table_index(x.view(np.uint32)))



TABLE64_MAN_BITS = 3
"""float64 v: the top 16 bits hold 4 mantissa bits, the M kept bits and the rounding bit of M <= 3."""


@lru_cache(maxsize=1)
def table_representatives64() -> np.ndarray:
    """One float64 per table entry: entry i has top 16 bits i >> 1 and low bits i & 1 (read-only)."""
    index = np.arange(1 << 17, dtype=np.uint64)
    representatives = (((index >> np.uint64(1)) << np.uint64(48)) | (index & np.uint64(1))).view(np.float64)
    representatives.flags.writeable = False
    return representatives


def table_index64(u: np.ndarray) -> np.ndarray:
    """(top 16 bits of float64 bits u) * 2 + (1 if any of the low 48 bits is set), as int64 for np.take."""
    idx = u >> np.uint64(47)
    idx &= np.uint64(0x1FFFE)
    low = u & np.uint64((1 << 48) - 1)
    np.minimum(low, np.uint64(1), out=low)
    idx |= low
    return idx.view(np.int64)


@lru_cache(maxsize=64)
def code_table(fmt: FloatFormat, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """uint8 code of every table entry of a float32 (dtype float32) or float64 input: nearest-even,
    saturating at max_finite, NaN to 0 where the format has no NaN (read-only). The codes of the
    entries' rounded values (`value_table`), so one exact rounding serves values and codes."""
    if fmt.bits > 8:
        raise ValueError(f"code tables are for formats of 8 bits or fewer; {fmt.name} has {fmt.bits}")
    float32 = np.dtype(dtype) == np.float32
    representatives = table_representatives() if float32 else table_representatives64()
    dom: Domain = compute_domain(fmt, np.dtype(np.float32)) if float32 else F64
    plan = FloatPlan(fmt, dom, Rounding.NEAREST_EVEN, Overflow.SATURATE, NanPolicy.ZERO)
    if dom is F32:
        values = value_table(plan)
    else:
        with np.errstate(invalid="ignore"):  # widening a signalling NaN is exact; numpy only warns
            widened = representatives.astype(dom.float_dtype)
        values = round_float_chunk(widened, plan, None)
    table = np.asarray(encode_float_values(values, fmt, dom), dtype=np.uint8)
    table.flags.writeable = False
    return table
