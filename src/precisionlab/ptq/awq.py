"""AWQ (Lin et al., 2024): activation-aware per-input-channel scales, searched on a grid, then an
optional clipping search; the scales fold into the op before the layers, so only the rounding
changes.

For the layers W_1..W_k that read one input X (N channels):

    x_bar = mean |x| per channel,  w_bar = mean over output rows of |w| / amax(|w| of its quant block)
    alpha in {0, 1/20, ..., 19/20}:
        s = x_bar^alpha / (w_bar^(1-alpha) + 1e-4)      (duo scaling; plain: s = x_bar^alpha)
        s = max(s, 1e-4);  s = s / sqrt(max(s) * min(s))
        loss(s) = || block(Q(W_i diag(s)) diag(1/s)) - block(W_i) ||^2   on calibration inputs
    the alpha with the least loss wins; s = 1 (plain round-to-nearest) is always a candidate,
    so AWQ is never worse than RTN on the objective it measures. The reference's objective is the
block output; a scale shared by q/k/v can lower the attention's error while raising one
layer's own. The guard (on by default) admits a grid point only when each layer's own output
error is no larger than RTN's over the calibration tokens, so no layer ends up worse than RTN
on the data it was fitted to.

`block` is the module whose output judges a scale (the attention for q/k/v, the MLP for
gate/up: the reference implementation's choice) or, for a single following linear, that
layer's own output, measured exactly over every calibration token from X^T X.

Clipping (optional, after scaling): for each row and quant group, the clip value
c = amax * (1 - i/20), i = 0..9, that minimises the group's share of the output error
(d^T S_gg d over the calibration tokens, d the group's weight error against the unclipped
weight); skipped for q_proj / k_proj (as the reference does: their error passes through the
softmax). Needs single-row quant blocks (row, g<N>, tile, MX, NVFP4). The per-group objective
leaves out the cross-group terms of the error, so a clipped weight is kept only when the
layer's whole output error (d^T S d) is lower than without clipping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.peers import as_numpy
from precisionlab.ptq.activations import InputStatistics, LayerOutputError, squared_error
from precisionlab.quant import quantize
from precisionlab.quant.blocks import layout
from precisionlab.quant.scheme import Granularity, Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor

N_GRID = 20
CLIP_GRID = 20
MAX_SHRINK = 0.5
SCALE_FLOOR = 1e-4


@dataclass
class ScaleSearch:
    """The outcome of one group's scale search."""

    alpha: float | None
    """The winning alpha, or None when plain RTN (s = 1) won."""
    scales: np.ndarray
    """(N,) float64: the per-input-channel scales (all ones when alpha is None)."""
    loss: float
    identity_loss: float
    """The objective at s = 1 (RTN)."""
    losses: list[tuple[float, float]] = field(default_factory=list)
    """(alpha, loss) of every grid point."""


