"""quantize: chunked, multi-threaded, exact to the rules in `qparams` and `elements` (dequantize: `quant.dequant`).

    quantize:    per block  choose s (and z or m) from the block's amax (or min / max)
                 per element q = encode(x / s)          (one rounding of the exact quotient: elements.quotient)
                             min=: q = rint((x - m) / s)
    dequantize:  x_hat = fp32(value(q) * s)             asym: fp32((q - z) * s)
                                                        min=: fp32(fp32(q * s) + m)
    gguf_* presets: llama.cpp's reference quantizers (`quant.ggml`), the same dequantization.

The work runs over chunks of whole block-rows (`quant.chunking`: about CHUNK elements each) on the
shared thread pool, so temporaries stay in cache and peak extra memory is the packed codes plus
a few chunks. Schemes whose block spans every row (per tensor, per column) and NVFP4's
tensor scale take one extra read-only pass for the statistics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from precisionlab.quant import diagnostics as diag
from precisionlab.quant import ggml
from precisionlab.quant import qparams as qp
from precisionlab.quant.blocks import Layout, canonical_view, layout, to_view
from precisionlab.quant.chunking import Task, aligned, codes_per_group, row_tasks, run_tasks
from precisionlab.quant.elements import Codec, make_codec
from precisionlab.quant.packing import pack, packed_nbytes
from precisionlab.quant.scheme import Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor
from precisionlab.rounding.bf16 import bf16_to_float32


# --------------------------------------------------------------------------- inputs
def as_array(x: Any) -> tuple[np.ndarray, str]:
    """A float numpy array for x (numpy, ml_dtypes bfloat16, torch tensor, or a list), and its dtype name.

    Non-native byte order (a big-endian `.npy`) is the same float data: it is swapped to native, not refused."""
    if type(x).__module__.startswith("torch"):
        t = x.detach().cpu()
        name = str(t.dtype).replace("torch.", "")
        if name not in ("float16", "bfloat16", "float32", "float64"):
            raise TypeError(f"quantize needs a float tensor, got {t.dtype}")
        arr = t.float().numpy() if name == "bfloat16" else t.numpy()
        return arr, name
    arr = np.asarray(x)
    if arr.dtype.kind == "f" and not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.name == "bfloat16":
        return bf16_to_float32(arr.view(np.uint16)), "bfloat16"
    if arr.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"quantize needs float16, bfloat16, float32 or float64 data, got dtype {arr.dtype}")
    return arr, arr.dtype.name


def _load(view: np.ndarray, lay: Layout, task: Task, dtype: type[np.floating]) -> np.ndarray:
    """Rows [r0, r1) of batch b as a contiguous (rows, Np) array, zero-padded to whole blocks."""
    b, r0, r1 = task
    n = lay.view[2]
    np_ = lay.padded[2]
    rows = r1 - r0 if lay.whole_rows else -(-(r1 - r0) // lay.block[0]) * lay.block[0]
    src = view[b, r0:r1, :]
    if rows == r1 - r0 and np_ == n and src.dtype == dtype and src.flags.c_contiguous:
        return src
    out = np.zeros((rows, np_), dtype=dtype)
    out[: r1 - r0, :n] = src
    return out


def _blocked(chunk: np.ndarray, lay: Layout) -> np.ndarray:
    """(rows, Np) -> (row blocks, block rows, column blocks, block columns)."""
    rows, np_ = chunk.shape
    br = rows if lay.whole_rows else lay.block[0]
    bc = lay.block[1]
    return chunk.reshape(rows // br, br, np_ // bc, bc)


# --------------------------------------------------------------------------- statistics
def _stats(blocks: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(amax, unused) for symmetric schemes, (min, max) for asymmetric ones, per block."""
    if blocks.shape[1] == 1:  # one row per block: reduce the contiguous last axis only
        grid = (blocks.shape[0], blocks.shape[2])
        flat = blocks.reshape(-1, blocks.shape[3])
        if signed:
            return _reduce_groups(np.abs(flat), np.maximum).reshape(grid), np.empty(0)
        return (_reduce_groups(flat, np.minimum).reshape(grid), _reduce_groups(flat, np.maximum).reshape(grid))
    if signed:
        return np.abs(blocks).max(axis=(1, 3)), np.empty(0)
    return blocks.min(axis=(1, 3)), blocks.max(axis=(1, 3))


def _reduce_groups(a: np.ndarray, op: np.ufunc) -> np.ndarray:
    """op-reduce each row of a (n, g) array; small power-of-two g by halving (faster than a
    strided ufunc.reduce over short rows; NaN propagates either way)."""
    g = a.shape[1]
    if g > 64 or g & (g - 1):
        return op.reduce(a, axis=1)
    while a.shape[1] > 1:
        half = a.shape[1] // 2
        a = op(a[:, :half], a[:, half:])
    return a[:, 0]


