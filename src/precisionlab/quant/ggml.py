"""llama.cpp's reference quantizers for the gguf_* presets (ggml-quants.c `quantize_row_*_ref`), in float32 numpy.

Each operation is the C code's, in its order, in float32, with no fused multiply-add and every sum taken
left to right as the C loops take it (`column_sum`); `nearest_int` is the C's bit trick
(add 1.5 * 2^23, keep the low mantissa bits: round to nearest, ties to even). Per block, x float32:

    Q8_0  d = amax / 127                         q = roundf(x * (1/d))                 (ties away from 0)
    Q4_0  d = max / -8                           q = min(15, trunc(x * (1/d) + 8.5)) - 8
    Q5_0  d = max / -16                          q = min(31, trunc(x * (1/d) + 16.5)) - 16
    Q4_1  d = (x_max - x_min) / 15, m = x_min    q = min(15, trunc((x - m) * (1/d) + 0.5))
    Q5_1  d = (x_max - x_min) / 31, m = x_min    q = min(31, trunc((x - m) * (1/d) + 0.5))
          (max: the element of largest magnitude, the first one if tied, so d < 0 when it is positive;
           1/d is 0 when d = 0; stored d = fp16(d), m = fp16(m); the codes use the float32 d and m)
    Q4_K  per 32 (make_qkx2_quants): weights av_x + |x| with av_x = sqrt(sum x^2 / 32); x_min clamped to
          <= 0; a first fit s = (x_max - x_min) / 15, then 21 trial scales (15 - 1 + 0.1 i) / (x_max - x_min),
          each refitted by weighted least squares (the min clamped to <= 0) and kept when its weighted
          squared error is smaller. Per 256: d = max_scale / 63, dmin = max_min / 63 (fp16); the 6-bit codes
          sc_j = nearest_int(63 / max_scale * s_j), mc_j likewise; the codes again from the stored
          d * sc_j and dmin * mc_j: q = clamp(nearest_int((x + dmin * mc_j) / (d * sc_j)), 0, 15)
    Q6_K  per 16 (make_qx_quants, nmax 32, weights x^2): s = max / -32 and 18 trial scales
          -(32 + 0.1 i) / max (i = -9..9, i != 0), each refitted by least squares, the best kept. Per 256:
          d = fp16(max_scale / -128) (max_scale: the s_j of largest magnitude), sc_j = min(127,
          nearest_int(-128 / max_scale * s_j)) in int8; q = clamp(nearest_int(x / (d * sc_j)), -32, 31)

A block scale code of 0 keeps the codes of the search (as the C code does); a Q6_K super-block whose scales
are all below 1e-15 is stored as zeros. Where they are implemented in gguf-py (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
these equal `gguf.quants.quantize` bit for bit; Q4_K and Q6_K equal the C reference compiled without FMA
contraction (the tests' golden file). A llama.cpp built with -march=native on FMA hardware lets GCC contract
multiply-adds (its default -ffp-contract=fast), which can move a search sum by an ulp and so, rarely, a code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from precisionlab import parallel as thread_pool
from precisionlab.formats import IntFormat
from precisionlab.quant import diagnostics as diag
from precisionlab.quant import qparams as qp
from precisionlab.quant.blocks import layout
from precisionlab.quant.elements import codec, int_codes, make_codec
from precisionlab.quant.packing import pack
from precisionlab.quant.scheme import Scheme
from precisionlab.quant.tensor import QuantizedTensor, TwoLevelScales, check_whole_blocks

F32 = np.float32
CHUNK_ELEMENTS = 1 << 18
"""Elements quantized at a time (the K-quant searches hold a few float32 copies of a chunk: 1 MiB each)."""
GROUP_MAX_EPS = F32(1e-15)


@dataclass
class Blocks:
    """The quantized form of n blocks: code values (n, B) and per-block (sub-block) scales and mins."""

    values: np.ndarray
    scales: np.ndarray
    mins: np.ndarray | None = None
    super_scales: np.ndarray | None = None
    scale_codes: np.ndarray | None = None
    super_mins: np.ndarray | None = None
    min_codes: np.ndarray | None = None


# --------------------------------------------------------------------------- C arithmetic
def fp16(x: np.ndarray) -> np.ndarray:
    """GGML_FP32_TO_FP16 then back: nearest-even into fp16 (beyond its range: inf), as float32."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(F32)


