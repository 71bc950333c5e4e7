"""Granularity lowered to one block shape over a canonical 3-D view of the tensor.

The scheme's axis is moved last; the tensor is then seen as (B, M, N):

    granularity     view (B, M, N)                      block (br, bc)
    tensor          (1, prod(leading), N)               (M, N)
    row             (1, prod(leading), N)               (1, N)
    col             (1, prod(leading), N)               (M, 1)
    g<G>, tile1x<G> (1, prod(leading), N)               (1, G)
    block<R>x<C>    (prod(dims before the last 2), M, N) (R, C)

A row length N that the block width does not divide is padded with zeros up to the
next multiple: padded elements are stored and counted in the bytes. Rows are not
padded: when br does not divide M the last block row is shorter (rows are stored
independently, so nothing is gained by storing zero rows). Scales form the block grid
(B, ceil(M/br), Np/bc).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionlab.quant.scheme import Granularity, Scheme


@dataclass(frozen=True)
class Layout:
    """Where the elements and scales of a (B, M, N) view live for one scheme."""

    view: tuple[int, int, int]
    """(B, M, N) before padding."""
    block: tuple[int, int]
    """(rows, columns) of one block."""
    padded: tuple[int, int, int]
    """(B, M, Np): the stored code array (rows are never padded)."""

    @property
    def grid(self) -> tuple[int, int, int]:
        """Number of blocks along (B, M, N): the scale array's shape."""
        b, m, np_ = self.padded
        return b, -(-m // self.block[0]), np_ // self.block[1]

    @property
    def n_blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def n_stored(self) -> int:
        """Elements stored, padding included."""
        return math.prod(self.padded)

    @property
    def is_padded(self) -> bool:
        return self.padded != self.view

    @property
    def whole_rows(self) -> bool:
        """True when one block spans every row (per tensor, per column, or R >= M)."""
        return self.block[0] >= self.padded[1]


def canonical_view(shape: tuple[int, ...], scheme: Scheme) -> tuple[int, tuple[int, ...], tuple[int, int, int]]:
    """(axis, shape with the axis moved last, (B, M, N) view) of a tensor shape under a scheme."""
    shape_nd = tuple(int(d) for d in shape) or (1,)
    if any(d == 0 for d in shape_nd):
        raise ValueError(f"cannot quantize an empty tensor of shape {tuple(shape)}")
    ndim = len(shape_nd)
    if not -ndim <= scheme.axis < ndim:
        raise ValueError(f"axis={scheme.axis} is out of range for a {ndim}-D tensor of shape {tuple(shape)}")
    axis = scheme.axis % ndim
    dims = list(shape_nd)
    last = dims.pop(axis)
    moved = (*dims, last)
    if scheme.granularity is Granularity.BLOCK:
        if len(moved) < 2:
            raise ValueError(f"block{scheme.block_rows}x{scheme.group} needs at least a 2-D tensor, got shape "
                             f"{tuple(shape)}")
        return axis, moved, (math.prod(moved[:-2]), moved[-2], last)
    return axis, moved, (1, math.prod(moved[:-1]), last)


def layout(view: tuple[int, int, int], scheme: Scheme) -> Layout:
    """Lower the scheme's granularity to one block shape over a (B, M, N) view."""
    _, m, n = view
    g = scheme.granularity
    block = {
        Granularity.TENSOR: (m, n),
        Granularity.ROW: (1, n),
        Granularity.COL: (m, 1),
        Granularity.GROUP: (1, scheme.group),
        Granularity.TILE: (1, scheme.group),
        Granularity.BLOCK: (scheme.block_rows, scheme.group),
    }[g]
    padded = (view[0], m, _round_up(n, block[1]))
    return Layout(view, block, padded)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def to_view(x: np.ndarray, axis: int, view: tuple[int, int, int]) -> np.ndarray:
    """The (B, M, N) view of x (no copy when the axis is already last and x is contiguous)."""
    return np.moveaxis(x, axis, -1).reshape(view) if x.ndim else x.reshape(view)


def from_view(v: np.ndarray, axis: int, moved: tuple[int, ...]) -> np.ndarray:
    """Inverse of to_view: back to the input's axis order."""
    return np.moveaxis(v.reshape(moved), -1, axis)