def _whole_stats(view: np.ndarray, lay: Layout, tasks: list[Task], dtype: type[np.floating],
                 signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-block statistics when one block row spans every row: reduce over the chunks."""

    def one(task: Task) -> tuple[int, np.ndarray, np.ndarray]:
        a, b = _stats(_blocked(_load(view, lay, task, dtype), lay), signed)
        return task[0], a, b

    parts = run_tasks(tasks, one, lay.n_stored)
    grid = lay.grid
    first = np.full(grid, -np.inf)
    second = np.full(grid, -np.inf)
    if not signed:
        first = np.full(grid, np.inf)
    for b, a, c in parts:
        if signed:
            first[b] = np.maximum(first[b], a)
        else:
            first[b] = np.minimum(first[b], a)
            second[b] = np.maximum(second[b], c)
    return first, second


def _finite_amax(view: np.ndarray, lay: Layout, tasks: list[Task], dtype: type[np.floating]) -> float:
    """Largest finite |x| of the tensor (NVFP4's tensor amax)."""

    def one(task: Task) -> float:
        chunk = np.abs(_load(view, lay, task, dtype))
        top = float(chunk.max())
        if not math.isfinite(top):
            finite = chunk[np.isfinite(chunk)]
            top = float(finite.max()) if finite.size else 0.0
        return top

    return max(run_tasks(tasks, one, lay.n_stored), default=0.0)


def choose_qparams(first: np.ndarray, second: np.ndarray, scheme: Scheme, cod: Codec,
                   tensor_scale: float | None) -> qp.QParams:
    """Dispatch to the rule in `qparams` for this scheme (after the float32 range check)."""
    qp.check_float32_range(first, second)
    if scheme.is_mx:
        return qp.microscaling(first, scheme, cod)
    if tensor_scale is not None:
        return qp.nvfp4(first, tensor_scale, scheme, cod)
    if scheme.has_min:
        return qp.float_min(first, second, scheme, cod)
    if not scheme.symmetric:
        return qp.asymmetric(first, second, scheme, cod)
    return qp.symmetric(first, scheme, cod)


# --------------------------------------------------------------------------- quantize
def quantize(x: Any, scheme: str | Scheme) -> QuantizedTensor:
    """Quantize x under a scheme string or Scheme; see `precisionlab.quant` for the grammar."""
    s = parse_scheme(scheme)
    arr, dtype_name = as_array(x)
    cod = make_codec(s)
    axis, _, view_shape = canonical_view(arr.shape, s)
    view = to_view(arr, axis, view_shape)
    if s.ggml is not None:
        return ggml.quantize_view(view, s, tuple(arr.shape) or (1,), dtype_name)
    work = np.float64 if arr.dtype == np.float64 else np.float32
    rows_fp16 = index = None
    if s.outliers:
        view, rows_fp16, index = _split_outliers(view, s.outliers, work)
    lay = layout((view.shape[0], view.shape[1], view.shape[2]), s)
    tasks = row_tasks(lay, cod.bits)

    tensor_scale = None
    if s.tensor_scale:
        tensor_scale = qp.nvfp4_tensor_scale(_finite_amax(view, lay, tasks, work))
    signed = s.symmetric
    pre: qp.QParams | None = None
    first = second = np.empty(0)
    if lay.whole_rows:
        first, second = _whole_stats(view, lay, tasks, work, signed)
        pre = choose_qparams(first, second, s, cod, tensor_scale)
    clipped: list[int] = []  # per chunk (list.append is atomic across the pool's threads)
    floored: list[int] = [] if pre is None else [_count(pre.floored)]

    scale_grid = np.empty(lay.grid, dtype=np.float32)
    zero_grid = np.empty(lay.grid, dtype=np.float32) if s.has_zero_point else None
    min_grid = np.empty(lay.grid, dtype=np.float32) if s.has_min else None
    packed = np.empty(packed_nbytes(lay.n_stored, cod.bits), dtype=np.uint8)
    np_ = lay.padded[2]
    per_bytes = packed_nbytes(1, cod.bits)
    # a chunk that starts inside a packing group (sub-byte codes, 2-D blocks over several
    # batches of an odd size) cannot be packed on its own: collect every code, pack once
    codes_all = None if aligned(tasks, lay, cod.bits) else np.empty(lay.n_stored, dtype=np.uint8)

    def one(task: Task) -> None:
        b, r0, r1 = task
        blocks = _blocked(_load(view, lay, task, work), lay)
        if pre is not None:
            params = qp.QParams(pre.scale[b], pre.divisor[b],
                                None if pre.zero_point is None else pre.zero_point[b],
                                None if pre.bad is None else pre.bad[b], None,
                                None if pre.minimum is None else pre.minimum[b],
                                None if pre.flat is None else pre.flat[b])
            rows_sel = slice(0, 1)
            first_c, second_c = first[b], (second[b] if not signed else second)
        else:
            first_c, second_c = _stats(blocks, signed)
            params = choose_qparams(first_c, second_c, s, cod, tensor_scale)
            floored.append(_count(params.floored))
            br = lay.block[0]
            rows_sel = slice(r0 // br, r0 // br + blocks.shape[0])
            scale_grid[b, rows_sel] = params.scale
            if zero_grid is not None and params.zero_point is not None:
                zero_grid[b, rows_sel] = params.zero_point
            if min_grid is not None and params.minimum is not None:
                min_grid[b, rows_sel] = params.minimum
        with np.errstate(invalid="ignore", divide="ignore"):
            divisor = params.divisor[:, None, :, None]
            if params.minimum is not None:  # min=: rint((x - m) / s), one rounding of the exact quotient
                codes = cod.encode_offset(blocks, divisor, params.minimum[:, None, :, None])
            else:
                zero = None if params.zero_point is None else params.zero_point[:, None, :, None]
                codes = cod.encode_quotient(blocks, divisor, zero)  # one rounding of x / s
        for zeroed in (params.bad, params.flat):
            if zeroed is not None:
                codes[np.broadcast_to(zeroed[:, None, :, None], codes.shape)] = 0
        lower, upper = diag.clip_bounds(cod, params.divisor, params.zero_point, params.minimum)
        clipped.append(diag.count_clipped(blocks, lower, upper, first_c, second_c, signed, params.bad))
        start = (b * lay.padded[1] + r0) * np_
        chunk_codes = codes.reshape(-1, np_)[: r1 - r0]
        if codes_all is not None:
            codes_all[start : start + chunk_codes.size] = chunk_codes.reshape(-1)
            return
        chunk_packed = pack(chunk_codes, cod.bits)
        offset = start // codes_per_group(cod.bits) * per_bytes
        packed[offset : offset + chunk_packed.size] = chunk_packed

    run_tasks(tasks, one, lay.n_stored)
    if codes_all is not None:
        packed[...] = pack(codes_all, cod.bits)
    if pre is not None:
        scale_grid[...] = pre.scale
        if zero_grid is not None and pre.zero_point is not None:
            zero_grid[...] = pre.zero_point
        if min_grid is not None and pre.minimum is not None:
            min_grid[...] = pre.minimum
    diagnostics = diag.ScaleDiagnostics(lay.n_blocks, sum(floored), int(arr.size), sum(clipped))
    diag.warn(diagnostics, s, stacklevel=2)
    return QuantizedTensor(
        scheme=s,
        shape=tuple(arr.shape) or (1,),
        dtype=dtype_name,
        packed=packed,
        scale_values=scale_grid,
        zero_points=zero_grid,
        tensor_scale=tensor_scale,
        outlier_rows=rows_fp16,
        outlier_index=index,
        diagnostics=diagnostics,
        min_values=min_grid,
    )


def _count(mask: np.ndarray | None) -> int:
    return 0 if mask is None else int(np.count_nonzero(mask))


def _split_outliers(view: np.ndarray, k: int, work: type[np.floating]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep the k rows with the largest amax (ties: the lower row) out of the payload, in fp16.

    A row holding NaN or inf counts as the largest and is kept as is (fp16 stores both); a
    finite value that fp16 would overflow to inf is an error."""
    m = view.shape[1]
    if k >= m:
        raise ValueError(f"outliers={k} would keep every one of the {m} rows in fp16")
    row_amax = np.abs(view[0]).max(axis=1).astype(np.float64)
    row_amax = np.where(np.isnan(row_amax), np.inf, row_amax)
    order = np.argsort(-row_amax, kind="stable")
    index = np.sort(order[:k]).astype(np.int32)
    keep = np.ones(m, dtype=bool)
    keep[index] = False
    kept = view[0, index, :]
    with np.errstate(over="ignore"):
        rows_fp16 = kept.astype(np.float16)
    if (np.isinf(rows_fp16) & np.isfinite(kept)).any():
        raise ValueError(f"outliers={k}: a kept row holds values beyond fp16's range (max 65504), which fp16 would "
                         "store as inf; scale the tensor down or quantize without outliers=")
    rest = np.ascontiguousarray(view[:, keep, :]).astype(work, copy=False)
    return rest, rows_fp16, index


def quantize_dequantize(x: Any, scheme: str | Scheme) -> np.ndarray:
    """Fake quantization: dequantize(quantize(x, scheme)) in x's shape (float32)."""
    return quantize(x, scheme).dequantize()

