"""dequantize: x_hat = fp32(value(q) * s) per element (asym: fp32((q - z) * s); min=: fp32(fp32(q * s) + m)).

Runs over the same chunks as quantize (`quant.chunking`). It reads a quantized tensor's stored fields
through `quant.stored.StoredTensor` only, so `quant.tensor.QuantizedTensor` can call it without an import
circle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.quant.blocks import canonical_view, from_view
from precisionlab.quant.chunking import Task, aligned, codes_per_group, row_tasks, run_tasks
from precisionlab.quant.elements import make_codec, pair_table
from precisionlab.quant.packing import packed_nbytes, unpack
from precisionlab.quant.stored import StoredTensor


def dequantize(q: StoredTensor, dtype: Any = np.float32) -> np.ndarray:
    """x_hat = fp32(value(code) * divisor) per element (asym: (q - z) * s; min=: fp32(fp32(q * s) + m)), in q's
    original shape."""
    s = q.scheme
    cod = make_codec(s)
    lay = q.layout
    axis, moved, full_view = canonical_view(q.shape, s)
    divisor = q.divisors()
    values = cod.values()
    pairs = pair_table(cod.fmt) if cod.bits == 4 else None
    out = np.empty(lay.view, dtype=np.float32)
    np_ = lay.padded[2]
    n = lay.view[2]
    per_bytes = packed_nbytes(1, cod.bits)
    tasks = row_tasks(lay, cod.bits)
    codes_all = None if aligned(tasks, lay, cod.bits) else unpack(q.packed, cod.bits, lay.n_stored)

    def one(task: Task) -> None:
        b, r0, r1 = task
        count = (r1 - r0) * np_
        start = (b * lay.padded[1] + r0) * np_
        if codes_all is not None:
            vals = np.take(values, codes_all[start : start + count]).reshape(r1 - r0, np_)
        else:
            offset = start // codes_per_group(cod.bits) * per_bytes
            raw = q.packed[offset : offset + packed_nbytes(count, cod.bits)]
            if pairs is not None and count % 2 == 0:
                vals = np.take(pairs, raw).view(np.float32).reshape(r1 - r0, np_)
            else:
                vals = np.take(values, unpack(raw, cod.bits, count)).reshape(r1 - r0, np_)
        rows = r1 - r0
        if lay.whole_rows:
            sel = divisor[b, 0:1][:, None, :, None], (None if q.zero_points is None else q.zero_points[b, 0:1])
            blocks = vals.reshape(1, rows, np_ // lay.block[1], lay.block[1])
            zero = sel[1]
            mult = sel[0]
            block_min = None if q.min_values is None else q.min_values[b, 0:1]
        else:
            br = lay.block[0]
            row_block = np.arange(r0, r1) // br  # the block row of each row
            mult = divisor[b][row_block][:, None, :, None]
            zero = None if q.zero_points is None else q.zero_points[b][row_block]
            block_min = None if q.min_values is None else q.min_values[b][row_block]
            blocks = vals.reshape(rows, 1, np_ // lay.block[1], lay.block[1])
        if zero is not None:
            blocks = blocks - zero[:, None, :, None]
        if block_min is not None:  # fp32(fp32(q * s) + m)
            result = blocks * mult
            result += block_min[:, None, :, None]
            out[b, r0:r1, :] = result.reshape(rows, np_)[:, :n]
        elif np_ == n:
            np.multiply(blocks, mult, out=out[b, r0:r1, :].reshape(blocks.shape))
        else:
            out[b, r0:r1, :] = (blocks * mult).reshape(rows, np_)[:, :n]

    run_tasks(tasks, one, lay.n_stored)
    if q.outlier_index is not None and q.outlier_rows is not None:
        full = np.empty(full_view, dtype=np.float32)
        keep = np.ones(full_view[1], dtype=bool)
        keep[q.outlier_index] = False
        full[0, keep, :] = out[0]
        full[0, q.outlier_index, :] = q.outlier_rows.astype(np.float32)
        out = full
    result = from_view(out, axis, moved).reshape(q.shape)
    return np.ascontiguousarray(result, dtype=dtype)
