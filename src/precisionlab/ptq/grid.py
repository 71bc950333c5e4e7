"""A quantization scheme's grid seen one input column at a time (what GPTQ needs).

A linear weight W has shape (out, in) = (M, N); its scheme's blocks (`quant.blocks`) are
(br, bc) over that matrix. The N input columns fall into column groups of bc columns; a
group's scales (one per block of br rows) are *fitted* from the values the group holds when
the caller asks, then every column of the group is quantized with those scales:

    fit group k        stats of W[:, k*bc : (k+1)*bc] per row block (amax, or min / max)
                       -> the quant library's own scale rule (`quant.core.choose_qparams`)
    quantize column j  v = w_j / s,  code = the scheme's element code of v (`quant.elements`)
                       x_hat = fp32(value(code) * s)        asym: fp32((code - z) * s)

so a column quantized here is bit for bit what `quant.quantize` would produce for that column
with those scales, and `result()` packs the codes into the `QuantizedTensor` a reader of the
scheme expects. With the unmodified weight and every group fitted from it, the result equals
`quant.quantize(W, scheme)` exactly (tested on every scheme family).

Per tensor and per row (bc >= N) there is one column group, fitted at column 0; NVFP4's
fp32 tensor scale is taken from the whole weight before anything is fitted. Schemes that do
not apply, with a ValueError: axis= other than the input axis, outliers= (whole rows kept in
fp16), and tensors that are not 2-D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionlab.quant import qparams as qp
from precisionlab.quant.blocks import layout
from precisionlab.quant.core import choose_qparams
from precisionlab.quant.elements import make_codec
from precisionlab.quant.packing import pack
from precisionlab.quant.scheme import Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor


@dataclass(frozen=True)
class GroupParams:
    """Scales of one column group: per row block (stored) and expanded to one per row."""

    scale: np.ndarray
    """(row blocks,) float32: the stored scales."""
    zero_point: np.ndarray | None
    """(row blocks,) float32 integers, asymmetric schemes only."""
    divisor_rows: np.ndarray
    """(M,) float32: what each row's elements are divided by."""
    zero_rows: np.ndarray | None
    """(M,) float32: each row's zero point."""


def check_columnwise(scheme: str | Scheme, shape: tuple[int, ...], method: str = "GPTQ") -> Scheme:
    """The parsed scheme, or ValueError when a column-by-column method cannot use it on this shape."""
    s = parse_scheme(scheme)
    if len(shape) != 2:
        raise ValueError(f"{method} quantizes 2-D linear weights (out, in); got shape {tuple(shape)}")
    if s.axis not in (-1, 1):
        raise ValueError(f"{method} does not apply to scheme {s}: its groups run along axis {s.axis}, but {method} "
                         "sweeps the input columns (axis -1); drop axis=")
    if s.outliers:
        raise ValueError(f"{method} does not apply to scheme {s}: outliers= keeps whole rows in fp16 outside the "
                         "grid; quantize without outliers= (or keep those layers unquantized)")
    return s