def block_shape(scheme: Scheme, shape: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of the scheme's quant block on an (M, N) weight."""
    lay = layout((1, shape[0], shape[1]), scheme)
    return min(lay.block[0], shape[0]), lay.block[1]


def weight_magnitude(weights: Sequence[np.ndarray], scheme: Scheme) -> np.ndarray:
    """w_bar (N,): |w| / amax of its quant block, averaged over the output rows of every layer."""
    rows = []
    for w in weights:
        a = np.abs(np.asarray(w, dtype=np.float64))
        if scheme.axis in (-1, 1) and scheme.granularity in (Granularity.GROUP, Granularity.TILE):
            g = scheme.group
            n = a.shape[1]
            padded = np.zeros((a.shape[0], -(-n // g) * g))
            padded[:, :n] = a
            blocks = padded.reshape(a.shape[0], -1, g)
            amax = blocks.max(axis=2, keepdims=True)
            a = (blocks / (amax + 1e-6)).reshape(a.shape[0], -1)[:, :n]
        else:  # per row (the reference's fallback for any coarser grid)
            a = a / (a.max(axis=1, keepdims=True) + 1e-6)
        rows.append(a)
    return np.concatenate(rows, axis=0).mean(axis=0)


def candidate_scales(x_mean: np.ndarray, w_mean: np.ndarray, n_grid: int = N_GRID,
                     duo_scaling: bool = True) -> list[tuple[float, np.ndarray]]:
    """[(alpha, s)] for alpha = i / n_grid, i = 0 .. n_grid - 1 (module docstring)."""
    x = np.asarray(x_mean, dtype=np.float64)
    w = np.asarray(w_mean, dtype=np.float64)
    out = []
    for i in range(n_grid):
        alpha = i / n_grid
        s = x**alpha / (w ** (1 - alpha) + 1e-4) if duo_scaling else x**alpha
        s = np.maximum(s, SCALE_FLOOR)
        s = s / np.sqrt(s.max() * s.min())
        s = np.where(np.isfinite(s), s, 1.0)
        out.append((alpha, s))
    return out


def scaled_weight(weight: np.ndarray, scheme: Scheme, col_scales: np.ndarray | None) -> np.ndarray:
    """Q(W diag s) diag(1/s): the effective weight, in the original coordinates (float64)."""
    w = np.asarray(weight, dtype=np.float32)
    if col_scales is None:
        return quantize(w, scheme).dequantize().astype(np.float64)
    s = np.asarray(col_scales, dtype=np.float64)
    q = quantize((w.astype(np.float64) * s).astype(np.float32), scheme).dequantize().astype(np.float64)
    return q / s


def linear_objective(weights: Sequence[np.ndarray], stats: InputStatistics,
                     scheme: Scheme) -> Callable[[np.ndarray | None], float]:
    """loss(s) = sum_i ||(W_i_eff - W_i) X^T||_F^2 / n over every calibration token (from X^T X)."""
    ws = [np.asarray(w, dtype=np.float64) for w in weights]
    xtx32 = stats.xtx.astype(np.float32)

    def loss(scales: np.ndarray | None) -> float:
        total = sum(squared_error(scaled_weight(w, scheme, scales) - w, xtx32) for w in ws)
        return total / max(stats.n, 1)

    return loss


def layer_guard(weights: Sequence[np.ndarray], stats: InputStatistics,
                scheme: Scheme) -> Callable[[np.ndarray], bool]:
    """guard(s): True when every layer's own output error with s is no larger than with RTN (s = 1),
    over every calibration token (from X^T X)."""
    ws = [np.asarray(w, dtype=np.float64) for w in weights]
    xtx32 = stats.xtx.astype(np.float32)

    def squared(w: np.ndarray, scales: np.ndarray | None) -> float:
        return squared_error(scaled_weight(w, scheme, scales) - w, xtx32)

    rtn = [squared(w, None) for w in ws]
    return lambda scales: all(squared(w, scales) <= base for w, base in zip(ws, rtn, strict=True))


def search_scales(x_mean: np.ndarray, weights: Sequence[np.ndarray], scheme: str | Scheme,
                  loss: Callable[[np.ndarray | None], float], n_grid: int = N_GRID,
                  duo_scaling: bool = True, guard: Callable[[np.ndarray], bool] | None = None) -> ScaleSearch:
    """The grid search of the module docstring: the best of s = 1 and the n_grid candidates.

    With a guard, a candidate it rejects cannot win (its loss is still recorded)."""
    s = parse_scheme(scheme)
    identity = loss(None)
    best = ScaleSearch(None, np.ones(len(x_mean)), identity, identity)
    for alpha, scales in candidate_scales(x_mean, weight_magnitude(weights, s), n_grid, duo_scaling):
        value = loss(scales)
        best.losses.append((alpha, value))
        if value < best.loss and (guard is None or guard(scales)):
            best.alpha, best.scales, best.loss = alpha, scales, value
    return best


def clip_applies(scheme: Scheme, shape: tuple[int, int]) -> bool:
    """Clipping chooses per (row, group): the scheme's blocks must be single rows along the input axis."""
    rows, _ = block_shape(scheme, shape)
    return rows == 1 and scheme.axis in (-1, 1) and scheme.granularity is not Granularity.COL and not scheme.outliers


def search_clip(weight: np.ndarray, xtx: np.ndarray, scheme: str | Scheme, n_grid: int = CLIP_GRID,
                max_shrink: float = MAX_SHRINK) -> tuple[np.ndarray, np.ndarray]:
    """(clipped weight, chosen ratio per (row, group)) minimising each group's output error d^T S_gg d."""
    s = parse_scheme(scheme)
    w = np.asarray(weight, dtype=np.float32)
    m, n = w.shape
    if not clip_applies(s, (m, n)):
        raise ValueError(f"clipping chooses a clip value per row and group; scheme {s} has no single-row groups")
    _, g = block_shape(s, (m, n))
    g = min(g, n)
    n_groups = -(-n // g)
    starts = [k * g for k in range(n_groups)]
    amax = np.stack([np.abs(w[:, c : c + g]).max(axis=1) for c in starts], axis=1)  # (m, groups)
    best_err = np.full((m, n_groups), np.inf)
    best_ratio = np.ones((m, n_groups))
    w64 = w.astype(np.float64)
    blocks = [np.ascontiguousarray(xtx[c : c + g, c : c + g], dtype=np.float32) for c in starts]
    for i in range(int(max_shrink * n_grid)):
        ratio = 1 - i / n_grid
        limit = np.repeat(amax * ratio, g, axis=1)[:, :n].astype(np.float32)
        clipped = np.clip(w, -limit, limit)
        d = (quantize(clipped, s).dequantize().astype(np.float64) - w64).astype(np.float32)
        err = np.stack([((d[:, c : c + g] @ blocks[k]) * d[:, c : c + g]).sum(axis=1, dtype=np.float64)
                        for k, c in enumerate(starts)], axis=1)
        better = err < best_err
        best_err[better] = err[better]
        best_ratio[better] = ratio
    limit = np.repeat(amax * best_ratio, g, axis=1)[:, :n].astype(np.float32)
    return np.clip(w, -limit, limit), best_ratio


def avoid_clipping(name: str) -> bool:
    """q_proj / k_proj (and fused or BERT-style query / key) are not clipped, as in the reference."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith(("q_", "k_", "query", "key", "Wqkv"))


def rescale(weight: Any, col_scales: np.ndarray | None, row_scales: np.ndarray | None) -> np.ndarray:
    """diag(1/r) W diag(c) in float32: a layer's weight after the folds (c: its input scales, r: its output's)."""
    w = as_numpy(weight, np.float64)
    if col_scales is not None:
        w = w * np.asarray(col_scales, dtype=np.float64)[None, :]
    if row_scales is not None:
        w = w / np.asarray(row_scales, dtype=np.float64)[:, None]
    return w.astype(np.float32)


def unscale(weight: np.ndarray, col_scales: np.ndarray | None, row_scales: np.ndarray | None) -> np.ndarray:
    """diag(r) W' diag(1/c) in float64: a folded layer's weight back in the original coordinates."""
    w = np.asarray(weight, dtype=np.float64)
    if col_scales is not None:
        w = w / np.asarray(col_scales, dtype=np.float64)[None, :]
    if row_scales is not None:
        w = w * np.asarray(row_scales, dtype=np.float64)[:, None]
    return w


def quantize_layer(weight: np.ndarray, scheme: Scheme, col_scales: np.ndarray | None, row_scales: np.ndarray | None,
                   layer_error: LayerOutputError, clip: bool,
                   name: str = "") -> tuple[QuantizedTensor, np.ndarray, np.ndarray | None]:
    """(stored weight, effective weight, clip ratios or None) of one layer after the folds.

    The stored weight is quant.quantize of diag(1/r) W diag(c) (clipped first where clipping applies and
    lowers the layer's whole output error, `layer_error` of the effective weight); the effective weight is
    its dequantized value back in the original coordinates, diag(r) W_q diag(1/c) (float64)."""
    folded = rescale(weight, col_scales, row_scales)
    q = quantize(folded, scheme)
    w_eff = unscale(q.dequantize(), col_scales, row_scales)
    ratios = None
    if clip and clip_applies(scheme, folded.shape) and not avoid_clipping(name):
        stats = layer_error.stats
        xtx = stats.xtx if col_scales is None else stats.xtx / np.outer(col_scales, col_scales)
        clipped, ratios = search_clip(folded, xtx, scheme)
        q_clip = quantize(clipped, scheme)
        eff_clip = unscale(q_clip.dequantize(), col_scales, row_scales)
        if layer_error(eff_clip) < layer_error(w_eff):
            q, w_eff = q_clip, eff_clip
        else:
            ratios = np.ones_like(ratios)
    return q, w_eff, ratios
