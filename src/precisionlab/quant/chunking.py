"""Chunks of whole block-rows for quantize and dequantize, run on the shared thread pool.

A tensor in the canonical layout (`quant.blocks`) is cut into tasks (batch, first padded row, end
padded row) of about CHUNK elements each, whole block rows, starting on a packing-group boundary
where that is possible (`aligned`); tensors of at least PARALLEL_MIN elements run on the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from precisionlab import parallel as thread_pool
from precisionlab.quant.blocks import Layout
from precisionlab.quant.packing import PACKABLE_BITS, group_size

CHUNK = 1 << 18
"""Target elements per chunk (1 MiB of float32)."""

PARALLEL_MIN = 1 << 20
"""Tensors at least this large are processed on a thread pool (numpy releases the GIL)."""

Task = tuple[int, int, int]  # (batch, first padded row, end padded row)


def codes_per_group(bits: int) -> int:
    """Codes in one packing group (`quant.packing.group_size`); 1 for a width that is not packed."""
    return group_size(bits)[0] if bits in PACKABLE_BITS else 1


def row_tasks(lay: Layout, bits: int) -> list[Task]:
    """Row ranges [r0, r1) per batch: whole block rows, about CHUNK elements, byte-aligned."""
    b_count, m, np_ = lay.padded
    br = lay.block[0]
    rows = max(1, CHUNK // np_)
    step = 1 if lay.whole_rows else br
    rows = max(step, rows // step * step)
    per = codes_per_group(bits)
    while (rows * np_) % per:
        rows += step
    return [(b, r0, min(r0 + rows, m)) for b in range(b_count) for r0 in range(0, m, rows)]


def run_tasks(tasks: list[Task], fn: Callable[[Task], Any], total: int) -> list[Any]:
    """fn over every task, in order; on the shared thread pool (`precisionlab.parallel`) when the tensor holds
    at least PARALLEL_MIN elements."""
    return thread_pool.map_tasks(fn, tasks, parallel=total >= PARALLEL_MIN)


def aligned(tasks: list[Task], lay: Layout, bits: int) -> bool:
    """True when every chunk starts on a packing-group boundary (so chunks pack independently)."""
    per = codes_per_group(bits)
    return all((b * lay.padded[1] + r0) * lay.padded[2] % per == 0 for b, r0, _ in tasks)
