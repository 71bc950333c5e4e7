"""A quantization scheme's grid seen one input column at a time (what GPTQ needs).

A linear weight W has shape (out, in) = (M, N); its scheme's blocks (`quant.blocks`) are
(br, bc) over that matrix. The N input columns fall into column groups of bc columns; a
group's parameters (one set per block of br rows) are *fitted* from the values the group holds
when the caller asks, then every column of the group is quantized with them, by the rule
`quant.quantize` uses for that scheme:

    the quant library's schemes (integers with a zero point or a float minimum, floats, nf4, MX, NVFP4)
        fit        stats of the group per row block: amax, or min / max, with the zeros quantize pads a
                   ragged last group (or a short last row block) with  -> `quant.core.choose_qparams`
        code       the codec's own rounding of the exact quotient: x / s, (x - m) / s for min=, rint(x / s) + z
                   for a zero point (`quant.elements.Codec.encode_quotient` / `encode_offset`); a block whose
                   span is zero under min= (or holding NaN) has zero codes, as quantize gives it
        value      fp32(value(code) * s); asym fp32((code - z) * s); min= fp32(fp32(code * s) + m)
    the one-level gguf presets (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1: llama.cpp's reference quantizers, `quant.ggml`)
        fit        per row and group of 32, in float32: d = amax / 127 (Q8_0), d = max / -8 or -16 (Q4_0,
                   Q5_0: max the element of largest magnitude), d = (max - min) / 15 or 31 and m = min
                   (Q4_1, Q5_1); stored fp16(d) and fp16(m); the codes use the float32 d and m, as the C does
        code       Q8_0 roundf(x * (1/d)); Q4_0 / Q5_0 trunc(x * (1/d) + 8.5 or 16.5) - 8 or 16; Q4_1 /
                   Q5_1 trunc((x - m) * (1/d) + 1/2), each clipped to the code range (the C code never meets
                   a value outside its block's range; a column moved by GPTQ's updates can, and is given the
                   nearest end of the grid)
        value      code * fp16(d); Q4_1 / Q5_1 fp32(fp32(code * fp16(d)) + fp16(m))

so a column quantized here is bit for bit what `quant.quantize` would produce for that column with those
parameters, and `result()` packs the codes into the `QuantizedTensor` a reader of the scheme expects.
With the unmodified weight and every group fitted from it, the result equals `quant.quantize(W, scheme)`
exactly (tests/test_ptq_support.py, over the whole scheme registry).

Per tensor and per row (bc >= N) there is one column group, fitted at column 0; NVFP4's fp32 tensor scale
is taken from the whole weight before anything is fitted. Schemes the sweep cannot reproduce are refused
with a ValueError (`ptq.support.columnwise_problem`: groups along another axis, outliers=, two-level
super-block scales), and so are tensors that are not 2-D and gguf rows that are not whole blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precisionlab.formats import IntFormat
from precisionlab.ptq.support import columnwise_problem
from precisionlab.quant import ggml
from precisionlab.quant import qparams as qp
from precisionlab.quant.blocks import layout
from precisionlab.quant.core import choose_qparams
from precisionlab.quant.elements import int_codes, make_codec
from precisionlab.quant.packing import pack
from precisionlab.quant.scheme import Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor, check_whole_blocks

F32 = np.float32
GGML_SIGNED = {"Q4_0": 8, "Q5_0": 16}
"""d = max / -half, codes trunc(x / d + half + 1/2) - half in -half .. half - 1."""
GGML_WITH_MIN = {"Q4_1": 15, "Q5_1": 31}
"""d = (max - min) / top, m = min, codes trunc((x - m) / d + 1/2) in 0 .. top."""
GGML_Q8_0 = 127
"""Q8_0: d = amax / 127, codes roundf(x / d) in -127 .. 127."""


@dataclass(frozen=True)
class GroupParams:
    """Parameters of one column group: per row block (stored) and expanded to one per row."""

    scale: np.ndarray
    """(row blocks,) float32: the stored scales."""
    zero_point: np.ndarray | None
    """(row blocks,) float32 integers, schemes with an integer zero point only."""
    divisor_rows: np.ndarray
    """(M,) float32: what each row's elements are divided by (the stored scale, times MXINT8's unit or
    NVFP4's tensor scale)."""
    zero_rows: np.ndarray | None
    """(M,) float32: each row's zero point."""
    minimum: np.ndarray | None = None
    """(row blocks,) float32: the stored float minimum (min=, Q4_1, Q5_1)."""
    min_rows: np.ndarray | None = None
    """(M,) float32: each row's float minimum."""
    zeroed_rows: np.ndarray | None = None
    """(M,) bool: rows whose codes are 0 whatever the value (a flat block under min=, as quantize has it)."""
    inverse_rows: np.ndarray | None = None
    """(M,) float32: 1 / d in float32, GGML types only (the codes use the unrounded d)."""
    low_rows: np.ndarray | None = None
    """(M,) float32: the unrounded float32 minimum, Q4_1 / Q5_1 only."""
    finite_rows: np.ndarray | None = None
    """(M,) bool: rows whose d and 1/d are finite, GGML types only (C's cast elsewhere gives code 0)."""