class ColumnGrid:
    """The grid of `scheme` over an (M, N) weight, fitted group by group (see the module docstring)."""

    def __init__(self, scheme: str | Scheme, shape: tuple[int, int], tensor_amax: float | None = None,
                 dtype_name: str = "float32") -> None:
        self.scheme = check_columnwise(scheme, shape)
        self.shape = (int(shape[0]), int(shape[1]))
        m, n = self.shape
        self.codec = make_codec(self.scheme)
        self.layout = layout((1, m, n), self.scheme)
        br, bc = self.layout.block
        self.block_rows = min(br, m)
        self.block_cols = bc
        self.n_groups = self.layout.grid[2]
        self.n_row_blocks = self.layout.grid[1]
        self.row_block = np.arange(m) // self.block_rows
        self._starts = np.arange(0, m, self.block_rows)
        self.dtype_name = dtype_name
        self.tensor_scale: float | None = None
        if self.scheme.tensor_scale:
            if tensor_amax is None:
                raise ValueError(f"scheme {self.scheme} has a tensor scale: pass the weight's finite amax")
            self.tensor_scale = qp.nvfp4_tensor_scale(float(tensor_amax))
        self._values = self.codec.values()
        self._scales = np.zeros((1, self.n_row_blocks, self.n_groups), dtype=np.float32)
        self._zeros = None if self.scheme.symmetric else np.zeros_like(self._scales)
        self._params: list[GroupParams | None] = [None] * self.n_groups
        self._codes = np.zeros((m, self.layout.padded[2]), dtype=np.uint8)

    # ------------------------------------------------------------------ groups
    def group_of(self, column: int) -> int:
        return column // self.block_cols

    def group_columns(self, group: int) -> tuple[int, int]:
        """Columns [c0, c1) of a column group (the last one may be shorter: its padding is stored as zeros)."""
        c0 = group * self.block_cols
        return c0, min(c0 + self.block_cols, self.shape[1])

    def params(self, group: int) -> GroupParams:
        p = self._params[group]
        if p is None:
            raise ValueError(f"column group {group} has not been fitted")
        return p

    def fit(self, group: int, values: np.ndarray) -> GroupParams:
        """Fit group `group`'s scales from the (M, w) values its columns hold now (the library's scale rule)."""
        c0, c1 = self.group_columns(group)
        if values.shape != (self.shape[0], c1 - c0):
            raise ValueError(f"group {group} holds columns {c0}..{c1 - 1}: expected values of shape "
                             f"{(self.shape[0], c1 - c0)}, got {values.shape}")
        if self.scheme.symmetric:
            first = np.maximum.reduceat(np.abs(values).max(axis=1), self._starts)
            second = np.empty(0)
        else:
            first = np.minimum.reduceat(values.min(axis=1), self._starts)
            second = np.maximum.reduceat(values.max(axis=1), self._starts)
        q = choose_qparams(first, second, self.scheme, self.codec, self.tensor_scale)
        if q.bad is not None:
            raise ValueError(f"column group {group} holds NaN or inf")
        zero = None if q.zero_point is None else q.zero_point.astype(np.float32)
        params = GroupParams(q.scale.astype(np.float32), zero, q.divisor.astype(np.float32)[self.row_block],
                             None if zero is None else zero[self.row_block])
        self._scales[0, :, group] = params.scale
        if self._zeros is not None and zero is not None:
            self._zeros[0, :, group] = zero
        self._params[group] = params
        return params

    # ------------------------------------------------------------------ columns
    def encode(self, values: np.ndarray, params: GroupParams) -> np.ndarray:
        """Element codes of one column (M,) under a group's scales."""
        v = values / params.divisor_rows.astype(values.dtype)
        if params.zero_rows is not None:
            return self.codec.encode_affine(v, params.zero_rows)
        return self.codec.encode_symmetric(v)

    def decode(self, codes: np.ndarray, params: GroupParams) -> np.ndarray:
        """fp32(value(code) * s), asym fp32((code - z) * s): what dequantize gives (float32)."""
        vals = np.take(self._values, codes)
        if params.zero_rows is not None:
            vals = vals - params.zero_rows
        return vals * params.divisor_rows

    def quantize_column(self, column: int, values: np.ndarray, params: GroupParams | None = None) -> np.ndarray:
        """Quantize input column `column` (values (M,)), record its codes, return its dequantized values (float32)."""
        p = self.params(self.group_of(column)) if params is None else params
        codes = self.encode(values, p)
        self._codes[:, column] = codes
        return self.decode(codes, p)

    # ------------------------------------------------------------------ result
    def result(self) -> QuantizedTensor:
        """The QuantizedTensor of every recorded code and fitted scale (padding encoded as zeros, as quantize does)."""
        missing = [k for k, p in enumerate(self._params) if p is None]
        if missing:
            raise ValueError(f"column groups {missing[:5]} were never fitted")
        n, np_ = self.shape[1], self.layout.padded[2]
        if np_ > n:
            last = self.params(self.n_groups - 1)
            pad = self.encode(np.zeros(self.shape[0], dtype=np.float32), last)
            self._codes[:, n:] = pad[:, None]
        return QuantizedTensor(
            scheme=self.scheme,
            shape=self.shape,
            dtype=self.dtype_name,
            packed=pack(self._codes, self.codec.bits),
            scale_values=self._scales.copy(),
            zero_points=None if self._zeros is None else self._zeros.copy(),
            tensor_scale=self.tensor_scale,
        )

    @property
    def codes(self) -> np.ndarray:
        """(M, Np) uint8 codes recorded so far."""
        return self._codes


def finite_amax(weight: np.ndarray) -> float:
    """Largest finite |w| (0 for an all-zero weight)."""
    a = np.abs(weight)
    top = float(a.max()) if a.size else 0.0
    if not math.isfinite(top):
        finite = a[np.isfinite(a)]
        top = float(finite.max()) if finite.size else 0.0
    return top