def reciprocal(d: np.ndarray) -> np.ndarray:
    """`d ? 1.0f/d : 0.0f` (inf where 1/d overflows float32)."""
    out = np.zeros_like(d, dtype=F32)
    with np.errstate(over="ignore", divide="ignore"):
        np.divide(F32(1), d, out=out, where=d != 0)
    return out


def nearest_int(f: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: the low 23 bits of fp32(f + 12582912) minus 2^22 (round half to even for |f| < 2^22)."""
    with np.errstate(over="ignore", invalid="ignore"):
        bits = (np.asarray(f, dtype=F32) + F32(12582912)).view(np.int32)
    return (bits & np.int32(0x007FFFFF)) - np.int32(0x00400000)


def roundf(v: np.ndarray) -> np.ndarray:
    """C roundf: to nearest, ties away from zero (exact: |v| - floor(|v|) is exact in float32)."""
    a = np.abs(v)
    whole = np.floor(a)
    return np.copysign(whole + (a - whole >= F32(0.5)), v)


def c_cast(v: np.ndarray, finite_rows: np.ndarray) -> np.ndarray:
    """C's float -> int8 cast: truncation toward zero, as int16, of v (blocks, elements). v is finite in every
    block whose d and 1/d are (`finite_rows`). Elsewhere (1/d overflowed: a block of values below about
    2^-125) the C cast of a non-finite value is undefined; x86's cvttss2si gives 0x80000000, whose low
    byte 0 the int8 keeps, and so do gguf-py's numpy casts there: 0 here on every platform."""
    if not finite_rows.all():
        v = np.where(np.isfinite(v), v, F32(0))
    with np.errstate(invalid="ignore"):
        return np.trunc(v).astype(np.int16)


def first_largest_magnitude(x: np.ndarray) -> np.ndarray:
    """Per row, the element of largest |x|, the first one if tied (the C loops' strict `amax < fabsf(v)`)."""
    index = np.argmax(np.abs(x), axis=-1)[..., None]
    return np.take_along_axis(x, index, axis=-1)[..., 0]


# --------------------------------------------------------------------------- legacy 32-element types
def q8_0(x: np.ndarray) -> Blocks:
    d = np.abs(x).max(axis=1) / F32(127)
    inverse = reciprocal(d)
    with np.errstate(invalid="ignore", over="ignore"):
        q = c_cast(roundf(x * inverse[:, None]), np.isfinite(inverse)[:, None])
    return Blocks(q, fp16(d)[:, None])


def _signed(x: np.ndarray, half: int) -> Blocks:
    """Q4_0 (half 8) and Q5_0 (half 16): d = max / -half, q = min(2 half - 1, trunc(x / d + half + 1/2)) - half."""
    d = first_largest_magnitude(x) / F32(-half)
    inverse = reciprocal(d)
    with np.errstate(invalid="ignore", over="ignore"):
        v = x * inverse[:, None] + F32(half + 0.5)
    q = np.minimum(c_cast(v, np.isfinite(inverse)[:, None]), np.int16(2 * half - 1)) - np.int16(half)
    return Blocks(q, fp16(d)[:, None])


def _with_min(x: np.ndarray, top: int) -> Blocks:
    """Q4_1 (top 15) and Q5_1 (top 31): d = (max - min) / top, q = min(top, trunc((x - min) / d + 1/2))."""
    low = x.min(axis=1)
    with np.errstate(over="ignore"):
        d = (x.max(axis=1) - low) / F32(top)
    inverse = reciprocal(d)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (x - low[:, None]) * inverse[:, None] + F32(0.5)
    q = np.minimum(c_cast(v, (np.isfinite(inverse) & np.isfinite(d))[:, None]), np.int16(top))
    return Blocks(q, fp16(d)[:, None], fp16(low)[:, None])


def q4_0(x: np.ndarray) -> Blocks:
    return _signed(x, 8)


def q5_0(x: np.ndarray) -> Blocks:
    return _signed(x, 16)


def q4_1(x: np.ndarray) -> Blocks:
    return _with_min(x, 15)


def q5_1(x: np.ndarray) -> Blocks:
    return _with_min(x, 31)


# --------------------------------------------------------------------------- K-quants
# The searches run over many sub-blocks at once with the sub-block's elements on the FIRST axis (shape
# (elements, sub-blocks)): each C loop `s += t[i]` is then one contiguous vector add per element, in order.
def column_sum(terms: np.ndarray) -> np.ndarray:
    """sum over axis 0, left to right in float32 (the C loop's `s += t`), for (elements, sub-blocks) arrays."""
    total = terms[0].astype(F32, copy=True)
    for row in terms[1:]:
        total += row
    return total


def make_qkx2_quants(x: np.ndarray, weights: np.ndarray, nmax: int, rmin: float, rdelta: float,
                     nstep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's make_qkx2_quants (use_mad false) over the columns of x (elements, sub-blocks):
    (scale, the_min = -min, codes 0..nmax)."""
    low = x.min(axis=0)
    high = x.max(axis=0)
    sum_w = column_sum(weights)
    sum_x = column_sum(weights * x)
    low = np.where(low > 0, F32(0), low)
    flat = high == low
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = F32(nmax) / (high - low)
        scale = F32(1) / iscale
        codes = _clamped(iscale * (x - low), 0, nmax)
        best_error = _weighted_error(scale, low, codes, x, weights)
        for step in range(nstep + 1):
            trial = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (high - low)
            candidate = _clamped(trial * (x - low), 0, nmax)
            wl = weights * candidate
            sum_l = column_sum(wl)
            sum_l2 = column_sum(wl * candidate)
            sum_xl = column_sum(wl * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0
            this_min = np.where(positive, F32(0), this_min)
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            error = _weighted_error(this_scale, this_min, candidate, x, weights)
            better = (det > 0) & (error < best_error) & ~flat
            codes = np.where(better, candidate, codes)
            best_error = np.where(better, error, best_error)
            scale = np.where(better, this_scale, scale)
            low = np.where(better, this_min, low)
    codes = np.where(flat, F32(0), codes)
    return np.where(flat, F32(0), scale), -low, codes


def _clamped(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """MAX(lo, MIN(hi, nearest_int(v))) as float32 (the codes enter the sums as floats)."""
    return np.clip(nearest_int(v), lo, hi).astype(F32)


def _weighted_error(scale: np.ndarray, low: np.ndarray, codes: np.ndarray, x: np.ndarray,
                    weights: np.ndarray) -> np.ndarray:
    """sum of w * (scale * L + min - x)^2, left to right."""
    diff = scale * codes + low - x
    return column_sum(weights * (diff * diff))


def _columns(x: np.ndarray, width: int) -> np.ndarray:
    """(n, k * width) rows -> (width, n * k): each sub-block of `width` elements a contiguous column."""
    return np.ascontiguousarray(x.reshape(-1, width).T)


def q4_k(x: np.ndarray) -> Blocks:
    n = x.shape[0]
    sub = _columns(x, 32)  # (32, n * 8)
    av_x = np.sqrt(column_sum(sub * sub) / F32(32))
    weights = av_x + np.abs(sub)
    scales, mins, codes = make_qkx2_quants(sub, weights, 15, -1.0, 0.1, 20)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
    sc = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(F32)  # uint8_t, then MIN(63, .)
    mc = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(F32)
    d = fp16(max_scale / F32(63))
    dmin = fp16(max_min / F32(63))
    d_sub = d[:, None] * sc
    dm_sub = dmin[:, None] * mc
    with np.errstate(divide="ignore", invalid="ignore"):
        again = _clamped((sub + dm_sub.reshape(-1)) / d_sub.reshape(-1), 0, 15)
    codes = np.where(d_sub.reshape(-1) != 0, again, codes)
    values = codes.T.reshape(n, 256).astype(np.int16)
    return Blocks(values, d_sub, -dm_sub, d[:, None], sc, dmin[:, None], mc)


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's make_qx_quants with rmse_type 1 (weights x^2) over the columns of x (elements, sub-blocks):
    (scale, codes -nmax..nmax-1)."""
    top = np.take_along_axis(x, np.argmax(np.abs(x), axis=0)[None, :], axis=0)[0]  # first largest |x|
    tiny = np.abs(top) < GROUP_MAX_EPS
    weights = x * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):

        def fit(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            codes = _clamped(iscale * x, -nmax, nmax - 1)
            return codes, column_sum(weights * x * codes), column_sum(weights * codes * codes)

        codes, sumlx, suml2 = fit(F32(-nmax) / top)
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            candidate, sumlx, suml2 = fit(-(F32(nmax) + F32(0.1) * F32(step)) / top)
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2) & ~tiny
            codes = np.where(better, candidate, codes)
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    return np.where(tiny, F32(0), scale), np.where(tiny, F32(-nmax), codes)  # all-zero: L = 0, i.e. -nmax


def q6_k(x: np.ndarray) -> Blocks:
    n = x.shape[0]
    sub = _columns(x, 16)  # (16, n * 16)
    scales, codes = make_qx_quants(sub, 32)
    scales = scales.reshape(n, 16)
    max_scale = first_largest_magnitude(scales)
    empty = np.abs(max_scale) < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F32(-128) / max_scale
        d = np.where(empty, F32(0), fp16(F32(1) / iscale))
        code = np.minimum(nearest_int(iscale[:, None] * scales), 127)
    sc = np.where(empty[:, None], F32(0), ((code + 128) & 0xFF) - 128).astype(F32)  # stored as int8_t
    d_sub = d[:, None] * sc
    with np.errstate(divide="ignore", invalid="ignore"):
        again = _clamped(sub / d_sub.reshape(-1), -32, 31)
    codes = np.where(d_sub.reshape(-1) != 0, again, codes)
    codes = np.where(np.repeat(empty, 16), F32(-32), codes)  # a zeroed block reads its codes as 0 - 32
    return Blocks(codes.T.reshape(n, 256).astype(np.int16), d_sub, None, d[:, None], sc)


QUANTIZERS: dict[str, Callable[[np.ndarray], Blocks]] = {
    "Q8_0": q8_0, "Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1, "Q4_K": q4_k, "Q6_K": q6_k,
}


def quantize_blocks(x: np.ndarray, ggml_type: str) -> Blocks:
    """Blocks of float32 x (n, block size) under llama.cpp's reference quantizer for `ggml_type`."""
    return QUANTIZERS[ggml_type](np.ascontiguousarray(x, dtype=F32))


# --------------------------------------------------------------------------- a QuantizedTensor
def quantize_view(view: np.ndarray, s: Scheme, shape: tuple[int, ...], dtype_name: str) -> QuantizedTensor:
    """Quantize a canonical (1, M, N) view under a gguf_* preset (blocks along N, whole blocks only), a chunk
    of blocks at a time."""
    ggml_type = s.ggml
    assert ggml_type is not None
    _, m, n = view.shape
    check_whole_blocks(s, n)
    block = s.super_block or s.group
    source = view.reshape(-1, block)
    step = max(1, CHUNK_ELEMENTS // block)
    fmt = codec(s.element).fmt
    assert isinstance(fmt, IntFormat)
    codes = np.empty(source.shape, dtype=np.uint8)

    def one(start: int) -> tuple[Blocks, int]:
        chunk = source[start : start + step]
        if not np.isfinite(chunk).all():
            raise ValueError(f"the input holds NaN or inf; {s} (llama.cpp's {s.ggml} quantizer) needs finite values")
        if chunk.dtype != F32:
            qp.check_float32_range(np.abs(chunk).max(initial=0.0))
        rows = np.ascontiguousarray(chunk, dtype=F32)
        part = quantize_blocks(rows, ggml_type)
        codes[start : start + step] = int_codes(part.values, fmt)
        part.values = np.empty((0, block), dtype=np.int16)  # kept as codes: the scales are what is joined
        return part, _clipped(rows, part, s)

    starts = list(range(0, source.shape[0], step))
    done = thread_pool.map_tasks(one, starts, parallel=len(starts) > 1)
    joined = _concatenate([part for part, _ in done])
    clipped = sum(count for _, count in done)
    lay = layout((1, m, n), s)
    diagnostics = diag.ScaleDiagnostics(lay.n_blocks, 0, int(view.size), clipped)
    return to_tensor(joined, s, (m, n), shape, dtype_name, diagnostics, codes)


def _concatenate(parts: list[Blocks]) -> Blocks:
    """The blocks of several chunks, in order."""
    def join(name: str) -> np.ndarray | None:
        first = getattr(parts[0], name)
        return None if first is None else np.concatenate([getattr(p, name) for p in parts])

    values, scales = join("values"), join("scales")
    assert values is not None and scales is not None
    return Blocks(values, scales, join("mins"), join("super_scales"), join("scale_codes"), join("super_mins"),
                  join("min_codes"))


def to_tensor(blocks: Blocks, s: Scheme, rows_cols: tuple[int, int], shape: tuple[int, ...], dtype_name: str,
              diagnostics: diag.ScaleDiagnostics | None = None, codes: np.ndarray | None = None) -> QuantizedTensor:
    """A QuantizedTensor of the blocks of a (rows, cols) canonical view (each row whole blocks) under preset s
    (`codes`: the element codes already made from blocks.values)."""
    m, n = rows_cols
    check_whole_blocks(s, n)
    block = s.super_block or s.group
    fmt = codec(s.element).fmt
    assert isinstance(fmt, IntFormat)

    def grid(a: np.ndarray, per_row: int) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=F32).reshape(1, m, per_row)

    two_level = None
    if s.is_two_level:
        assert blocks.super_scales is not None and blocks.scale_codes is not None
        two_level = TwoLevelScales(
            grid(blocks.super_scales, n // block), grid(blocks.scale_codes, n // s.group),
            None if blocks.super_mins is None else grid(blocks.super_mins, n // block),
            None if blocks.min_codes is None else grid(blocks.min_codes, n // s.group))
    return QuantizedTensor(
        scheme=s, shape=shape, dtype=dtype_name,
        packed=pack(int_codes(blocks.values, fmt) if codes is None else codes, fmt.bits),
        scale_values=grid(blocks.scales, n // s.group), diagnostics=diagnostics,
        min_values=None if blocks.mins is None else grid(blocks.mins, n // s.group), two_level=two_level)


def from_tensor(q: QuantizedTensor) -> Blocks:
    """The blocks of a QuantizedTensor under a gguf_* preset: code values and scale fields, block by block."""
    s = q.scheme
    if s.ggml is None:
        raise ValueError(f"{s} is not a gguf_* preset: GGML blocks hold only llama.cpp's own layouts")
    block = s.super_block or s.group
    per = block // s.group
    table = codec(s.element).values().astype(np.int16)
    values = np.take(table, q.codes.reshape(-1)).reshape(-1, block)

    def per_block(a: np.ndarray | None, width: int) -> np.ndarray | None:
        return None if a is None else np.asarray(a, dtype=F32).reshape(-1, width)

    t = q.two_level
    return Blocks(values, per_block(q.scale_values, per), per_block(q.min_values, per),  # type: ignore[arg-type]
                  None if t is None else per_block(t.super_scales, 1),
                  None if t is None else per_block(t.scale_codes, per),
                  None if t is None else per_block(t.super_mins, 1),
                  None if t is None else per_block(t.min_codes, per))


def _clipped(rows: np.ndarray, blocks: Blocks, s: Scheme) -> int:
    """Elements beyond their block's range by more than half a step (`quant.diagnostics`), counted, not warned
    about: llama.cpp's rule is what these presets reproduce."""
    x = rows.reshape(blocks.scales.shape[0], blocks.scales.shape[1], -1)
    lower, upper = diag.clip_bounds(make_codec(s), blocks.scales, None, blocks.mins)
    flagged = (x.min(axis=2) < lower) | (x.max(axis=2) > upper)  # float32 against float64: exact comparisons
    if not flagged.any():
        return 0
    chosen = x[flagged].astype(np.float64)
    return int(np.count_nonzero((chosen < lower[flagged][:, None]) | (chosen > upper[flagged][:, None])))