def check_columnwise(scheme: str | Scheme, shape: tuple[int, ...], method: str = "GPTQ") -> Scheme:
    """The parsed scheme, or ValueError when a column-by-column method cannot use it on this shape."""
    s = parse_scheme(scheme)
    if len(shape) != 2:
        raise ValueError(f"{method} quantizes 2-D linear weights (out, in); got shape {tuple(shape)}")
    problem = columnwise_problem(s)
    if problem:
        raise ValueError(f"{method} does not apply to scheme {s}: {problem}")
    check_whole_blocks(s, int(shape[1]))
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
        self.ggml = self.scheme.ggml
        self.tensor_scale: float | None = None
        if self.scheme.tensor_scale:
            if tensor_amax is None:
                raise ValueError(f"scheme {self.scheme} has a tensor scale: pass the weight's finite amax")
            self.tensor_scale = qp.nvfp4_tensor_scale(float(tensor_amax))
        self._values = self.codec.values()
        self._scales = np.zeros((1, self.n_row_blocks, self.n_groups), dtype=np.float32)
        self._zeros = np.zeros_like(self._scales) if self.scheme.has_zero_point else None
        has_min = self.scheme.has_min or self.ggml in GGML_WITH_MIN
        self._mins = np.zeros_like(self._scales) if has_min else None
        self._params: list[GroupParams | None] = [None] * self.n_groups
        self._codes = np.zeros((m, self.layout.padded[2]), dtype=np.uint8)
        # quantize's statistics see zeros where it pads: a ragged last column group, a short last row block
        self._pads_last_group = self.layout.padded[2] > n
        self._pads_last_rows = not self.layout.whole_rows and m % self.block_rows != 0

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
        """Fit group `group`'s parameters from the (M, w) values its columns hold now (the scheme's own rule)."""
        c0, c1 = self.group_columns(group)
        if values.shape != (self.shape[0], c1 - c0):
            raise ValueError(f"group {group} holds columns {c0}..{c1 - 1}: expected values of shape "
                             f"{(self.shape[0], c1 - c0)}, got {values.shape}")
        params = self._fit_ggml(values) if self.ggml is not None else self._fit_library(group, values)
        self._scales[0, :, group] = params.scale
        if self._zeros is not None and params.zero_point is not None:
            self._zeros[0, :, group] = params.zero_point
        if self._mins is not None and params.minimum is not None:
            self._mins[0, :, group] = params.minimum
        self._params[group] = params
        return params

    def _fit_library(self, group: int, values: np.ndarray) -> GroupParams:
        padded = self._pads_last_group and group == self.n_groups - 1
        if self.scheme.symmetric:
            first = np.maximum.reduceat(np.abs(values).max(axis=1), self._starts)
            second = np.empty(0)
        else:
            first = np.minimum.reduceat(values.min(axis=1), self._starts)
            second = np.maximum.reduceat(values.max(axis=1), self._starts)
            if padded:
                first, second = np.minimum(first, 0.0), np.maximum(second, 0.0)
            elif self._pads_last_rows:
                first[-1], second[-1] = min(first[-1], 0.0), max(second[-1], 0.0)
        q = choose_qparams(first, second, self.scheme, self.codec, self.tensor_scale)
        if q.bad is not None:
            raise ValueError(f"column group {group} holds NaN or inf")
        zero = None if q.zero_point is None else q.zero_point.astype(np.float32)
        minimum = None if q.minimum is None else q.minimum.astype(np.float32)
        rows = self.row_block
        return GroupParams(q.scale.astype(np.float32), zero, q.divisor.astype(np.float32)[rows],
                           None if zero is None else zero[rows], minimum, None if minimum is None else minimum[rows],
                           None if q.flat is None else q.flat[rows])

    def _fit_ggml(self, values: np.ndarray) -> GroupParams:
        """llama.cpp's block fit of the group's rows (module docstring), in float32 (blocks are single rows)."""
        kind = self.ggml
        x = np.asarray(values, dtype=F32)
        low = None
        with np.errstate(over="ignore"):
            if kind in GGML_WITH_MIN:
                low = x.min(axis=1)
                d = (x.max(axis=1) - low) / F32(GGML_WITH_MIN[kind])
            elif kind in GGML_SIGNED:
                d = ggml.first_largest_magnitude(x) / F32(-GGML_SIGNED[kind])
            else:
                d = np.abs(x).max(axis=1) / F32(GGML_Q8_0)
        inverse = ggml.reciprocal(d)
        finite = np.isfinite(inverse) & np.isfinite(d) if low is not None else np.isfinite(inverse)
        stored = ggml.fp16(d)
        minimum = None if low is None else ggml.fp16(low)
        return GroupParams(stored, None, stored, None, minimum, minimum, None, inverse, low, finite)

    # ------------------------------------------------------------------ columns
    def encode(self, values: np.ndarray, params: GroupParams) -> np.ndarray:
        """Element codes of one column (M,) under a group's parameters."""
        if self.ggml is not None:
            return self._encode_ggml(values, params)
        if params.min_rows is not None:
            codes = self.codec.encode_offset(values, params.divisor_rows, params.min_rows)
        else:
            codes = self.codec.encode_quotient(values, params.divisor_rows, params.zero_rows)
        if params.zeroed_rows is not None and params.zeroed_rows.any():
            codes = np.where(params.zeroed_rows, np.uint8(0), codes)
        return codes

    def _encode_ggml(self, values: np.ndarray, p: GroupParams) -> np.ndarray:
        assert p.inverse_rows is not None and p.finite_rows is not None
        kind = self.ggml
        x = np.asarray(values, dtype=F32)
        inverse, finite = p.inverse_rows, p.finite_rows
        with np.errstate(invalid="ignore", over="ignore"):
            if kind in GGML_WITH_MIN:
                assert p.low_rows is not None
                top = GGML_WITH_MIN[kind]
                q = np.clip(ggml.c_cast((x - p.low_rows) * inverse + F32(0.5), finite), 0, top)
            elif kind in GGML_SIGNED:
                half = GGML_SIGNED[kind]
                q = np.clip(ggml.c_cast(x * inverse + F32(half + 0.5), finite), 0, 2 * half - 1) - half
            else:
                q = np.clip(ggml.c_cast(ggml.roundf(x * inverse), finite), -GGML_Q8_0, GGML_Q8_0)
        fmt = self.codec.fmt
        assert isinstance(fmt, IntFormat)
        return int_codes(q, fmt)

    def decode(self, codes: np.ndarray, params: GroupParams) -> np.ndarray:
        """What dequantize gives for the codes (float32): fp32(value * s), asym fp32((code - z) * s), with a
        float minimum fp32(fp32(code * s) + m)."""
        vals = np.take(self._values, codes)
        if params.zero_rows is not None:
            vals = vals - params.zero_rows
        out = vals * params.divisor_rows
        if params.min_rows is not None:
            out += params.min_rows
        return out

    def quantize_column(self, column: int, values: np.ndarray, params: GroupParams | None = None) -> np.ndarray:
        """Quantize input column `column` (values (M,)), record its codes, return its dequantized values (float32)."""
        p = self.params(self.group_of(column)) if params is None else params
        codes = self.encode(values, p)
        self._codes[:, column] = codes
        return self.decode(codes, p)

    # ------------------------------------------------------------------ result
    def result(self) -> QuantizedTensor:
        """The QuantizedTensor of every recorded code and fitted parameter (padding encoded as zeros, as
        quantize does)."""
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
            min_values=None if self._mins is None else self._mins.copy(),
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
