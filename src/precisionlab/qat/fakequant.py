"""Fake quantization of a weight on a scheme's exact integer grid, with a straight-through gradient.

    grid = LayerGrid.of(quantize(W, "int4:g64"))      # the grid of a stored weight: its scales, zero points
    W_hat = fake_quantize(W_latent, grid)             # torch, differentiable (straight-through)
    q = grid.quantized(W_latent)                      # the QuantizedTensor whose dequantize() is W_hat, bit for bit

The grid's scales (and zero points) are fixed: those of the starting point (round-to-nearest of the float
weight under the scheme's own rule, or a saved GPTQ / AWQ result's stored scales). Training moves the latent
weights (`parametrization`: an offset from the start in grid steps, so the learning rate is a fraction of each
element's own step); each element's code is one rounding of the exact quotient, as `quant.quantize` computes it:

    symmetric     code = clip(rint(w / s), -qmax, qmax)       (int_range=full / full_neg: down to qmin)
    zero point    code = clip(rint(w / s) + z, qmin, qmax)
    value         fp32((code - z) * s)                         (z = 0 when symmetric)

in float64: w / s is correctly rounded and cannot land on a tie it is not on (quant.elements.ONE_ROUNDING), and
(code - z) * s is exact in float64, so its cast to float32 is the one rounding `dequantize` makes.

Why fixed scales rather than scales recomputed from the current weight each step, or learned (LSQ):
- the starting point is reproduced exactly: at step 0 the fake-quantized model is the RTN / GPTQ / AWQ model
  bit for bit (GPTQ's codes under GPTQ's scales), so every gain is measured against it;
- a recomputed scale follows each group's largest weight, so one moving outlier rescales its whole group
  (and re-quantizing a GPTQ result's values with RTN's rule is not that result);
- a learned scale doubles the parameters with their own gradient estimator and learning rate; the latent
  weights already reach every point of the fixed grid.
The stored codes are then the trained weights' codes under the starting scales: `quantized()` packs them with
those scales into the scheme's QuantizedTensor, which every reader and exporter takes.

Gradient (straight-through, Jacob et al. 2018): d W_hat / d w = 1 where w lies within the grid's range (half a
step beyond its end codes included), 0 beyond it, where the code is clipped and no small move changes it.

Schemes: integer elements with a scale per tensor, row or group along the input features (int2 .. int8,
symmetric or with a zero point, any scale format). Float elements, codebooks (nf4), MX, NVFP4, GGUF presets,
float minimums (min=) and outliers= are refused (`check_scheme`): their grids are not one integer rint.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from precisionlab.formats import IntFormat
from precisionlab.quant.blocks import layout
from precisionlab.quant.elements import int_codes, make_codec
from precisionlab.quant.packing import pack
from precisionlab.quant.scheme import Granularity, Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor

GRANULARITIES = (Granularity.TENSOR, Granularity.ROW, Granularity.GROUP)


def check_scheme(scheme: str | Scheme) -> Scheme:
    """The parsed scheme, or ValueError (one line) when quantization-aware training here cannot use its grid."""
    s = parse_scheme(scheme)
    codec = make_codec(s)
    why = ""
    if not isinstance(codec.fmt, IntFormat):
        why = f"its elements are {codec.fmt.name}, not integers"
    elif s.is_mx or s.ggml is not None or s.tensor_scale or s.has_min:
        why = "its scales are not one stored scale per block (MX, GGUF, NVFP4 or min=)"
    elif s.outliers:
        why = "outliers= keeps whole rows outside the grid"
    elif s.granularity not in GRANULARITIES or s.axis not in (-1, 1):
        why = "its blocks are not a tensor, a row or groups along the input features"
    if why:
        raise ValueError(f"qat trains on integer grids (int2 .. int8 per tensor, row or group, e.g. int4:g64); "
                         f"scheme {s} does not fit: {why}")
    return s


@dataclass(frozen=True)
class LayerGrid:
    """The fixed grid of one (M, N) weight: per-element divisor and zero point, and the code bounds."""

    scheme: Scheme
    shape: tuple[int, int]
    scale_values: np.ndarray
    """The stored scales, (1, row blocks, column groups) float32, as in the QuantizedTensor."""
    zero_points: np.ndarray | None
    low: float
    high: float
    """The code bounds (value units): [-qmax, qmax] symmetric (narrow), [qmin, qmax] with a zero point."""
    dtype: str = "float32"

    @classmethod
    def of(cls, q: QuantizedTensor) -> LayerGrid:
        """The grid of a stored 2-D weight (its scheme checked by `check_scheme`)."""
        s = check_scheme(q.scheme)
        if len(q.shape) != 2:
            raise ValueError(f"qat trains 2-D linear weights, got shape {tuple(q.shape)}")
        codec = make_codec(s)
        fmt = codec.fmt
        assert isinstance(fmt, IntFormat)
        if s.has_zero_point:
            low, high = float(fmt.min_value), float(fmt.max_value)
        else:
            low, high = float(codec.symmetric_min), float(fmt.symmetric_max)
        zeros = None if q.zero_points is None else np.asarray(q.zero_points, dtype=np.float32)
        return cls(s, (int(q.shape[0]), int(q.shape[1])), np.asarray(q.scale_values, dtype=np.float32), zeros,
                   low, high, q.dtype)

    # -- per element, as torch tensors (float64)
    def expanded(self, torch: Any) -> tuple[Any, Any | None]:
        """(divisor, zero point) per element of the (M, N) weight, float64 (zero point None when symmetric)."""
        m, n = self.shape
        lay = layout((1, m, n), self.scheme)
        br, bc = lay.block

        def spread(grid: np.ndarray) -> Any:
            t = torch.from_numpy(np.ascontiguousarray(grid[0], dtype=np.float64))
            t = t.repeat_interleave(min(br, m), dim=0)[:m]
            return t.repeat_interleave(bc, dim=1)[:, :n].contiguous()

        return spread(self.scale_values), None if self.zero_points is None else spread(self.zero_points)

    def codes(self, weight: Any, divisor: Any, zero: Any | None) -> Any:
        """Integer code values (float64 tensor) of `weight` on the grid, and the in-range mask of the STE."""
        v = weight.detach().double() / divisor
        if zero is not None:
            v = v + zero
        inside = (v >= self.low - 0.5) & (v <= self.high + 0.5)
        return v.round().clamp_(self.low, self.high).add_(0.0), inside  # + 0.0: code 0 is +0, never -0

    def quantized(self, weight: Any) -> QuantizedTensor:
        """The QuantizedTensor of `weight`'s codes under this grid's scales: its dequantize() equals
        `fake_quantize(weight, self)` bit for bit."""
        import torch

        divisor, zero = self.expanded(torch)
        q, _ = self.codes(weight, divisor, zero)
        m, n = self.shape
        lay = layout((1, m, n), self.scheme)
        codec = make_codec(self.scheme)
        fmt = codec.fmt
        assert isinstance(fmt, IntFormat)
        values = np.zeros((m, lay.padded[2]), dtype=np.float64)
        values[:, :n] = q.numpy()
        if lay.padded[2] > n and self.zero_points is not None:  # padding zeros encode as the zero point
            values[:, n:] = divisor_pad(self.zero_points, lay, m)
        return QuantizedTensor(scheme=self.scheme, shape=self.shape, dtype=self.dtype,
                               packed=pack(int_codes(values, fmt), codec.bits), scale_values=self.scale_values.copy(),
                               zero_points=None if self.zero_points is None else self.zero_points.copy())


def divisor_pad(zero_points: np.ndarray, lay: Any, m: int) -> np.ndarray:
    """The code of a padded zero in the last column group: its zero point, per row."""
    br = min(lay.block[0], m)
    last = np.repeat(zero_points[0, :, -1], br)[:m]
    return np.broadcast_to(last[:, None], (m, lay.padded[2] - lay.view[2]))


def fake_quantize(weight: Any, grid: LayerGrid, expanded: tuple[Any, Any | None] | None = None) -> Any:
    """The grid's values of `weight` (its dtype), with the straight-through gradient (module docstring).
    `expanded`: grid.expanded(torch), computed once by a caller that calls this every step."""
    import torch

    divisor, zero = expanded if expanded is not None else grid.expanded(torch)
    return _function().apply(weight, grid, divisor, zero)


@lru_cache(maxsize=1)
def _function() -> Any:
    import torch

    class FakeQuantize(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, weight: Any, grid: LayerGrid, divisor: Any, zero: Any) -> Any:
            q, inside = grid.codes(weight, divisor, zero)
            if zero is not None:
                q = q - zero
            ctx.save_for_backward(inside)
            return (q * divisor).to(torch.float32).to(weight.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (inside,) = ctx.saved_tensors
            return grad * inside.to(grad.dtype), None, None, None

    return FakeQuantize


def parametrization(grid: LayerGrid, reference: Any, start: Any | None = None) -> Any:
    """A torch parametrization module whose trained parameter is the offset of the latent weight from `start` (default:
    `reference`), in grid steps: latent = start + offset * divisor (float64), weight = fake_quantize(latent, grid).
    With `.use_reference = True` it gives `reference` (the float weight, for the distillation teacher) instead.

    Why the offset in grid steps: Adam moves every parameter by about its learning rate per update, whatever the
    size of the gradient; on the latent weight itself that is `lr` in weight units, which is a different fraction of
    a grid step in every group, layer, scheme and model (SmolLM2's int4:g64 steps are 0.05-0.10, int8:row ones 16x
    smaller, a tiny random model's 100x smaller), and a too large fraction flips codes on gradient noise (the
    training loss then rises: docs/qat.md, "Why the loss rose"). On the offset, `lr` is the fraction of the
    element's own grid step, the same for every element. At offset 0 the latent is `start` exactly, so step 0 is the
    start's model bit for bit."""
    import torch

    class FakeQuantWeight(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.grid = grid
            self.expanded = grid.expanded(torch)
            self.register_buffer("reference", reference.detach().clone(), persistent=False)
            origin = reference if start is None else torch.as_tensor(start)
            self.register_buffer("start", origin.detach().to(reference.dtype).clone(), persistent=False)
            self.use_reference = False

        def latent(self, offset: Any) -> Any:
            """The float64 latent weight of an offset (in grid steps)."""
            return self.start.to(torch.float64) + offset.to(torch.float64) * self.expanded[0]

        def forward(self, offset: Any) -> Any:
            if self.use_reference:
                return self.reference
            values = fake_quantize(self.latent(offset), self.grid, self.expanded)
            return values.to(self.reference.dtype)

    return FakeQuantWeight()
