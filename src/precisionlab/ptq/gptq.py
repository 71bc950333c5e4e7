"""GPTQ (Frantar et al., 2023): quantize a linear weight column by column, each column's rounding
error spread over the columns not yet quantized, weighted by the inverse Hessian of the layer's
calibration inputs.

    H = 2 X^T X / n                 X: (n tokens, in) calibration inputs of the layer
    H <- H + lambda I,  lambda = damp * mean(diag H)         (damp = 1% by default)
    U = upper Cholesky factor of H^-1  (H^-1 = U^T U)
    for each input column j (in order, or by decreasing diag H with act_order):
        q_j   = quant(w_j)                        on the scheme's grid (`ptq.grid`)
        e_j   = (w_j - q_j) / U[j, j]
        w_k  -= e_j * U[j, k]        for every later column k

Columns are processed in blocks of `block_size` (128): inside a block the update is applied
column by column, the later columns receive the whole block's errors at once
(W[:, later] -= E_block U[block, later]), which is the same arithmetic reordered.

Details that matter (and where this differs from the reference code, why):
- U is computed without forming H^-1: with J the reversal permutation, U = J L^-1 J where
  L = chol(J H J) (one Cholesky factorisation and one triangular inverse, in float64).
- Dead input columns (diag H = 0: the input was always zero on the calibration data) are
  decoupled from the others (their row and column of H zeroed, the diagonal set to the mean
  of the live diagonal), so their rounding error moves nothing. Their weights are rounded to
  the grid like any other column, not zeroed as the reference code does: a column without
  calibration signal is not known to be dead on other inputs. The damping mean is taken over
  the live columns (the reference sets dead diagonals to 1 first, which makes lambda depend
  on the units of H).
- When the Cholesky factorisation fails, the damping is multiplied by `damp_growth` (2) and
  tried again, up to `max_damp` (100% of mean(diag H)); the damping actually used is
  returned. If it still fails, the result says so (status "failed") and holds no weight:
  never a silent fallback to round-to-nearest.
- The default is act-order with static groups (as llm-compressor's GPTQModifier defaults to
  actorder="static"): columns swept by decreasing diag H, every group's scales fitted from the
  original weight before the sweep, the stored layout unchanged. With act_order=False and
  static_groups=False (the paper's order) a group's scales are fitted from the current (already
  updated) values of its columns when the sweep reaches its first column. act_order with
  static_groups=False on a grouped scheme is refused: groups of consecutive columns in the
  permuted order would need a g_idx table, which is not the scheme's layout.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.peers import as_numpy
from precisionlab.ptq.grid import ColumnGrid, check_columnwise, finite_amax
from precisionlab.quant.scheme import Scheme
from precisionlab.quant.tensor import QuantizedTensor

DEFAULT_BLOCK = 128
DEFAULT_DAMP = 0.01
DAMP_GROWTH = 2.0
MAX_DAMP = 1.0


class HessianNotPositiveDefinite(ValueError):
    """H + lambda I has no Cholesky factorisation at any damping up to the maximum."""


@dataclass
class GPTQResult:
    """What GPTQ did to one weight."""

    status: str
    """"ok", or "failed" (then `quantized` and `weight` are None and `message` says why)."""
    quantized: QuantizedTensor | None
    weight: np.ndarray | None
    """The dequantized weight (float32, the layer's shape): what a kernel reading `quantized` sees."""
    damping: float | None
    """The damping used, as a fraction of mean(diag H) (the last one tried when failed)."""
    damping_tries: int
    dead_columns: int
    seconds: float
    message: str = ""
    options: dict[str, Any] = field(default_factory=dict)


def inverse_hessian_factor(hessian: Any, damp: float = DEFAULT_DAMP, damp_growth: float = DAMP_GROWTH,
                           max_damp: float = MAX_DAMP, backend: str = "auto") -> tuple[np.ndarray, float, int]:
    """(U, damping used, tries): U upper triangular with U^T U = (H + damp * mean(diag H) I)^-1 (float64).

    The damping starts at `damp` and is multiplied by `damp_growth` after every failed
    factorisation, the last try at exactly `max_damp`; HessianNotPositiveDefinite if none works.
    backend "auto": torch when it is installed (LAPACK through MKL: several times faster than
    numpy's here), else numpy; or "torch" / "numpy"."""
    if backend not in ("auto", "torch", "numpy"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'numpy', got {backend!r}")
    h = np.asarray(as_numpy(hessian), dtype=np.float64)
    diagonal = np.diag(h)[::-1].copy()
    mean = float(diagonal.mean())
    if not mean > 0:
        raise HessianNotPositiveDefinite(f"mean(diag H) = {mean:.3g}: the Hessian carries no calibration signal")
    use_torch = backend == "torch" or (backend == "auto" and importlib.util.find_spec("torch") is not None)
    factor = _torch_factor if use_torch else _numpy_factor
    d, tries = float(damp), 0
    while True:
        tries += 1
        damped = np.ascontiguousarray(h[::-1, ::-1])  # J H J: one N x N copy per try, shifted in place
        damped[np.diag_indices_from(damped)] = diagonal + d * mean
        inv = factor(damped)
        del damped
        if inv is not None and np.isfinite(inv).all():
            return np.ascontiguousarray(inv[::-1, ::-1]), d, tries
        if d >= max_damp:
            raise HessianNotPositiveDefinite(f"H + lambda I is not positive definite up to damping {max_damp:g} x "
                                             f"mean(diag H) ({tries} tries)")
        d = min(d * damp_growth, max_damp)


def _torch_factor(a: np.ndarray) -> np.ndarray | None:
    """L^-1 for L = chol(a), or None when a is not positive definite."""
    torch = peers.torch("GPTQ")
    lower, info = torch.linalg.cholesky_ex(torch.from_numpy(a))
    if int(info) != 0:
        return None
    eye = torch.eye(a.shape[0], dtype=torch.float64)
    return np.asarray(torch.linalg.solve_triangular(lower, eye, upper=False).numpy())


def _numpy_factor(a: np.ndarray) -> np.ndarray | None:
    try:
        lower = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return None
    return np.asarray(np.linalg.inv(lower))


def prepare_hessian(hessian: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(H with dead columns decoupled, dead mask): float64, validated (square, finite, symmetric)."""
    h = np.array(as_numpy(hessian), dtype=np.float64)
    if h.shape != (n, n):
        raise ValueError(f"the Hessian must be ({n}, {n}) for a weight with {n} input columns, got {h.shape}")
    if not np.isfinite(h).all():
        raise ValueError("the Hessian holds NaN or inf")
    scale = float(np.abs(h).max()) or 1.0
    if float(np.abs(h - h.T).max()) > 1e-6 * scale:
        raise ValueError("the Hessian is not symmetric (expected 2 X^T X / n)")
    diag = np.diag(h).copy()
    dead = diag == 0
    if dead.all():
        raise ValueError("every input column is dead (diag H = 0): no calibration signal reached this layer")
    if dead.any():
        live_mean = float(diag[~dead].mean())
        h[dead, :] = 0.0
        h[:, dead] = 0.0
        h[dead, dead] = live_mean
    return h, dead


def gptq_quantize(weight: Any, hessian: Any, scheme: str | Scheme, *, block_size: int = DEFAULT_BLOCK,
                  damp: float = DEFAULT_DAMP, damp_growth: float = DAMP_GROWTH, max_damp: float = MAX_DAMP,
                  act_order: bool = True, static_groups: bool = True, dtype: str = "float32") -> GPTQResult:
    """GPTQ of one (out, in) weight under `scheme` with the layer's input Hessian (see the module docstring).

    `dtype` is the working precision of the sweep ("float32", as the reference, or "float64");
    the factorisation is always float64. The codes are on the scheme's own grid and the result
    dequantizes to `GPTQResult.weight` exactly."""
    start = time.perf_counter()
    w_np = as_numpy(weight)
    if w_np.dtype.kind != "f":
        raise TypeError(f"GPTQ needs a float weight, got dtype {w_np.dtype}")
    s = check_columnwise(scheme, w_np.shape)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not 0 < damp <= max_damp:
        raise ValueError(f"damp must be in (0, max_damp={max_damp:g}], got {damp:g}")
    if damp_growth <= 1:
        raise ValueError(f"damp_growth must be > 1, got {damp_growth:g}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    if not np.isfinite(w_np).all():
        raise ValueError("the weight holds NaN or inf")
    work_np = np.float32 if dtype == "float32" else np.float64
    m, n = w_np.shape
    h, dead = prepare_hessian(hessian, n)
    grid = ColumnGrid(s, (m, n), tensor_amax=finite_amax(w_np), dtype_name=str(w_np.dtype))
    if act_order and grid.n_groups > 1 and not static_groups:
        raise ValueError(f"act_order with the grouped scheme {s} needs static_groups=True: groups fitted in the "
                         "permuted order are not the scheme's layout (they need a g_idx)")
    options = {"block_size": block_size, "act_order": act_order, "static_groups": static_groups, "dtype": dtype}
    w0 = w_np.astype(work_np, copy=False)
    upfront = static_groups or act_order  # act_order: one group (per tensor / row), fitted from the original
    if upfront:
        for k in range(grid.n_groups):
            c0, c1 = grid.group_columns(k)
            grid.fit(k, w0[:, c0:c1])
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(n)
    try:
        u, used, tries = inverse_hessian_factor(h[np.ix_(perm, perm)] if act_order else h, damp, damp_growth,
                                                max_damp)
    except HessianNotPositiveDefinite as exc:
        return GPTQResult("failed", None, None, max_damp, -1, int(dead.sum()), time.perf_counter() - start,
                          str(exc), options)
    # the sweep runs in numpy: its many small updates are single-threaded there, without the
    # thread-pool synchronisation that torch pays on every small CPU op
    ut = u.astype(work_np)
    del u, h
    wt = np.ascontiguousarray(w0.T[perm])  # row i: the i-th column swept (a copy)
    deq = np.empty((n, m), dtype=np.float32)
    fit_on_arrival = not upfront
    for i1 in range(0, n, block_size):
        i2 = min(i1 + block_size, n)
        block = wt[i1:i2]
        errors = np.empty((i2 - i1, m), dtype=work_np)
        u_block = ut[i1:i2, i1:i2]
        for i in range(i2 - i1):
            j = i1 + i
            column = int(perm[j])
            if fit_on_arrival and column % grid.block_cols == 0:
                group = grid.group_of(column)
                grid.fit(group, _current_group(wt, ut, errors, i1, i2, j, grid.group_columns(group)[1] - column))
            w = block[i]
            q = grid.quantize_column(column, w)
            deq[j] = q
            err = (w - q) / u_block[i, i]
            if i + 1 < i2 - i1:
                block[i + 1 :] -= np.outer(u_block[i, i + 1 :], err)
            errors[i] = err
        if i2 < n:
            wt[i2:] -= ut[i1:i2, i2:].T @ errors
    out = np.empty((m, n), dtype=np.float32)
    out[:, perm] = deq.T
    return GPTQResult("ok", grid.result(), out, used, tries, int(dead.sum()), time.perf_counter() - start, "",
                      options)


def _current_group(wt: np.ndarray, ut: np.ndarray, errors: np.ndarray, i1: int, i2: int, j: int,
                   width: int) -> np.ndarray:
    """The (M, width) values of swept columns j .. j+width-1 as they stand now.

    Columns inside the current block already carry every update; columns past it still owe the
    block's errors so far (the lazy update), which are applied here to a copy."""
    inside = wt[j : min(j + width, i2)]
    if j + width <= i2:
        return inside.T
    beyond = wt[i2 : j + width] - ut[i1:j, i2 : j + width].T @ errors[: j - i1]
    return np.concatenate([inside, beyond], axis=0).T
